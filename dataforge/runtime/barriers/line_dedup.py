"""Planner of the ``line_dedup`` barrier: in how many documents each line hash occurs,
with bounded memory, then per task the hashes to remove from each document.

1. **Spill.** The parts' ``_line_hashes`` (each document's distinct hashes) are streamed
   in task order and appended to ``2**bits`` partition files by their top bits, ``bits``
   chosen so that a partition holds about :data:`PARTITION_HASHES` hashes.
2. **Count.** Each partition is loaded alone; ``np.unique`` counts the documents per hash
   and the hashes in at least ``min_docs`` documents are kept (sorted, since partitions
   go by top bits). Memory: one partition plus the frequent hashes.
3. **Decide.** The parts are streamed again; ``decision_dir/<task>.parquet`` lists, for
   each document holding frequent hashes, ``_ord`` and those hashes (``_line_remove``).

The result depends only on the set of documents, never on tasks, batches or workers.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from dataforge.ops.line_dedup import HASHES, REMOVE, LineDedup, frequent_mask
from dataforge.records import ORD
from dataforge.runtime.barriers import BarrierContext

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


def _frequent(ctx: BarrierContext, spill: Path, min_docs: int) -> tuple[np.ndarray, int, int]:
    """(sorted frequent hashes, distinct hashes, partitions)."""
    total = sum(len(_flat(b)) for _, b in _batches(ctx, [HASHES]))
    bits = max(0, math.ceil(math.log2(max(1, total / PARTITION_HASHES))))
    paths = [spill / f"p{k:05d}.bin" for k in range(1 << bits)]
    files = [open(p, "wb") for p in paths]  # noqa: SIM115 - closed below
    try:
        for _, batch in _batches(ctx, [HASHES]):
            values = _flat(batch)
            part = (
                (values >> np.uint64(64 - bits)).astype(np.int64)
                if bits
                else np.zeros(len(values), np.int64)
            )
            order = np.argsort(part, kind="stable")
            bounds = np.searchsorted(part[order], np.arange(len(files) + 1))
            for k in np.flatnonzero(np.diff(bounds)):
                values[order[bounds[k] : bounds[k + 1]]].tofile(files[k])
    finally:
        for f in files:
            f.close()
    frequent, distinct = [], 0
    for path in paths:
        unique, counts = np.unique(np.fromfile(path, dtype=np.uint64), return_counts=True)
        path.unlink()
        distinct += len(unique)
        frequent.append(unique[counts >= min_docs])
    return np.concatenate(frequent), distinct, len(paths)


def _write_decisions(ctx: BarrierContext, frequent: np.ndarray) -> tuple[int, int]:
    """Per task decisions; returns (documents touched, document-line pairs removed)."""
    ctx.decision_dir.mkdir(parents=True, exist_ok=True)
    tables: dict[str, list[pa.Table]] = {}
    docs = pairs = 0
    last = None
    for task, batch in [*_batches(ctx, [ORD, HASHES]), (None, None)]:
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
        hit = frequent_mask(values, frequent)
        if not hit.any():
            continue
        lengths = pc.list_value_length(lists).to_numpy(zero_copy_only=False)
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
    """Count line hashes across documents, write the per-task decisions, summarize."""
    ctx.decision_dir.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="line_dedup-", dir=ctx.decision_dir.parent) as tmp:
        frequent, distinct, partitions = _frequent(ctx, Path(tmp), op.config.min_docs)
    docs, pairs = _write_decisions(ctx, frequent)
    return {
        "min_docs": op.config.min_docs,
        "distinct_lines": distinct,
        "frequent_lines": int(len(frequent)),
        "documents_changed": docs,
        "doc_line_pairs_removed": pairs,
        "partitions": partitions,
    }
