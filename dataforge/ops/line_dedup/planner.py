"""Planner of the ``line_dedup`` barrier: in how many documents each line hash occurs,
crawl-wide and per domain, with bounded memory, then per task the hashes to remove from
each document.

0. **Sites.** The documents per domain (``_line_domain``) are counted; a domain's
   threshold is ``max(site_min_docs, ceil(site_fraction * its documents))``.
1. **Spill.** The parts' ``_line_hashes`` (each document's distinct hashes) are streamed
   in task order and appended to ``2**bits`` partition files by their top bits, ``bits``
   chosen so that a partition holds about :data:`PARTITION_HASHES` hashes, fewer within
   the planner's memory budget (:func:`~dataforge.ops.barrier.partition_bits`); each entry
   carries the count it must reach. Per-site counting spills (domain, hash) keys
   (:func:`~dataforge.ops.line_dedup.site_keys`) the same way, with the domain's threshold.
2. **Count.** Each partition is loaded alone; ``np.unique`` counts the documents per key
   and the keys that reach their threshold are kept (sorted, since partitions go by top
   bits). Memory: one partition plus the frequent keys.
3. **Decide.** The parts are streamed again; ``decision_dir/<task>.parquet`` lists, for
   each document holding frequent hashes or frequent site keys, ``_ord`` and those line
   hashes (``_line_remove``).

The result depends only on the set of documents, never on tasks, batches or workers.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from dataforge.ops.barrier import BarrierContext, partition_bits
from dataforge.ops.line_dedup import (
    DOMAIN,
    HASHES,
    REMOVE,
    LineDedup,
    frequent_mask,
    site_keys,
)
from dataforge.records import ORD

__all__ = ["PARTITION_HASHES", "plan"]

PARTITION_HASHES = 1 << 25
"""Hashes per spill partition: 256 MB of uint64 counted at a time."""
_READ_ROWS = 1 << 16


def _batches(ctx: BarrierContext, columns: list[str]) -> Iterator[tuple[str, pa.RecordBatch]]:
    for task in sorted(ctx.parts):
        file = pq.ParquetFile(ctx.parts[task])
        if file.metadata.num_rows == 0:
            continue
        for batch in file.iter_batches(batch_size=_READ_ROWS, columns=columns):
            yield task, batch


def _flat(batch: pa.RecordBatch) -> np.ndarray:
    return pc.list_flatten(batch.column(HASHES)).to_numpy().astype(np.uint64, copy=False)


_ENTRY = np.dtype([("key", "<u8"), ("need", "<u4")])
_NEVER = np.iinfo(np.uint32).max


class _Sites:
    """Per-domain thresholds (documents a site key must reach)."""

    def __init__(self, ctx: BarrierContext, fraction: float | None, min_docs: int) -> None:
        domains = [b.column(DOMAIN).to_numpy() for _, b in _batches(ctx, [DOMAIN])]
        all_domains = np.concatenate(domains) if domains else np.zeros(0, np.uint64)
        self.domains, counts = np.unique(all_domains, return_counts=True)
        need = np.maximum(min_docs, np.ceil((fraction or 0) * counts)).astype(np.int64)
        need[(self.domains == 0) | (need > counts) | (fraction is None)] = _NEVER
        self.need = need.astype(np.uint32)

    def entries(self, batch: pa.RecordBatch) -> tuple[np.ndarray, np.ndarray]:
        """(site key, threshold) per line hash of the batch's documents."""
        lengths = pc.list_value_length(batch.column(HASHES)).to_numpy(zero_copy_only=False)
        doc_domains = np.repeat(batch.column(DOMAIN).to_numpy(), lengths)
        need = self.need[np.searchsorted(self.domains, doc_domains)]
        return site_keys(doc_domains, _flat(batch)), need


