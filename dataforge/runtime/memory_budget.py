"""The memory a worker of the run may hold for a global stage before it spills to disk.

One setting, ``ray.memory_per_worker``; unset, it is derived when the run starts from what
the run has, never from a constant: ``executor: local`` takes half this machine's memory
(the other half for the page cache, the driver and the parts being read) over its worker
processes; Ray takes the cluster's ``memory`` resource (what Ray lets its tasks and actors
use) over the actors of the run's pool. Barriers receive it in their context
(:attr:`dataforge.ops.barrier.BarrierContext.memory_bytes`).
"""

from __future__ import annotations

import dataclasses
import os

from dataforge.config import MIN_WORKER_MEMORY, PipelineConfig

__all__ = ["MemoryBudget", "local_memory_budget", "machine_memory", "ray_memory_budget"]


@dataclasses.dataclass(frozen=True)
class MemoryBudget:
    """Bytes a worker may hold for a global stage, and one line saying why."""

    bytes: int
    why: str


def machine_memory() -> int:
    """Physical memory of this machine in bytes."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _set(config: PipelineConfig) -> MemoryBudget | None:
    size = config.ray.memory_per_worker
    if size is None:
        return None
    return MemoryBudget(size, f"memory per worker: {_size(size)} (ray.memory_per_worker)")


def local_memory_budget(config: PipelineConfig, workers: int) -> MemoryBudget:
    """``ray.memory_per_worker``, else half this machine's memory over ``workers`` (at
    least the setting's minimum)."""
    workers = max(1, workers)
    total = machine_memory()
    share = max(MIN_WORKER_MEMORY, total // 2 // workers)
    return _set(config) or MemoryBudget(
        share,
        f"memory per worker: {_size(share)} (default: half this machine's "
        f"{_size(total)} over {workers} worker process{'es' if workers > 1 else ''}; "
        "set ray.memory_per_worker to change it)",
    )


def ray_memory_budget(config: PipelineConfig, cluster_memory: float, actors: int) -> MemoryBudget:
    """``ray.memory_per_worker``, else the cluster's ``memory`` resource over ``actors``
    (at least the setting's minimum: a cluster may report none)."""
    actors = max(1, actors)
    share = max(MIN_WORKER_MEMORY, int(cluster_memory) // actors)
    return _set(config) or MemoryBudget(
        share,
        f"memory per worker: {_size(share)} (default: the Ray cluster's memory resource "
        f"{_size(int(cluster_memory))} over {actors} actor{'s' if actors > 1 else ''}; "
        "set ray.memory_per_worker to change it)",
    )


def _size(size: int) -> str:
    """``size`` bytes in words: ``1.5 GB``, ``512.0 MB``."""
    for unit, scale in (("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("KB", 10**3)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} B"
