"""Ray execution: each segment's tasks run on a pool of Ray actors.

``dataforge run`` starts embedded local Ray (``ray.init`` with CPUs and object-store
memory from the config or detected), or joins a cluster given by ``--address``,
``ray.address`` or ``RAY_ADDRESS``. Each segment's task descriptors are handed to a pool
of :class:`_SegmentActor`: every actor loads the segment's ops once (jieba, KenLM,
tokenizer) and processes whole input files, committing one part per task. The fused per-actor op chain avoids an Arrow hand-off between stages,
which on small machines costs more than the stages themselves.
"""

from __future__ import annotations

import logging
import os
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ray

from dataforge.config import PipelineConfig
from dataforge.runtime.pipeline import run_pipeline
from dataforge.runtime.progress import RunProgress
from dataforge.runtime.ray_metrics import RayMetrics
from dataforge.runtime.segments import Segment, SegmentRunner

__all__ = ["RayExecutor", "init_ray", "run_on_ray"]


def init_ray(config: PipelineConfig, address: str | None, verbose: bool = False) -> str:
    """Connect to the cluster (``address``, ``ray.address``, ``RAY_ADDRESS``) or start
    embedded local Ray. Returns a description for the log. Ray's own info lines show with
    ``verbose`` only (they stay in Ray's session logs)."""
    if ray.is_initialized():
        return "already initialized Ray"
    address = address or config.ray.address or os.environ.get("RAY_ADDRESS")
    env = {"env_vars": {"PYTHONHASHSEED": "0"}}
    level = logging.INFO if verbose else logging.WARNING
    if address:
        ray.init(address=address, runtime_env=env, log_to_driver=True, logging_level=level)
        return f"Ray cluster at {address}"
    # address="local": always a new instance; a bare ray.init() would join whatever cluster
    # another `ray start` left on this machine.
    ray.init(
        address="local",
        logging_level=level,
        num_cpus=config.ray.num_cpus or os.cpu_count() or 1,
        object_store_memory=config.ray.object_store_memory,
        include_dashboard=False,
        runtime_env=env,
        log_to_driver=True,
    )
    return f"embedded local Ray ({int(ray.cluster_resources().get('CPU', 0))} CPUs)"


class _SegmentActor:
    """One SegmentRunner per actor: the segment's ops load once and serve many tasks."""

    def __init__(self, config: PipelineConfig, segment: Segment, work_dir: str) -> None:
        self.runner = SegmentRunner(config, segment, work_dir)

    def run_task(self, task: dict[str, Any]) -> dict[str, Any]:
        return self.runner.run_task(task)


class RayExecutor:
    """Runs a segment's tasks on a pool of Ray actors sized from the config or cluster.

    Plain actors rather than a Ray Data ``map_batches`` pool: the pool hands each idle actor
    the next task and reports every committed task at once (live progress). The constructor
    arguments are small enough for Ray to inline, so actor restarts (``max_restarts``) never
    depend on objects in the object store.
    """

    ray_available = True

    def __init__(self, config: PipelineConfig) -> None:
        self.config = config
        self.num_cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))

    def run_segment(
        self,
        config: PipelineConfig,
        segment: Segment,
        work_dir: Path,
        tasks: list[dict[str, Any]],
        on_task: Callable[[dict[str, Any]], None],
    ) -> None:
        cpus_per_actor = config.ray.cpus_per_actor
        size = config.ray.actors or max(1, int(self.num_cpus // cpus_per_actor))
        retries = config.ray.max_task_retries
        actor_class = ray.remote(
            num_cpus=cpus_per_actor, max_restarts=retries, max_task_retries=retries
        )(_SegmentActor)
        actors = [
            actor_class.remote(config, segment, str(work_dir)) for _ in range(min(size, len(tasks)))
        ]
        queue = deque(tasks)
        running: dict[ray.ObjectRef, Any] = {}
        try:
            for actor in actors:
                running[actor.run_task.remote(queue.popleft())] = actor
            while running:
                (ready,), _ = ray.wait(list(running), num_returns=1)
                actor = running.pop(ready)
                on_task(ray.get(ready))
                if queue:
                    running[actor.run_task.remote(queue.popleft())] = actor
        finally:
            for actor in actors:
                ray.kill(actor)


def run_on_ray(
    config: PipelineConfig,
    out: Path,
    address: str | None = None,
    overwrite: bool = False,
    log: Callable[[str], None] | None = None,
    progress: RunProgress | None = None,
) -> dict[str, Any]:
    """``dataforge run``: claim and lock ``out``, then start or join Ray and run the
    pipeline on it (a refused or already complete run never starts Ray). The pipeline's
    counters also go to Ray's metrics (:mod:`dataforge.runtime.ray_metrics`)."""
    kwargs = {"log": log} if log else {}
    progress = progress or RunProgress.silent()
    connected_here = []

    def start_ray() -> RayExecutor:
        if not ray.is_initialized():
            connected_here.append(True)
        where = init_ray(config, address, verbose=progress.verbose)
        if log:
            log(f"running on {where}")
        progress.listeners = (*progress.listeners, RayMetrics(config))
        return RayExecutor(config)

    try:
        return run_pipeline(
            config, out, start_ray, overwrite=overwrite, progress=progress, **kwargs
        )
    finally:
        # Stops the worker-log relay too, so that Ray's copies of a failed task's trace do
        # not trail after the one-line error the CLI prints next.
        if connected_here and ray.is_initialized():
            ray.shutdown()