def _frequent(
    ctx: BarrierContext, spill: Path, entries_of: Callable[[pa.RecordBatch], tuple]
) -> tuple[np.ndarray, int, int]:
    """(sorted keys that reach their threshold, distinct keys, partitions); ``entries_of``
    gives a batch's (keys, thresholds), threshold ``_NEVER`` entries are not spilled."""
    total = sum(len(_flat(b)) for _, b in _batches(ctx, [HASHES]))
    bits = partition_bits(ctx, total, _ENTRY.itemsize, PARTITION_HASHES)
    paths = [spill / f"p{k:05d}.bin" for k in range(1 << bits)]
    files = [open(p, "wb") for p in paths]  # noqa: SIM115 - closed below
    try:
        for _, batch in _batches(ctx, [HASHES, DOMAIN]):
            keys, need = entries_of(batch)
            entries = np.empty(len(keys), _ENTRY)
            entries["key"], entries["need"] = keys, need
            entries = entries[entries["need"] != _NEVER]
            values = entries["key"]
            part = (
                (values >> np.uint64(64 - bits)).astype(np.int64)
                if bits
                else np.zeros(len(values), np.int64)
            )
            order = np.argsort(part, kind="stable")
            bounds = np.searchsorted(part[order], np.arange(len(files) + 1))
            for k in np.flatnonzero(np.diff(bounds)):
                entries[order[bounds[k] : bounds[k + 1]]].tofile(files[k])
    finally:
        for f in files:
            f.close()
    frequent, distinct = [], 0
    for path in paths:
        entries = np.fromfile(path, dtype=_ENTRY)
        path.unlink()
        unique, first, counts = np.unique(entries["key"], return_index=True, return_counts=True)
        distinct += len(unique)
        frequent.append(unique[counts >= entries["need"][first]])
    return np.concatenate(frequent), distinct, len(paths)


def _write_decisions(
    ctx: BarrierContext, frequent: np.ndarray, site_frequent: np.ndarray
) -> tuple[int, int]:
    """Per task decisions; returns (documents touched, document-line pairs removed)."""
    ctx.decision_dir.mkdir(parents=True, exist_ok=True)
    tables: dict[str, list[pa.Table]] = {}
    docs = pairs = 0
    last = None
    for task, batch in [*_batches(ctx, [ORD, HASHES, DOMAIN]), (None, None)]:
        if last is not None and task != last and tables.get(last):
            target = ctx.decision_dir / f"{last}.parquet"
            tmp = target.with_name(f".{target.name}.tmp")
            pq.write_table(pa.concat_tables(tables.pop(last)), tmp)
            os.replace(tmp, target)  # a reader never sees a half-written decision
        last = task
        if batch is None:
            break
        lists = batch.column(HASHES)
        values = _flat(batch)
        lengths = pc.list_value_length(lists).to_numpy(zero_copy_only=False)
        doc_domains = np.repeat(batch.column(DOMAIN).to_numpy(), lengths)
        hit = frequent_mask(values, frequent) | frequent_mask(
            site_keys(doc_domains, values), site_frequent
        )
        if not hit.any():
            continue
        doc = np.repeat(np.arange(len(lengths)), lengths)
        touched = np.unique(doc[hit])
        offsets = np.concatenate(
            [[0], np.cumsum(np.bincount(doc[hit], minlength=len(lengths))[touched])]
        )
        removed = pa.ListArray.from_arrays(
            pa.array(offsets, pa.int32()), pa.array(values[hit], pa.uint64())
        )
        ords = batch.column(ORD).to_numpy()[touched].astype(np.int64)
        tables.setdefault(task, []).append(pa.table({ORD: ords, REMOVE: removed}))
        docs += len(touched)
        pairs += int(hit.sum())
    return docs, pairs


def plan(op: LineDedup, ctx: BarrierContext) -> dict[str, Any]:
    """Count line hashes across documents and sites, write the per-task decisions,
    summarize."""
    cfg = op.config
    ctx.decision_dir.parent.mkdir(parents=True, exist_ok=True)
    sites = _Sites(ctx, cfg.site_fraction, cfg.site_min_docs)
    spill_root = ctx.spill_dir or ctx.decision_dir.parent  # as url_filter's
    with tempfile.TemporaryDirectory(prefix="line_dedup-", dir=spill_root) as tmp:
        frequent, distinct, partitions = _frequent(
            ctx, Path(tmp), lambda b: (_flat(b), np.full(len(_flat(b)), cfg.min_docs))
        )
        site_frequent, _, _ = _frequent(ctx, Path(tmp), sites.entries)
    docs, pairs = _write_decisions(ctx, frequent, site_frequent)
    return {
        "min_docs": cfg.min_docs,
        "distinct_lines": distinct,
        "frequent_lines": int(len(frequent)),
        "site_frequent_lines": int(len(site_frequent)),
        "domains": int(np.count_nonzero(sites.domains)),
        "documents_changed": docs,
        "doc_line_pairs_removed": pairs,
        "partitions": partitions,
    }
