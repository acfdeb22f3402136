"""``decontaminate``: remove documents that contain text of evaluation sets.

Each listed evaluation set (JSONL, optionally ``.gz``/``.zst``, parquet or txt: one item
per line) gives the n-grams of the fields that hold questions, choices and answers
(:mod:`dataforge.ops.eval_ngrams`: the same normalization on both sides, one token stream
where each Chinese character and each Latin word or number is a token; character-sized
n-grams for mostly Chinese fields, word-sized ones otherwise, and a short field as one
n-gram of its own). ``prepare`` finds them in each document; ``mode: drop`` drops a
document with any match (reason ``decontaminate:<set name>``, the first set in config
order that matched); ``mode: cut`` removes the lines holding matched n-grams and drops the
document only when nothing is left. The planner (:mod:`dataforge.ops.decontaminate.planner`)
writes every matched span to ``OUT/decontaminate/matches.jsonl`` for audit and names, per
set, how many documents matched (the manifest's stage summary).
"""

from __future__ import annotations

import dataclasses
import gzip
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dataforge.ops.barrier import BarrierContext
from dataforge.ops.base import BarrierOp
from dataforge.ops.eval_ngrams import (
    item_ngrams,
    ngram_hashes,
    normalize,
    span_text,
    tokens,
    units,
    windows_of_documents,
    word_values,
)
from dataforge.records import DROP

__all__ = ["MATCHES", "Decontaminate", "EvalSet"]

MATCHES = "_decontam"
DROP_REASON = "decontaminate"
MAX_SPANS = 20
"""Spans kept per document for the audit (a document copying a whole test set needs no more)."""


@dataclasses.dataclass(frozen=True)
class EvalSet:
    """One evaluation set."""

    path: str
    """File or glob: ``.jsonl`` (``.gz``, ``.zst``), ``.parquet``, or ``.txt`` (an item per line)."""
    fields: tuple[str, ...] = ("text",)
    """Keys whose text is searched for (question, choices, answer); ignored for txt."""
    name: str | None = None
    """Name in drop reasons and the summary; default: the file name without suffixes."""

    def __post_init__(self) -> None:
        if not self.fields:
            raise ValueError("fields: give at least one key")

    @property
    def label(self) -> str:
        return self.name or Path(self.path).name.split(".")[0]


