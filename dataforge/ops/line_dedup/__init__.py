"""The ``line_dedup`` op: drop lines that occur in many documents of the run (CCNet's
paragraph dedup) or on many pages of one site, the boilerplate an extractor missed.

A barrier stage. ``prepare`` hashes every line of a document after normalization
(:func:`normalize_line`: NFKC, lower case, digits to 0, every character that is not a
letter or digit removed, spaces included, so Chinese lines, which have no spaces between
words, and their full-width punctuation compare the same way as English ones) and keeps
each document's distinct hashes. The planner (:mod:`dataforge.ops.line_dedup.planner`)
counts in how many documents each hash occurs, with memory bounded by spilling hashes to
disk partitions, and ``apply`` removes from each document the lines whose hash occurs in
at least ``min_docs`` documents of the run, or, per site, in at least ``site_fraction`` of
the pages of the document's domain (and at least ``site_min_docs`` of them): a site of 20
pages repeats its navigation 20 times, far below a crawl-wide count. The domain is the host
of ``meta.url`` (``www.`` removed); documents without one are counted crawl-wide only. A
line that normalizes to nothing (blank, a rule of dashes) is never counted nor removed.

Drop reason: ``line_dedup:too_short``, a document that lost lines and has fewer than
``min_doc_chars`` non-space characters left (none left included).
"""

from __future__ import annotations

import dataclasses
import json
import re
import unicodedata
from typing import Any, ClassVar
from urllib.parse import urlsplit

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from dataforge.ops.barrier import BarrierContext
from dataforge.ops.base import BarrierOp
from dataforge.records import DROP, ORD
from dataforge.typed_config import check_range

__all__ = [
    "DOMAIN",
    "HASHES",
    "LineDedup",
    "REMOVE",
    "domain_hash",
    "line_hashes",
    "normalize_line",
    "site_keys",
]

HASHES = "_line_hashes"  # list<uint64>: a document's distinct line hashes (prepare)
DOMAIN = "_line_domain"  # uint64: hash of the document's domain, 0 for none (prepare)
REMOVE = "_line_remove"  # list<uint64>: decision, the hashes to remove from the document
DROP_REASON = "line_dedup:too_short"
_NOT_WORD = re.compile(r"[\W_]+")
_DIGIT = re.compile(r"\d")


def normalize_line(line: str) -> str:
    """The form lines are compared in (see the module docstring)."""
    text = unicodedata.normalize("NFKC", line).lower()
    return _DIGIT.sub("0", _NOT_WORD.sub("", text))


def line_hashes(text: str) -> list[int | None]:
    """xxh64 of each line's normalized form (None for a line that normalizes to nothing)."""
    out: list[int | None] = []
    for line in text.split("\n"):
        norm = normalize_line(line)
        out.append(xxhash.xxh64_intdigest(norm.encode("utf-8")) if norm else None)
    return out


def domain_hash(meta: str | None) -> int:
    """xxh64 of the host of the record's ``url_normalized`` or ``url`` meta (lower case,
    ``www.`` removed); 0 when there is none."""
    fields = json.loads(meta) if meta else {}
    url = fields.get("url_normalized") or fields.get("url") if isinstance(fields, dict) else None
    try:
        host = urlsplit(url).hostname if isinstance(url, str) else None
    except ValueError:
        host = None
    if not host:
        return 0
    host = host.removeprefix("www.")
    return xxhash.xxh64_intdigest(host.encode("utf-8")) or 1


def site_keys(domains: np.ndarray, hashes: np.ndarray) -> np.ndarray:
    """One uint64 per (domain, line hash) pair (splitmix64 of their mix), so that per-site
    counts spill and count like line hashes."""
    with np.errstate(over="ignore"):
        z = hashes ^ (domains * np.uint64(0x9E3779B97F4A7C15))
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


class LineDedup(BarrierOp):
    """Cross-document line dedup (see the module docstring)."""

    name: ClassVar[str] = "line_dedup"

    @dataclasses.dataclass(frozen=True)
    class Config:
        min_docs: int = 10
        """A line found in at least this many documents is removed from all of them."""
        site_fraction: float | None = 0.5
        """A line on at least this share of its domain's pages is removed from them
        (``null``: crawl-wide counts only)."""
        site_min_docs: int = 3
        """... and on at least this many of them."""
        min_doc_chars: int = 50
        """A document that lost lines and keeps fewer non-space characters is dropped."""

        def __post_init__(self) -> None:
            check_range("line_dedup.min_docs", self.min_docs, 2)
            check_range("line_dedup.site_fraction", self.site_fraction, 0.0, 1.0)
            check_range("line_dedup.site_min_docs", self.site_min_docs, 2)
            check_range("line_dedup.min_doc_chars", self.min_doc_chars, 0)

    def prepare(self, batch: pa.Table) -> pa.Table:
        """Add ``_line_hashes`` (each document's distinct line hashes, sorted) and
        ``_line_domain`` (:func:`domain_hash`)."""
        texts = pc.fill_null(batch.column("text"), "").to_pylist()
        hashes = [sorted({h for h in line_hashes(t) if h is not None}) for t in texts]
        domains = [domain_hash(m) for m in batch.column("meta").to_pylist()]
        batch = batch.drop_columns([c for c in (HASHES, DOMAIN) if c in batch.column_names])
        batch = batch.append_column(HASHES, pa.array(hashes, pa.list_(pa.uint64())))
        return batch.append_column(DOMAIN, pa.array(domains, pa.uint64()))

    def plan(self, ctx: BarrierContext) -> dict[str, Any]:
        """The global decision over all prepared parts (:mod:`dataforge.ops.line_dedup.planner`)."""
        from dataforge.ops.line_dedup.planner import plan  # deferred: it imports this module

        return plan(self, ctx)

    def apply(self, batch: pa.Table, decision: pa.Table | None) -> pa.Table:
        """Remove the decided lines (``decision``: ``_ord``, ``_line_remove``) and drop the
        documents left too short; ``_line_hashes`` and ``_line_domain`` are removed."""
        batch = batch.drop_columns([c for c in (HASHES, DOMAIN) if c in batch.column_names])
        if decision is None or decision.num_rows == 0:
            return batch
        remove = dict(
            zip(
                decision.column(ORD).to_pylist(),
                decision.column(REMOVE).to_pylist(),
                strict=True,
            )
        )
        texts = batch.column("text").to_pylist()
        reasons = batch.column(DROP).to_pylist()
        for i, ord_ in enumerate(batch.column(ORD).to_pylist()):
            gone = remove.get(ord_)
            if not gone or reasons[i] is not None:
                continue
            gone_set = set(gone)
            lines = texts[i].split("\n")
            kept = [
                line
                for line, h in zip(lines, line_hashes(texts[i]), strict=True)
                if h not in gone_set
            ]
            texts[i] = "\n".join(kept)
            if len("".join(texts[i].split())) < self.config.min_doc_chars:
                reasons[i], texts[i] = DROP_REASON, ""
        out = batch.set_column(
            batch.schema.get_field_index("text"), "text", pa.array(texts, pa.string())
        )
        return out.set_column(
            out.schema.get_field_index(DROP), DROP, pa.array(reasons, pa.string())
        )


def frequent_mask(values: np.ndarray, frequent: np.ndarray) -> np.ndarray:
    """Which of ``values`` are in the sorted array ``frequent``."""
    if len(frequent) == 0:
        return np.zeros(len(values), dtype=bool)
    pos = np.minimum(np.searchsorted(frequent, values), len(frequent) - 1)
    return frequent[pos] == values
