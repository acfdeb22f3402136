"""What a barrier op's planner receives: :class:`BarrierContext`.

A barrier op (:class:`dataforge.ops.base.BarrierOp`) runs in three steps: ``prepare`` per
batch in the segment before the barrier, ``plan(ctx)`` once over all prepared parts (on
one worker of the run: ``dataforge.runtime.barrier_task``), and ``apply`` per task in the
segment after it, with the task's decision table. Each op keeps its planner beside it
(``ops/<op>/planner.py``); the runtime hands it everything else through the context:
the parts, where to write, a memory budget with spill space, and shard workers
(:mod:`dataforge.ops.barrier.shards`: Ray actors or in-process objects, never imported
here, so no planner imports Ray).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

from dataforge.ops.barrier.shards import ShardBackend, ShardFactory

__all__ = [
    "MAX_PARTITION_BITS",
    "WORK_NODES",
    "BarrierContext",
    "ShardBackend",
    "ShardFactory",
    "partition_bits",
]

WORK_NODES = "_work_nodes"
"""Summary key under which a planner lists the nodes its parallel work ran on (dedup: one
entry per index shard); the driver moves it out of the stage summary into the manifest's
``runtime.barrier_work_by_node``, so the summary stays the same whatever the placement."""


@dataclasses.dataclass(frozen=True)
class BarrierContext:
    """Everything a planner may read or write.

    Attributes:
        parts: task id -> parquet file of the live rows after ``prepare`` (all columns).
            Task ids sort in a fixed order; process them sorted for determinism.
        decision_dir: the planner writes ``<task_id>.parquet`` here (``_ord`` plus its own
            columns); a missing file means no decision rows for that task.
        audit_dir: ``OUT/<op name>/`` for audit output.
        num_cpus: CPUs of the Ray cluster.
        seed: the pipeline seed.
        source_stats: per source live totals before the barrier: docs, chars, tokens.
        sources: source name -> language code, in YAML order.
        shards: starts the planner's shard workers (:meth:`start_shards`): Ray actors with
            the Ray executor, else objects in the planning worker's process; None where
            the caller gives none (only dedup's planner uses them).
        memory_bytes: what the planner may hold for per-record state before it spills
            to ``spill_dir`` (:mod:`dataforge.runtime.memory_budget`); None: no bound.
        spill_dir: an empty local directory of the run's work dir for spilled runs,
            removed after the stage whatever happens; required with ``memory_bytes``.
    """

    parts: dict[str, Path]
    decision_dir: Path
    audit_dir: Path
    num_cpus: int
    seed: int
    source_stats: dict[str, dict[str, int]]
    sources: dict[str, str]
    shards: ShardFactory | None = None
    memory_bytes: int | None = None
    spill_dir: Path | None = None

    def __post_init__(self) -> None:
        if self.memory_bytes is not None and self.spill_dir is None:
            raise ValueError("BarrierContext: memory_bytes needs a spill_dir to spill to")

    def start_shards(self, count: int, shard: type, *args: Any) -> ShardBackend:
        """``count`` shard workers, each holding its own ``shard(*args)``.

        Raises:
            ValueError: the context was made without ``shards``.
        """
        if self.shards is None:
            raise ValueError("BarrierContext: this planner needs shard workers; pass shards")
        return self.shards(count, shard, *args)


MAX_PARTITION_BITS = 9
"""A hash-partitioned spill writes at most 2**9 files at once, well under the 1,024
descriptors many systems allow a process."""


def partition_bits(ctx: BarrierContext, total: int, entry_bytes: int, per_partition: int) -> int:
    """Top key bits that split ``total`` spilled entries into partitions loaded one at a
    time: about ``per_partition`` entries each, fewer where a quarter of
    ``ctx.memory_bytes`` holds fewer (loading and sorting a partition takes a few times its
    bytes); at most :data:`MAX_PARTITION_BITS`. Decisions never depend on it."""
    if ctx.memory_bytes is not None:
        per_partition = min(per_partition, max(1, ctx.memory_bytes // (4 * entry_bytes)))
    bits = math.ceil(math.log2(max(1, total / per_partition)))
    return min(MAX_PARTITION_BITS, max(0, bits))