class Decontaminate(BarrierOp):
    """Drop (or cut) documents holding n-grams of evaluation sets."""

    name: ClassVar[str] = "decontaminate"

    @dataclasses.dataclass(frozen=True)
    class Config:
        eval_sets: tuple[EvalSet, ...]
        mode: Literal["drop", "cut"] = "drop"
        """``drop`` the document, or ``cut`` the lines that hold matches."""
        word_ngram: int = 13
        """Tokens per n-gram for a field mostly of words: 13, as GPT-3's decontamination;
        a 13-word run is rare outside copies, and any 15-word quote holds three of them."""
        char_ngram: int = 25
        """Tokens per n-gram for a field whose tokens are mostly Chinese characters: about
        13 words' worth (a Chinese word averages under two characters); stock phrases
        and idioms stay far shorter, and a 60-character quote holds 36 of them."""
        min_item_words: int = 8
        """A field shorter than its n-gram is one n-gram of its own when it holds at
        least this many words (a Chinese character counts half): a 10-word question
        is found, an answer letter or a four-character idiom is not."""

        def __post_init__(self) -> None:
            if not self.eval_sets:
                raise ValueError("eval_sets: list at least one {path, fields}")
            labels = [s.label for s in self.eval_sets]
            twice = sorted({x for x in labels if labels.count(x) > 1})
            if twice:
                raise ValueError(f"eval_sets: names {twice} repeat; give each a distinct name")
            for key in ("word_ngram", "char_ngram"):
                if getattr(self, key) < 3:
                    raise ValueError(f"{key} must be >= 3, got {getattr(self, key)}")
            if not 3 <= self.min_item_words <= self.word_ngram:
                raise ValueError(
                    f"min_item_words must be in [3, word_ngram={self.word_ngram}], "
                    f"got {self.min_item_words}"
                )

    def validate(self) -> list[str]:
        problems = []
        for i, spec in enumerate(self.config.eval_sets):
            try:
                items = sum(1 for _ in self._items(spec))
            except (OSError, ValueError) as exc:
                problems.append(f"eval_sets[{i}] {spec.path}: {exc}")
                continue
            if items == 0:
                problems.append(
                    f"eval_sets[{i}] {spec.path}: no item has fields {list(spec.fields)}"
                )
        return problems

    # -- evaluation sets ----------------------------------------------------------------
    def _items(self, spec: EvalSet) -> Iterator[tuple[str, list[str]]]:
        """(item id, field texts) of one set; items without any of the fields are skipped."""
        from dataforge.io.files import match_files

        for file in match_files(str(self.context.locate(spec.path))):
            fields = ("text",) if ".txt" in file.path.lower() else spec.fields
            for lineno, obj in _records(file.path):
                texts = [_as_text(obj.get(f)) for f in fields] if obj is not None else []
                texts = [t for t in texts if t]
                if texts:
                    yield f"{file.relpath}:{lineno}", texts

    def setup(self) -> None:
        """Hash every set's n-grams: per set a sorted array, the item of each hash and the
        window lengths (in tokens) its n-grams have."""
        cfg = self.config
        self.sets: list[tuple[str, np.ndarray, np.ndarray, list[str], tuple[int, ...]]] = []
        self.set_stats: dict[str, dict[str, int]] = {}
        for spec in cfg.eval_sets:
            hashes, owners, ids, lengths = [], [], [], set()
            for item_id, texts in self._items(spec):
                for text in texts:
                    h, n = item_ngrams(text, cfg.word_ngram, cfg.char_ngram, cfg.min_item_words)
                    if len(h):
                        hashes.append(h)
                        owners.append(np.full(len(h), len(ids), np.int64))
                        lengths.add(n)
                ids.append(item_id)
            all_h = np.concatenate(hashes) if hashes else np.zeros(0, np.uint64)
            all_o = np.concatenate(owners) if owners else np.zeros(0, np.int64)
            uniq, first = np.unique(all_h, return_index=True)
            self.sets.append((spec.label, uniq, all_o[first], ids, tuple(sorted(lengths))))
            self.set_stats[spec.label] = {"items": len(ids), "ngrams": len(uniq)}

    # -- per batch ------------------------------------------------------------------------
    def prepare(self, batch: pa.Table) -> pa.Table:
        """Add ``_decontam``: null, or JSON ``{"lines": [...], "spans": [...]}`` of the matches."""
        if not hasattr(self, "sets"):
            self.setup()
        texts = [normalize(t or "") for t in batch.column("text").to_pylist()]
        hit = self._documents_with_hits(texts)
        found = [
            self.matches(t, normalized=True) if i in hit else None for i, t in enumerate(texts)
        ]
        column = pa.array([json.dumps(f, ensure_ascii=False) if f else None for f in found])
        if MATCHES in batch.column_names:
            batch = batch.drop_columns([MATCHES])
        return batch.append_column(MATCHES, column.cast(pa.string()))

    def _documents_with_hits(self, texts: list[str]) -> set[int]:
        """Indices of the normalized texts holding any n-gram of any set, found for the
        whole batch in a few array operations (:meth:`matches` then locates them)."""
        lengths = sorted({n for *_, set_lengths in self.sets for n in set_lengths})
        windows = windows_of_documents([tokens(t) for t in texts], lengths)
        hits: set[int] = set()
        for _, table, _, _, set_lengths in self.sets:
            for n in set_lengths:
                hashes, docs = windows[n]
                if len(hashes):
                    pos = np.minimum(np.searchsorted(table, hashes), len(table) - 1)
                    hits.update(np.unique(docs[table[pos] == hashes]).tolist())
        return hits

    def matches(self, text: str, normalized: bool = False) -> dict[str, Any] | None:
        """The lines and spans of ``text`` that hold n-grams of the sets (None: none)."""
        u = units(text if normalized else normalize(text))
        values = word_values(u.tokens)
        windows: dict[int, np.ndarray] = {}
        lines: set[int] = set()
        spans: list[dict[str, Any]] = []
        for label, table, owners, ids, set_lengths in self.sets:
            covered = np.zeros(len(u.tokens) + 1, bool)
            first_item: dict[int, int] = {}  # window start -> item of its n-gram
            for n in set_lengths:
                if n not in windows:
                    windows[n] = ngram_hashes(values, n)
                hashes = windows[n]
                if not len(table) or not len(hashes):
                    continue
                pos = np.minimum(np.searchsorted(table, hashes), len(table) - 1)
                for i in np.flatnonzero(table[pos] == hashes).tolist():
                    covered[i : i + n] = True
                    first_item.setdefault(i, int(owners[pos[i]]))
            if not first_item:
                continue
            lines.update(np.unique(u.lines[covered[:-1]]).tolist())
            edges = np.flatnonzero(np.diff(np.concatenate([[False], covered])))
            for start, end in zip(edges[::2].tolist(), edges[1::2].tolist(), strict=True):
                if len(spans) < MAX_SPANS:
                    spans.append({
                        "eval_set": label,
                        "item": ids[first_item[start]],
                        "span": span_text(u.tokens[start:end]),
                    })  # fmt: skip
        if not spans:
            return None
        return {"sets": sorted({s["eval_set"] for s in spans}, key=self._order), "lines":
                sorted(lines), "spans": spans}  # fmt: skip

    def _order(self, label: str) -> int:
        return [s.label for s in self.config.eval_sets].index(label)

    def plan(self, ctx: BarrierContext) -> dict[str, Any]:
        """The global decision over all prepared parts (:mod:`dataforge.ops.decontaminate.planner`)."""
        from dataforge.ops.decontaminate.planner import plan  # deferred: it imports this module

        return plan(self, ctx)

    def apply(self, batch: pa.Table, decision: Any) -> pa.Table:
        """Drop matched documents (``drop``) or cut their matched lines (``cut``)."""
        found = batch.column(MATCHES).to_pylist() if MATCHES in batch.column_names else []
        if not any(found):
            return batch
        live = pc.is_null(batch.column(DROP)).to_pylist()
        reasons = batch.column(DROP).to_pylist()
        texts = batch.column("text").to_pylist()
        for i, raw in enumerate(found):
            if not raw or not live[i]:
                continue
            match = json.loads(raw)
            reason = f"{DROP_REASON}:{match['sets'][0]}"
            if self.config.mode == "drop":
                reasons[i] = reason
                continue
            cut = set(match["lines"])
            kept = [line for j, line in enumerate(texts[i].split("\n")) if j not in cut]
            texts[i] = "\n".join(kept)
            self.events["decontaminate:cut_lines"] += len(cut)
            if not texts[i].strip():
                reasons[i] = reason
            else:
                self.events[f"{reason}:cut_docs"] += 1
        batch = batch.set_column(
            batch.schema.get_field_index(DROP), DROP, pa.array(reasons, pa.string())
        )
        return batch.set_column(
            batch.schema.get_field_index("text"), "text", pa.array(texts, pa.string())
        )


