"""Planner of the ``url_filter`` barrier: exact URL dedup (latest capture) and the
per-domain cap, over every prepared part.

The parts' hashed columns (``_url_key``, ``_url_domain``, ``_url_date``, ``_url_rank``,
40 bytes per record, no strings) are gathered in task order; records a blocklist already
dropped take no part. Dedup sorts by (key, capture time descending, rank) and keeps the
first of each key; the cap then keeps per domain the ``max_per_domain`` survivors of
smallest rank. Both are functions of the records alone, never of parts or workers.
``decision_dir/<task>.parquet`` lists ``_ord`` and ``_url_reason`` of the dropped records.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from dataforge.ops.url_filter import BLOCK, DATE, DOMAIN, KEY, RANK, REASON, UrlFilter
from dataforge.records import ORD
from dataforge.runtime.barriers import BarrierContext

__all__ = ["plan"]

_DUPLICATE, _CAP = "url:duplicate", "url:domain_cap"


def _gather(ctx: BarrierContext) -> tuple[list[str], dict[str, np.ndarray], dict[str, int]]:
    tasks = sorted(ctx.parts)
    cols: dict[str, list[np.ndarray]] = {k: [] for k in ("task", ORD, KEY, DOMAIN, DATE, RANK)}
    blocked: dict[str, int] = {}
    for t, task in enumerate(tasks):
        table = pq.read_table(ctx.parts[task], columns=[ORD, KEY, DOMAIN, DATE, RANK, BLOCK])
        for reason, n in zip(
            *np.unique(table.column(BLOCK).drop_null().to_numpy(False), return_counts=True),
            strict=True,
        ):
            blocked[str(reason)] = blocked.get(str(reason), 0) + int(n)
        table = table.filter(
            pc.and_(pc.is_null(table.column(BLOCK)), pc.is_valid(table.column(KEY)))
        )
        cols["task"].append(np.full(table.num_rows, t, dtype=np.int64))
        for name in (ORD, KEY, DOMAIN, DATE, RANK):
            cols[name].append(table.column(name).to_numpy())
    arrays = {k: np.concatenate(v) if v else np.zeros(0, np.int64) for k, v in cols.items()}
    return tasks, arrays, blocked


def _decide(op: UrlFilter, a: dict[str, np.ndarray]) -> np.ndarray:
    """0 kept, 1 duplicate, 2 over the domain cap, per gathered record."""
    n = len(a[KEY])
    verdict = np.zeros(n, dtype=np.int8)
    if op.config.dedup and n:
        order = np.lexsort((a[RANK], -a[DATE].astype(np.float64), a[KEY]))
        keys = a[KEY][order]
        repeat = np.concatenate([[False], keys[1:] == keys[:-1]])
        verdict[order[repeat]] = 1
    cap = op.config.max_per_domain
    if cap is not None:
        alive = np.flatnonzero(verdict == 0)
        order = alive[np.lexsort((a[RANK][alive], a[DOMAIN][alive]))]
        domains = a[DOMAIN][order]
        starts = np.concatenate([[True], domains[1:] != domains[:-1]])
        group_start = np.maximum.accumulate(np.where(starts, np.arange(len(order)), 0))
        verdict[order[np.arange(len(order)) - group_start >= cap]] = 2
    return verdict


def plan(op: UrlFilter, ctx: BarrierContext) -> dict[str, Any]:
    """Write the per-task decisions and return the counts per rule."""
    tasks, a, blocked = _gather(ctx)
    verdict = _decide(op, a)
    ctx.decision_dir.mkdir(parents=True, exist_ok=True)
    names = np.array([None, _DUPLICATE, _CAP], dtype=object)
    for t, task in enumerate(tasks):
        mine = (a["task"] == t) & (verdict > 0)
        if not mine.any():
            continue
        table = pa.table(
            {
                ORD: a[ORD][mine].astype(np.int64),
                REASON: pa.array(names[verdict[mine]].tolist(), pa.string()),
            }
        )
        target = ctx.decision_dir / f"{task}.parquet"
        tmp = target.with_name(f".{target.name}.tmp")
        pq.write_table(table, tmp)
        os.replace(tmp, target)  # a reader never sees a half-written decision
    dropped = dict(blocked)
    for code, reason in ((1, _DUPLICATE), (2, _CAP)):
        if count := int((verdict == code).sum()):
            dropped[reason] = count
    return {"urls": int(len(verdict)), "dropped": dict(sorted(dropped.items()))}
