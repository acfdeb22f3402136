"""The local executor: every task on worker processes forked on this machine, no Ray.

``executor: local`` (or ``--executor local``) runs the same :class:`SegmentRunner` per task
as the Ray executor, on ``ray.num_cpus`` worker processes (:class:`WorkerPool`, one pool
per run); with no workers, tasks run in this process one after the other (tests,
baselines). Ray is neither started nor imported.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dataforge.config import PipelineConfig
from dataforge.runtime.executors.base import ExecutorSpec
from dataforge.runtime.local_pool import WorkerPool, exit_on_sigterm
from dataforge.runtime.memory_budget import MemoryBudget, local_memory_budget
from dataforge.runtime.pipeline import log_line, run_pipeline
from dataforge.runtime.placement import Placement
from dataforge.runtime.progress import RunProgress
from dataforge.runtime.segments import SegmentRunner
from dataforge.typed_config import ConfigError

__all__ = ["LOCAL", "LocalExecutor", "local_workers", "place_locally", "run_local"]


class LocalExecutor:
    """Runs tasks on this machine without Ray: on ``workers`` worker processes
    (:class:`WorkerPool`, ``executor: local``), or with none in this process, one after the
    other (tests, baselines); :meth:`close` stops the workers."""

    ray_available = False
    workers = 0
    _pool: WorkerPool | None = None
    _placement: Placement | None = None

    def __init__(self, workers: int = 0) -> None:
        self.workers = workers

    @property
    def num_cpus(self) -> int:
        return max(1, self.workers)

    @property
    def placement(self) -> Placement:
        """Made on first use (subclasses that override ``__init__`` get one too)."""
        if self._placement is None:
            self._placement = Placement("local", self.num_cpus, socket.gethostname())
        return self._placement

    def memory_budget(self, config: PipelineConfig) -> MemoryBudget:
        """What each worker process may hold for a global stage."""
        return local_memory_budget(config, self.num_cpus)

    def check_paths(self, config, work, tasks) -> None:
        """Workers run on this machine, which sees what the driver sees."""

    def run_segment(self, config, segment, work_dir, tasks, on_task) -> None:
        node = self.placement.driver[0]
        if not self.workers:
            runner = SegmentRunner(config, segment, str(work_dir))
            for task in tasks:
                stats = runner.run_task(task)
                self.placement.ran(node, os.getpid())
                on_task(stats)
            return
        if self._pool is None:
            self._pool = WorkerPool(config, str(work_dir), self.workers)

        def committed(stats: dict[str, Any], pid: int) -> None:
            self.placement.ran(node, pid)
            on_task(stats)

        self._pool.run_segment(segment, tasks, committed)

    def run_call(self, config, work_dir, fn, *args) -> Any:
        """On a worker process; with none, in this process."""
        if not self.workers:
            return fn(*args)
        if self._pool is None:
            self._pool = WorkerPool(config, str(work_dir), self.workers)
        return self._pool.call(fn, *args)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None


def local_workers(config: PipelineConfig) -> int:
    """Worker processes of ``executor: local``: ``ray.num_cpus``, else this machine's CPUs."""
    return config.ray.num_cpus or os.cpu_count() or 1


def place_locally(config: PipelineConfig, address: str | None) -> tuple[None, str]:
    """No cluster, and the workers in words (:attr:`ExecutorSpec.place`).

    Raises:
        ConfigError: ``--address`` (``address``) or ``ray.address`` is set: a local run
            joins no cluster (``RAY_ADDRESS``, meant for Ray runs, is ignored).
    """
    if address or config.ray.address:
        given = "--address" if address else "ray.address"
        raise ConfigError(f"executor: local runs no Ray but {given} is set; valid: one of them")
    return None, f"{local_workers(config)} forked worker processes on this machine, no Ray"


def run_local(
    config: PipelineConfig,
    out: str | Path,
    address: None = None,
    overwrite: bool = False,
    log: Callable[[str], None] | None = None,
    progress: RunProgress | None = None,
) -> dict[str, Any]:
    """``dataforge run`` with ``executor: local``: :func:`run_pipeline` on
    :func:`local_workers` forked processes. ``address`` is there for
    :attr:`ExecutorSpec.run`'s one signature: a local run joins no cluster."""
    if address is not None:
        raise ValueError(f"the local executor joins no Ray cluster; got address {address!r}")
    log = log or log_line
    executors: list[LocalExecutor] = []

    def start() -> LocalExecutor:
        executors.append(LocalExecutor(local_workers(config)))
        log(f"running on {executors[0].workers} local worker processes")
        log(executors[0].memory_budget(config).why)
        return executors[0]

    restore = exit_on_sigterm()
    try:
        return run_pipeline(config, out, start, overwrite=overwrite, log=log, progress=progress)
    finally:
        for executor in executors:
            executor.close()
        restore()


LOCAL = ExecutorSpec(place=place_locally, run=run_local)