def _as_text(value: Any) -> str:
    """A field's text: strings as they are, lists and mappings (choices) their values joined."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return "\n".join(_as_text(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return "\n".join(_as_text(v) for v in value)
    return str(value)


def _records(path: str) -> Iterator[tuple[int, dict[str, Any] | None]]:
    """(line or row number, record) of one eval file; a txt line is ``{"text": line}``."""
    from dataforge.io import fs

    name = path.lower()
    if name.endswith(".parquet"):
        import pyarrow.parquet as pq

        with fs.open_input_file(path) as f:
            for i, row in enumerate(pq.read_table(f).to_pylist(), 1):
                yield i, row
        return
    with fs.open_input_stream(path) as raw:
        if name.endswith(".gz"):
            raw = gzip.GzipFile(fileobj=raw)
        elif name.endswith(".zst"):
            import zstandard

            raw = zstandard.ZstdDecompressor().stream_reader(raw)
        text = io.TextIOWrapper(raw, encoding="utf-8")
        if ".jsonl" in name or ".json" in name:
            for i, line in enumerate(text, 1):
                if line.strip():
                    try:
                        obj = json.loads(line)
                    except json.JSONDecodeError as exc:
                        raise ValueError(f"{path}:{i}: not JSON ({exc.msg})") from exc
                    yield i, obj if isinstance(obj, dict) else None
        elif ".txt" in name:
            for i, line in enumerate(text, 1):
                yield i, {"text": line.rstrip("\n")} if line.strip() else None
        else:
            raise ValueError(f"{path}: unknown suffix; valid: .jsonl(.gz/.zst), .parquet, .txt")
