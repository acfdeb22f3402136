"""Global barrier stages (dedup, sample): the context their planners receive.

A barrier op (``dataforge.ops.base.BarrierOp``) runs in three steps: ``prepare`` per batch
in the segment before the barrier, ``plan`` once over all prepared parts (the function the
op declares as ``planner``, in a module of this package, which may use Ray), and ``apply``
per task in the segment after it, with the task's decision table.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = [
    "MAX_PARTITION_BITS",
    "WORK_NODES",
    "BarrierContext",
    "partition_bits",
    "planner_of",
    "run_planner",
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
        ray_available: the run's executor is Ray: the planner runs its parallel work on
            Ray actors (else in the planning worker's process).
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
    ray_available: bool
    memory_bytes: int | None = None
    spill_dir: Path | None = None

    def __post_init__(self) -> None:
        if self.memory_bytes is not None and self.spill_dir is None:
            raise ValueError("BarrierContext: memory_bytes needs a spill_dir to spill to")


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


def planner_of(op: Any) -> Callable[[Any, BarrierContext], dict[str, Any]]:
    """The planner function barrier op ``op`` declares (``BarrierOp.planner``).

    Raises:
        TypeError: the op declares none, or its reference does not name a function.
    """
    reference = getattr(op, "planner", "")
    module_name, _, function_name = reference.partition(":")
    if not module_name or not function_name:
        raise TypeError(
            f"barrier op {op.name!r} declares no planner (set planner = 'module:function')"
        )
    try:
        function = getattr(importlib.import_module(module_name), function_name)
    except (ImportError, AttributeError) as exc:
        raise TypeError(f"barrier op {op.name!r}: planner {reference!r} not found ({exc})") from exc
    if not callable(function):
        raise TypeError(f"barrier op {op.name!r}: planner {reference!r} is not a function")
    return function


def run_planner(op: Any, ctx: BarrierContext) -> dict[str, Any]:
    """Run the planner of barrier op ``op`` and return its JSON-able summary."""
    return planner_of(op)(op, ctx)
