"""Ray execution: each segment's tasks run on a pool of Ray actors.

``dataforge run`` starts embedded local Ray or joins a cluster
(:mod:`dataforge.runtime.cluster`: connection, authentication, path checks). Each
segment's task descriptors are handed to a pool of :class:`_SegmentActor`: every actor
loads the segment's ops once (jieba, KenLM, tokenizer) and processes whole input files
(or splits), committing one part per task. The fused per-actor op chain avoids an Arrow
hand-off between stages,
which on small machines costs more than the stages themselves.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ray

from dataforge.config import PipelineConfig
from dataforge.io.readers import InputTask
from dataforge.runtime.cluster import (
    check_nodes_see_paths,
    connect,
    resolve_address,
    resolve_run_paths,
)
from dataforge.runtime.pipeline import run_pipeline
from dataforge.runtime.progress import RunProgress
from dataforge.runtime.ray_metrics import RayMetrics
from dataforge.runtime.segments import Segment, SegmentRunner

__all__ = ["RayExecutor", "run_on_ray"]


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

    def __init__(self, config: PipelineConfig, cluster: bool = False) -> None:
        self.config = config
        self.cluster = cluster
        self.num_cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))

    def check_paths(self, config: PipelineConfig, work: Path, tasks: list[InputTask]) -> None:
        """On a cluster, fail before any work if a node cannot see a path of the run
        (embedded Ray runs on the driver's machine and sees what it sees)."""
        if self.cluster:
            check_nodes_see_paths(config, work, tasks)

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
                else:
                    # Idle for good: free its CPU now. An actor restarted after its node was
                    # lost may need it to finish its task (a deadlock otherwise).
                    ray.kill(actor)
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
    config, out = resolve_run_paths(config, out)
    kwargs = {"log": log} if log else {}
    progress = progress or RunProgress.silent()
    connected_here = []

    def start_ray() -> RayExecutor:
        if not ray.is_initialized():
            connected_here.append(True)
        where = connect(config, address, verbose=progress.verbose)
        if log:
            log(f"running on {where}")
        progress.listeners = (*progress.listeners, RayMetrics(config))
        return RayExecutor(config, cluster=resolve_address(config, address) is not None)

    try:
        return run_pipeline(
            config, out, start_ray, overwrite=overwrite, progress=progress, **kwargs
        )
    finally:
        # Stops the worker-log relay too, so that Ray's copies of a failed task's trace do
        # not trail after the one-line error the CLI prints next.
        if connected_here and ray.is_initialized():
            ray.shutdown()
