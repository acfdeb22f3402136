"""Planner of the ``url_filter`` barrier: exact URL dedup (latest capture) and the
per-domain cap, over every prepared part, with bounded memory.

1. **Spill by URL.** The parts' hashed columns (``_url_key``, ``_url_domain``,
   ``_url_date``, ``_url_rank``; no strings) of the records no blocklist dropped are
   streamed in task order into ``2**bits`` disk partitions by the top bits of the URL key,
   ``bits`` chosen so that a partition holds about :data:`PARTITION_ROWS` records, fewer
   within the planner's memory budget (:func:`~dataforge.ops.barrier.partition_bits`).
2. **Dedup.** Each partition alone: sorted by (key, capture time descending, rank), the
   first record of each key is kept; the others are ``url:duplicate``. With a cap, the
   survivors are spilled again, by the top bits of the domain.
3. **Cap.** Each domain partition alone: per domain the ``max_per_domain`` survivors of
   smallest rank are kept; the others are ``url:domain_cap``.

Memory: one partition, plus the dropped records' (task, ``_ord``). Both rules are
functions of the records alone, never of parts, partitions or workers.
``decision_dir/<task>.parquet`` lists ``_ord`` and ``_url_reason`` of the dropped records.
"""

from __future__ import annotations

import os
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from dataforge.ops.barrier import BarrierContext, partition_bits
from dataforge.ops.url_filter import BLOCK, DATE, DOMAIN, KEY, RANK, REASON, UrlFilter
from dataforge.records import ORD

__all__ = ["PARTITION_ROWS", "plan"]

PARTITION_ROWS = 1 << 23
"""Records per spill partition: about 400 MB of hashed columns in memory at a time."""
_REASONS = (None, "url:duplicate", "url:domain_cap")
_ROW = np.dtype(
    [
        ("task", "<i8"),
        ("ord", "<i8"),
        ("key", "<u8"),
        ("domain", "<u8"),
        ("date", "<i8"),
        ("rank", "<u8"),
    ]
)
_COLUMNS = [ORD, KEY, DOMAIN, DATE, RANK, BLOCK]


def _eligible(ctx: BarrierContext, tasks: list[str]):
    """(task index, table of records no blocklist dropped), and counts the blocked."""
    for t, task in enumerate(tasks):
        table = pq.read_table(ctx.parts[task], columns=_COLUMNS)
        block = table.column(BLOCK)
        yield t, table.filter(pc.and_(pc.is_null(block), pc.is_valid(table.column(KEY)))), block


class _Spill:
    """Structured rows appended to ``2**bits`` files by the top bits of one field."""

    def __init__(self, root: Path, name: str, bits: int, field: str) -> None:
        self.paths = [root / f"{name}-{k:05d}.bin" for k in range(1 << bits)]
        self.bits, self.field = bits, field
        self.files = [open(p, "wb") for p in self.paths]  # noqa: SIM115 - closed in close()

    def add(self, rows: np.ndarray) -> None:
        if not self.bits:
            rows.tofile(self.files[0])
            return
        part = (rows[self.field] >> np.uint64(64 - self.bits)).astype(np.int64)
        order = np.argsort(part, kind="stable")
        bounds = np.searchsorted(part[order], np.arange(len(self.files) + 1))
        for k in np.flatnonzero(np.diff(bounds)):
            rows[order[bounds[k] : bounds[k + 1]]].tofile(self.files[k])

    def partitions(self):
        for f in self.files:
            f.close()
        for path in self.paths:
            rows = np.fromfile(path, dtype=_ROW)
            path.unlink()
            yield rows


def _first_per_group(sorted_keys: np.ndarray) -> np.ndarray:
    return np.concatenate([[True], sorted_keys[1:] != sorted_keys[:-1]])


def _spill_records(
    ctx: BarrierContext, tasks: list[str], root: Path
) -> tuple[_Spill, Counter[str], int]:
    total = 0
    for _, table, _ in _eligible(ctx, tasks):
        total += table.num_rows
    bits = partition_bits(ctx, total, _ROW.itemsize, PARTITION_ROWS)
    spill = _Spill(root, "url", bits, "key")
    blocked: Counter[str] = Counter()
    for t, table, block in _eligible(ctx, tasks):
        blocked.update(block.drop_null().to_pylist())
        rows = np.empty(table.num_rows, dtype=_ROW)
        rows["task"] = t
        for field, column in (
            ("ord", ORD),
            ("key", KEY),
            ("domain", DOMAIN),
            ("date", DATE),
            ("rank", RANK),
        ):
            rows[field] = table.column(column).to_numpy()
        spill.add(rows)
    return spill, blocked, bits


def _decide(op: UrlFilter, spill: _Spill, root: Path, bits: int) -> tuple[list[np.ndarray], int]:
    """The dropped records as (task, ord, reason code) arrays; and how many were seen."""
    cap = op.config.max_per_domain
    domains = _Spill(root, "domain", bits, "domain") if cap is not None else None
    dropped, seen = [], 0
    for rows in spill.partitions():
        seen += len(rows)
        if op.config.dedup and len(rows):
            rows = rows[np.lexsort((rows["rank"], -rows["date"].astype(np.float64), rows["key"]))]
            first = _first_per_group(rows["key"])
            dropped.append(_codes(rows[~first], 1))
            rows = rows[first]
        if domains is not None:
            domains.add(rows)
    if domains is not None:
        for rows in domains.partitions():
            rows = rows[np.lexsort((rows["rank"], rows["domain"]))]
            starts = _first_per_group(rows["domain"])
            group_start = np.maximum.accumulate(np.where(starts, np.arange(len(rows)), 0))
            dropped.append(_codes(rows[np.arange(len(rows)) - group_start >= cap], 2))
    return dropped, seen


def _codes(rows: np.ndarray, code: int) -> np.ndarray:
    return np.stack([rows["task"], rows["ord"], np.full(len(rows), code, np.int64)], axis=1)


def plan(op: UrlFilter, ctx: BarrierContext) -> dict[str, Any]:
    """Write the per-task decisions and return the counts per rule."""
    tasks = sorted(ctx.parts)
    ctx.decision_dir.mkdir(parents=True, exist_ok=True)
    # In the stage's spill dir where there is one (removed whatever happens, a killed
    # run's too: barrier_task); else beside the decisions.
    spill_root = ctx.spill_dir or ctx.decision_dir.parent
    with tempfile.TemporaryDirectory(prefix="url_filter-", dir=spill_root) as tmp:
        spill, blocked, bits = _spill_records(ctx, tasks, Path(tmp))
        pieces, seen = _decide(op, spill, Path(tmp), bits)
    decided = np.concatenate(pieces) if pieces else np.zeros((0, 3), np.int64)
    decided = decided[np.lexsort((decided[:, 1], decided[:, 0]))]
    names = np.array(_REASONS, dtype=object)
    for t in np.unique(decided[:, 0]):
        mine = decided[decided[:, 0] == t]
        table = pa.table(
            {ORD: mine[:, 1], REASON: pa.array(names[mine[:, 2]].tolist(), pa.string())}
        )
        target = ctx.decision_dir / f"{tasks[int(t)]}.parquet"
        tmp_target = target.with_name(f".{target.name}.tmp")
        pq.write_table(table, tmp_target)
        os.replace(tmp_target, target)  # a reader never sees a half-written decision
    dropped = dict(blocked)
    for code in (1, 2):
        if count := int((decided[:, 2] == code).sum()):
            dropped[_REASONS[code]] = count
    return {"urls": seen, "partitions": 1 << bits, "dropped": dict(sorted(dropped.items()))}
