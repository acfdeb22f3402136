"""Planner of the ``quality_classifier`` barrier: the top share of each source, run-wide.

With ``keep_top``, each source keeps its ``round(keep_top * n)`` documents with the highest
(score, id hash) keys, the hash keyed by the pipeline seed (``_qc_tie``), so equal scores are
cut by a property of the document, never by the task or batch it came in. The parts are read
once for the keys of every live document (two 8-byte numbers each), once per task to write
the ``_ord`` of its dropped rows. Where the keys pass a quarter of the planner's memory budget
they are not held: each source's cut is found by a radix selection over the parts (a pass
counts the next 16 bits of the keys that share the cut's prefix, until the keys left fit;
:mod:`dataforge.ops.barrier.rank_select`), the same cut as the in-memory sort. Without ``keep_top`` nothing is written: ``apply``
judges each row by its own score. Rows of a language no model serves (score NaN) are
kept and left out of the ranking; the summary counts them per source and language
(``unscored``). Ray is not needed.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from dataforge.ops.barrier import BarrierContext
from dataforge.ops.barrier.rank_select import KEY_BYTES, key_at_rank
from dataforge.ops.quality_classifier import SCORE, TIE, QualityClassifier
from dataforge.records import ORD

__all__ = ["plan"]

_COLUMNS = ["source", "lang", ORD, SCORE, TIE]


def _read(path) -> pa.Table | None:
    file = pq.ParquetFile(path)
    if file.metadata.num_rows == 0:
        return None
    return file.read(columns=_COLUMNS)


def plan(op: QualityClassifier, ctx: BarrierContext) -> dict[str, Any]:
    """Write per-task drop decisions for ``keep_top``; return per-source counts and cuts."""
    cfg = op.config
    held = None if ctx.memory_bytes is None else ctx.memory_bytes // 4 // KEY_BYTES
    keys: dict[str, list[tuple[np.ndarray, np.ndarray]]] | None = {}
    counts: Counter[str] = Counter()
    sums: dict[str, float] = {}
    unscored: dict[str, Counter] = {}
    for task in sorted(ctx.parts):
        table = _read(ctx.parts[task])
        if table is None:
            continue
        for source, score, tie, langs in _by_source(table):
            scored = ~np.isnan(score)
            counts[source] += int(scored.sum())
            sums[source] = sums.get(source, 0.0) + float(score[scored].sum())
            if keys is not None:
                keys.setdefault(source, []).append((score[scored], tie[scored]))
            if not scored.all():
                unscored.setdefault(source, Counter()).update(langs[~scored].tolist())
        if keys is not None and held is not None and counts.total() > held:
            keys = None  # past the budget: cuts by radix selection over the parts
    cuts: dict[str, tuple[float, int, int]] = {}  # source -> (score, tie, kept docs)
    summary: dict[str, Any] = {"name": cfg.name, "keep_top": cfg.keep_top, "sources": {}}
    for source in sorted(sums):
        n = counts[source]
        summary["sources"][source] = {
            "scored_docs": n,
            # rounded: the sum's last bits depend on how the parts split the records
            "mean_score": round(sums[source] / n, 9) if n else None,
        }
        if source in unscored:
            summary["sources"][source]["unscored"] = dict(sorted(unscored[source].items()))
        if cfg.keep_top is None:
            continue
        keep = int(round(cfg.keep_top * n))
        if keep == 0:
            cuts[source] = (np.inf, 0, 0)
        elif keys is not None:
            score = np.concatenate([s for s, _ in keys[source]])
            tie = np.concatenate([t for _, t in keys[source]])
            last = np.lexsort((tie, score))[::-1][keep - 1]  # descending (score, tie)
            cuts[source] = (float(score[last]), int(tie[last]), keep)
        else:
            score, tie = key_at_rank(_source_keys(ctx, source), n - keep, held or 1)
            cuts[source] = (score, tie, keep)
        summary["sources"][source] |= {"kept_docs": keep, "cut_score": cuts[source][0]}
    if cfg.keep_top is not None:
        _write_decisions(ctx, cuts)
    return summary


def _source_keys(ctx: BarrierContext, source: str):
    """A reader of ``source``'s scored (score, tie) keys, part by part in task order."""

    def parts():
        for task in sorted(ctx.parts):
            table = _read(ctx.parts[task])
            if table is None:
                continue
            for name, score, tie, _ in _by_source(table):
                if name == source:
                    scored = ~np.isnan(score)
                    yield score[scored], tie[scored]

    return parts


def _by_source(table: pa.Table):
    sources = np.asarray(table.column("source").to_pylist(), dtype=object)
    score = table.column(SCORE).to_numpy()
    tie = table.column(TIE).to_numpy()
    langs = np.asarray(table.column("lang").to_pylist(), dtype=object)
    for source in sorted(set(sources.tolist())):
        mask = sources == source
        yield source, score[mask], tie[mask], langs[mask]


def _write_decisions(ctx: BarrierContext, cuts: dict[str, tuple[float, int, int]]) -> None:
    """``<task>.parquet`` with the ``_ord`` of each row below its source's cut key."""
    ctx.decision_dir.mkdir(parents=True, exist_ok=True)
    for task in sorted(ctx.parts):
        table = _read(ctx.parts[task])
        if table is None:
            continue
        sources = np.asarray(table.column("source").to_pylist(), dtype=object)
        score = table.column(SCORE).to_numpy()
        tie = table.column(TIE).to_numpy()
        # a source whose rows are all unscored has no cut: none of its rows is below one
        cut = [cuts.get(s, (-np.inf, 0, 1)) for s in sources]
        cut_score = np.array([c[0] for c in cut], np.float64)
        cut_tie = np.array([c[1] for c in cut], np.uint64)
        none_kept = np.array([c[2] == 0 for c in cut], bool)
        below = (score < cut_score) | ((score == cut_score) & (tie < cut_tie)) | none_kept
        below &= ~np.isnan(score)  # unscored rows are kept
        if not below.any():
            continue
        ords = table.column(ORD).to_numpy()[below].astype(np.int64)
        target = ctx.decision_dir / f"{task}.parquet"
        tmp = target.with_name(f".{target.name}.tmp")
        pq.write_table(pa.table({ORD: ords}), tmp)
        os.replace(tmp, target)  # a reader never sees a half-written decision
