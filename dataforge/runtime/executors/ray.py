"""The Ray executor: one pool of long-lived actors per run, fed task by task.

``dataforge run`` starts embedded local Ray or joins a cluster
(:mod:`dataforge.runtime.cluster`: connection, authentication, path checks), in the main
thread, before any task. The first segment starts a pool of :class:`_TaskActor`
(``ray.actors``, default one per CPU) and every later segment of the run reuses it: an
actor builds a segment's :class:`SegmentRunner` (its ops: jieba, KenLM, tokenizer) on its
first task of that segment and keeps it for the segment's other tasks. Each task processes
one input file (or one part of the previous segment) and commits one part; the fused
per-actor op chain avoids an Arrow hand-off between stages. The driver keeps one task in
flight per actor and hands the next pending task to whichever actor finishes first; it
only plans, commits and reports, embedded as on a cluster.
"""

from __future__ import annotations

import os
import sys
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dataforge.config import PipelineConfig
from dataforge.io.readers import InputTask
from dataforge.runtime.cluster import (
    check_nodes_see_paths,
    cluster_address,
    connect,
    embedded_cpus,
    node_name,
    resolve_run_paths,
)
from dataforge.runtime.executors.base import ExecutorSpec
from dataforge.runtime.local_pool import exit_on_sigterm
from dataforge.runtime.memory_budget import MemoryBudget, ray_memory_budget
from dataforge.runtime.pipeline import run_pipeline
from dataforge.runtime.placement import Placement
from dataforge.runtime.progress import RunProgress
from dataforge.runtime.segments import Segment, SegmentRunner

if TYPE_CHECKING:
    import ray


__all__ = ["RAY", "RayExecutor", "place_on_ray", "run_on_ray"]


_TAIL_CHECK_S = 5.0
"""How often a driver waiting on its actors checks whether a node was lost."""


def _alive_nodes() -> int:
    import ray  # deferred: the local executor never imports Ray

    return sum(1 for node in ray.nodes() if node["Alive"])


