"""A barrier's planning as one unit of work that the run's executor runs on one of its
workers (a Ray actor of the run's pool, or a local worker process), never in the driver.

The op's planner (``BarrierOp.plan``, beside the op in ``ops/<op>/``) reads every
prepared part and may hold per-record state (dedup: record keys, within the worker's
memory budget, spilled past it to ``_work/.barrier<i>.spill.tmp-*``; the shingles of
candidate records; its index shards are the context's shard workers, Ray actors or
threads of that worker: :mod:`dataforge.runtime.shards`), so the driver's memory stays
independent of the input's size: it sends the stage and the parts' task stats (one dict
per task) and receives the summary, then writes the barrier's marker. The worker stages the decision and audit directories, plans,
and commits both directories; without the marker neither counts, so a worker killed
half-way leaves nothing that looks complete and the rerun plans again.
"""

from __future__ import annotations

import contextlib
import socket
from typing import Any

from dataforge.config import PipelineConfig, StageConfig
from dataforge.io import fs
from dataforge.ops.barrier import WORK_NODES, BarrierContext
from dataforge.rundir.store import RunStore
from dataforge.runtime.segments import make_op
from dataforge.runtime.shards import shard_workers

__all__ = ["plan_barrier"]


def plan_barrier(
    config: PipelineConfig,
    store: RunStore,
    prev_seg: int,
    stage_index: int,
    stage: StageConfig,
    prev_stats: list[dict[str, Any]],
    num_cpus: int,
    ray_available: bool,
    memory_bytes: int | None = None,
) -> dict[str, Any]:
    """Plan barrier ``stage`` over the parts of segment ``prev_seg``; commit its decision
    (``_work/barrier<stage_index>``) and audit (``<op>/``) directories; return the
    planner's summary. ``memory_bytes``: what the planner may hold before it spills, into
    ``_work/.barrier<stage_index>.spill.tmp-*`` (removed after, whatever happens)."""
    fs.configure(config.storage)
    decision = f"_work/barrier{stage_index}"
    for staged in (decision, stage.op, f"{decision}.spill"):
        store.remove_stale_staging(staged)  # a killed attempt's leftovers (spill: up to GBs)
    with contextlib.ExitStack() as stack:
        tmp = stack.enter_context(store.staging(decision))
        audit_dir = stack.enter_context(store.staging(stage.op))
        spill_dir = stack.enter_context(store.staging(f"{decision}.spill"))
        parts = {}
        for stats in prev_stats:
            live = f"_work/seg{prev_seg}/{stats['task_id']}/live.parquet"
            if store.exists(live):
                parts[stats["task_id"]] = stack.enter_context(store.local_file(live))
        ctx = BarrierContext(
            parts=dict(sorted(parts.items())),
            decision_dir=tmp,
            audit_dir=audit_dir,
            num_cpus=num_cpus,
            seed=config.seed,
            source_stats=_source_stats(config, prev_stats),
            sources={s.name: s.lang for s in config.inputs},
            shards=shard_workers(ray_available, num_cpus),
            memory_bytes=memory_bytes,
            spill_dir=spill_dir,
        )
        op = make_op(stage, config)
        op.setup()
        summary = op.plan(ctx)
        summary[WORK_NODES] = [_this_node(ray_available), *summary.get(WORK_NODES, [])]
        store.commit_dir(tmp, decision)
        store.commit_dir(audit_dir, stage.op)
    return summary


def _this_node(ray_available: bool) -> str:
    """This worker's node, named as the executor's placement names it."""
    if not ray_available:
        return socket.gethostname()
    from dataforge.runtime.cluster import node_name  # deferred: it imports ray

    return node_name()


def _source_stats(config: PipelineConfig, prev_stats: list[dict[str, Any]]) -> dict:
    """Per source live totals before the barrier: docs, chars, tokens."""
    totals: dict[str, dict[str, int]] = {
        s.name: {"docs": 0, "chars": 0, "tokens": 0} for s in config.inputs
    }
    for stats in prev_stats:
        for src, c in stats["by_source"].items():
            for key in ("docs", "chars", "tokens"):
                totals[src][key] += c[key]
    return totals