class _TaskActor:
    """Runs tasks of any segment of one run; keeps the current segment's runner (its ops
    loaded once per actor and segment)."""

    def __init__(self, config: PipelineConfig, work_dir: str) -> None:
        self.config, self.work_dir = config, work_dir
        self.segment_index: int | None = None
        self.runner: SegmentRunner | None = None
        self.node = node_name()

    def run_task(self, segment: Segment, task: dict[str, Any]) -> tuple[dict[str, Any], str, int]:
        """The task's stats, and the node and process that ran it."""
        if self.segment_index != segment.index:
            self.runner = None  # free the previous segment's ops before loading the next
            self.runner = SegmentRunner(self.config, segment, self.work_dir)
            self.segment_index = segment.index
        return self.runner.run_task(task), self.node, os.getpid()

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` here (a barrier's planning, between segments)."""
        self.segment_index, self.runner = None, None  # free the finished segment's ops
        return fn(*args)


class RayExecutor:
    """Runs segments' tasks on one pool of Ray actors per run (Ray already connected),
    created on first use and sized from the config or the cluster's CPUs; :meth:`close`
    stops it.

    Plain actors rather than a Ray Data ``map_batches`` pool: tasks are whole files, so
    there is nothing to stream, and a pool per segment was start-up cost paid again at
    every segment. The constructor arguments are small enough for Ray to inline, so actor
    restarts (``max_restarts``) never depend on objects in the object store.
    """

    ray_available = True

    def __init__(self, config: PipelineConfig, cluster: bool = False) -> None:
        import ray  # deferred

        self.cluster = cluster
        self.num_cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
        self.placement = Placement("ray", self.num_cpus, node_name(), _alive_nodes())
        self.actors: list[Any] = []

    def _pool_size(self, config: PipelineConfig) -> int:
        return config.ray.actors or max(1, int(self.num_cpus // config.ray.cpus_per_actor))

    def memory_budget(self, config: PipelineConfig) -> MemoryBudget:
        """What each actor of the pool may hold for a global stage."""
        import ray  # deferred

        memory = ray.cluster_resources().get("memory", 0)
        return ray_memory_budget(config, memory, self._pool_size(config))

    def _pool(self, config: PipelineConfig, work_dir: Path, wanted: int) -> list[Any]:
        import ray  # deferred

        size = self._pool_size(config)
        missing = min(size, wanted) - len(self.actors)
        if missing > 0:
            retries = config.ray.max_task_retries
            actor_class = ray.remote(
                num_cpus=config.ray.cpus_per_actor, max_restarts=retries, max_task_retries=retries
            )(_TaskActor)
            self.actors += [actor_class.remote(config, str(work_dir)) for _ in range(missing)]
        return self.actors[: min(size, wanted)]

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
        if not tasks:
            return
        queue = deque(tasks)
        running: dict[ray.ObjectRef, Any] = {}
        idle = list(self._pool(config, work_dir, len(queue)))
        nodes = _alive_nodes()
        try:
            while queue or running:
                while idle and queue:
                    actor = idle.pop(0)
                    running[actor.run_task.remote(segment, queue.popleft())] = actor
                finished = self._collect(running, on_task, timeout=_TAIL_CHECK_S)
                if not finished and idle and _alive_nodes() < nodes:
                    # A node was lost: an actor restarting elsewhere may need the CPUs
                    # the idle ones hold (a deadlock otherwise); later segments refill.
                    busy = {id(actor) for actor in running.values()}
                    self._release([a for a in idle if id(a) not in busy])
                    idle = []
                idle += finished
        except BaseException:
            # The pool is shared by the run's segments: stop it, so that no task still in
            # flight writes into the work directory after the failure is reported.
            self.close()
            raise

    def run_call(self, config, work_dir, fn, *args) -> Any:
        """``fn(*args)`` on an actor of the run's pool (idle between segments)."""
        import ray  # deferred

        actor = self._pool(config, Path(work_dir), 1)[0]
        try:
            return ray.get(actor.call.remote(fn, *args))
        except BaseException:
            self.close()  # as run_segment: nothing in flight writes after the failure
            raise

    def _collect(
        self,
        running: dict[ray.ObjectRef, Any],
        on_task: Callable[[dict[str, Any]], None],
        timeout: float,
    ) -> list[Any]:
        """Report the tasks that finish within ``timeout`` (at least one unless it
        passes); returns their actors, now idle."""
        import ray  # deferred

        done, _ = ray.wait(list(running), num_returns=1, timeout=timeout)
        if done:  # and whatever else has finished by now
            done, _ = ray.wait(list(running), num_returns=len(running), timeout=0)
        freed = []
        for ref in done:
            actor = running.pop(ref)
            stats, node, pid = ray.get(ref)
            self.placement.ran(node, pid)
            on_task(stats)
            freed.append(actor)
        return freed

    def _release(self, actors: list[Any]) -> None:
        import ray  # deferred

        for actor in actors:
            ray.kill(actor)
            self.actors.remove(actor)

    def close(self) -> None:
        """Stop the pool (a joined cluster's actors would otherwise outlive the run)."""
        for actor in self.actors:
            sys.modules["ray"].kill(actor)  # actors exist: Ray is imported
        self.actors = []


def run_on_ray(
    config: PipelineConfig,
    out: str | Path,
    address: str | None = None,
    overwrite: bool = False,
    log: Callable[[str], None] | None = None,
    progress: RunProgress | None = None,
) -> dict[str, Any]:
    """``dataforge run`` with ``executor: ray``: claim and lock ``out``, then start or join
    Ray (in this thread) and run the pipeline on its actors (a refused or already complete
    run never starts Ray). ``address`` as ``--address`` (:func:`cluster_address`). The
    pipeline's counters also go to Ray's metrics (:mod:`dataforge.runtime.ray_metrics`)."""
    config, out = resolve_run_paths(config, out)
    joined = cluster_address(config, address)
    cluster = joined[0] if joined else None
    kwargs = {"log": log} if log else {}
    progress = progress or RunProgress.silent()
    executors: list[RayExecutor] = []
    started: list[bool] = []  # this call connected Ray (it disconnects it at the end)
    restore = exit_on_sigterm()

    def start_ray() -> RayExecutor:
        # Not imported before connect(): Ray reads RAY_AUTH_MODE, which it may set, at import.
        if "ray" not in sys.modules or not sys.modules["ray"].is_initialized():
            started.append(True)
        where = connect(config, cluster, verbose=progress.verbose)
        exit_on_sigterm()  # again: ray.init sets a handler of its own (exit status 15)
        if log:
            log(f"running on {where}")
        from dataforge.runtime.ray_metrics import RayMetrics

        progress.listeners = (*progress.listeners, RayMetrics(config))
        executors.append(RayExecutor(config, cluster=cluster is not None))
        if log:
            log(executors[0].memory_budget(config).why)
        return executors[0]

    try:
        return run_pipeline(
            config, out, start_ray, overwrite=overwrite, progress=progress, **kwargs
        )
    finally:
        for executor in executors:
            executor.close()
        # Leaving or stopping Ray stops the worker-log relay too, so that Ray's copies of a
        # failed task's trace do not trail after the one-line error the CLI prints next.
        if started and sys.modules["ray"].is_initialized():
            sys.modules["ray"].shutdown()
        restore()


def place_on_ray(config: PipelineConfig, address: str | None) -> tuple[str | None, str]:
    """The cluster a Ray run joins (:func:`cluster_address`; None: embedded local Ray) and
    where its tasks run, in words (:attr:`ExecutorSpec.place`)."""
    joined = cluster_address(config, address)
    if joined is None:
        cpus = embedded_cpus(config)
        return None, (
            f"the actors of embedded local Ray with {cpus} CPUs "
            "(no --address, ray.address or RAY_ADDRESS)"
        )
    cluster, named_by = joined
    return cluster, f"the actors of the Ray cluster at {cluster} (from {named_by})"


RAY = ExecutorSpec(place=place_on_ray, run=run_on_ray)
