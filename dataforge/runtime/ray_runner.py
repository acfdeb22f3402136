"""Ray execution: one pool of long-lived actors per run, fed task by task.

``dataforge run`` starts embedded local Ray or joins a cluster
(:mod:`dataforge.runtime.cluster`: connection, authentication, path checks). The first segment starts a pool of
:class:`_TaskActor` (``ray.actors``, default one per CPU) and every later segment of the
run reuses it: an actor builds a segment's :class:`SegmentRunner` (its ops: jieba, KenLM,
tokenizer) on its first task of that segment and keeps it for the segment's other tasks.
Each task processes one input file (or one part of the previous segment) and commits one
part; the fused per-actor op chain avoids an Arrow hand-off between stages, which on small
machines costs more than the stages themselves. The driver keeps one task in flight per
actor and hands the next pending task to whichever actor finishes first.

The driver runs tasks itself, in process, with the same :class:`SegmentRunner`, and goes
on doing so as one of the run's workers (one actor fewer to start and import). Embedded
Ray is started in a background thread (:class:`RayStart`, 2.5-5 s on 2 cores) once the
driver's first task of a segment shows more work left than starting Ray pays back
(:func:`ray_pays_s`; at once with ``ray.start: always`` or when ``ray.actors`` sizes
the pool): a small run never starts it. The driver's lane is two forked processes
(:mod:`dataforge.runtime.lane_processes`), or two threads where forking is not safe
(:mod:`dataforge.runtime.driver_lanes`), until actors run. A task's output does not depend
on where it ran, so neither does the run's. On a joined cluster the driver only coordinates: its machine may be far from the data and is not counted in
the cluster's CPUs.
"""

from __future__ import annotations

import sys
import threading
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dataforge.config import PipelineConfig
from dataforge.io import fs
from dataforge.io.readers import InputTask
from dataforge.runtime.cluster import (
    check_nodes_see_paths,
    connect,
    embedded_cpus,
    resolve_address,
    resolve_run_paths,
    stop_embedded_ray,
)
from dataforge.runtime.driver_lanes import DriverLanes
from dataforge.runtime.lane_processes import ProcessLanes, lanes_are_processes
from dataforge.runtime.pipeline import run_pipeline
from dataforge.runtime.progress import RunProgress
from dataforge.runtime.ray_start import (
    MetricsOnceUp,
    RayStart,
    exit_on_sigterm,
    ray_initialized,
    ray_pays_s,
)
from dataforge.runtime.segments import Segment, SegmentRunner

if TYPE_CHECKING:
    import ray


__all__ = ["RayExecutor", "RayStart", "ray_pays_s", "run_on_ray"]


_TAIL_CHECK_S = 5.0
_DRIVER_THREADS = 2
"""Lanes of the driver (forked processes, else threads): two processes run the peers
recipe's first segment ~1.95x as fast as one thread on 2 cores, two threads 1.6x (a third
thread added nothing at 1.36x). More lanes on machines with more cores are not measured
here: there, Ray's actors take the other cores once the work pays for them."""
_LANE_POLL_S = 0.05
"""How long the driver waits for one of its own tasks before it looks at the actors'."""
_ACTOR_START_S = 2.0
"""What a new actor costs before its first result (Ray's worker, imports, the segment's
ops: 1.5-2 s measured on 2 busy cores). The driver lane starts the pool only when its
own measured pace leaves more work than that in the segment."""


def _alive_nodes() -> int:
    import ray  # deferred: a run that never starts Ray never imports it (~0.2 s)

    return sum(1 for node in ray.nodes() if node["Alive"])


class _TaskActor:
    """Runs tasks of any segment of one run; keeps the current segment's runner (its ops
    loaded once per actor and segment)."""

    def __init__(self, config: PipelineConfig, work_dir: str) -> None:
        self.config, self.work_dir = config, work_dir
        self.segment_index: int | None = None
        self.runner: SegmentRunner | None = None

    def run_task(self, segment: Segment, task: dict[str, Any]) -> dict[str, Any]:
        if self.segment_index != segment.index:
            self.runner = None  # free the previous segment's ops before loading the next
            self.runner = SegmentRunner(self.config, segment, self.work_dir)
            self.segment_index = segment.index
        return self.runner.run_task(task)


class RayExecutor:
    """Runs segments' tasks on one pool of Ray actors per run, created on first use and
    sized from the config or the cluster's CPUs; :meth:`close` stops it.

    ``starting``: embedded Ray still starting (:class:`RayStart`). Embedded, the driver
    runs tasks in process (``driver_helps``; off on a joined cluster): for the whole run as
    one of ``num_cpus`` workers next to ``num_cpus - 1`` actors, each fed two tasks at a
    time so that none waits while the driver works (``driver_lane``); or, when
    ``ray.actors`` sizes the pool, until every actor has returned a task.

    Plain actors rather than a Ray Data ``map_batches`` pool: tasks are whole files, so
    there is nothing to stream, and a pool per segment (with Ray Data's coordinator actors)
    was start-up cost paid again at every segment. The pool hands each idle actor the next
    task and reports every committed task at once (live progress). The constructor
    arguments are small enough for Ray to inline, so actor restarts (``max_restarts``) never
    depend on objects in the object store.
    """

    def __init__(
        self, config: PipelineConfig, cluster: bool = False, starting: RayStart | None = None
    ) -> None:
        self.config = config
        self.cluster = cluster
        self.starting = starting
        self.driver_helps = not cluster
        if starting is None:
            import ray  # deferred

            self.num_cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
        else:  # what connect() starts embedded Ray with
            self.num_cpus = embedded_cpus(config)
        # Embedded, the driver is one of the run's workers for the whole run ("lane"):
        # one actor fewer to start and import (~1.5 CPU-seconds), measured 3-5% less wall
        # time on 2 CPUs. Not when ``ray.actors`` sets the pool: then it only helps until
        # the actors are warm.
        self.driver_lane = self.driver_helps and self.num_cpus >= 2 and not config.ray.actors
        # The lane's threads (driver_lanes: the work outside the GIL on a second core);
        # one while the driver only helps until a sized pool is warm.
        self.driver_threads = min(_DRIVER_THREADS, self.num_cpus) if self.driver_lane else 1
        self.fork_lanes = self.driver_threads > 1 and lanes_are_processes()
        self.ray_pays_s = ray_pays_s(self.num_cpus, self.driver_threads, self.fork_lanes)
        self.actors: list[Any] = []
        self.warm: set[int] = set()  # id() of actors that have returned a task
        self.driver_tasks = 0
        self.most_work_left = 0.0  # the largest estimate that did not start Ray (seconds)
        # Asked for (ray.start: always) next to the driver's lane: begun once the lane has
        # forked, at the first task the driver takes (a lane forked after Ray begins is
        # threads, which share the GIL); a sized pool or a single CPU: at once.
        self.begin_after_fork = (
            starting is not None and self.driver_lane and (config.ray.start == "always")
        )
        if starting is not None and not self.driver_lane:
            starting.begin()

    @property
    def ray_available(self) -> bool:
        """Ray is up now (a barrier planner may use it); never waits for the start."""
        return self.starting is None or self.starting.ready()

    @property
    def may_fork(self) -> bool:
        """The driver may fork now: its lanes are processes, Ray is not begun (a forked
        copy of Ray's connection threads is not safe) and no client of remote storage
        exists (its connection pool must not be shared)."""
        return (
            self.fork_lanes
            and self.starting is not None
            and not self.starting.begun
            and not fs.remote_in_use()
        )

    def _pool(self, config: PipelineConfig, work_dir: Path, wanted: int) -> list[Any]:
        import ray  # deferred

        cpus = self.num_cpus - (1 if self.driver_lane else 0)  # the driver's lane takes one
        size = config.ray.actors or max(1, int(cpus // config.ray.cpus_per_actor))
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
        queue = deque(tasks)
        running: dict[ray.ObjectRef, Any] = {}
        idle: list[Any] = []
        pool: list[Any] | None = None
        forked = self.may_fork  # forked lanes (lane_processes); threads once Ray may be up
        if self.starting is not None and not self.starting.begun:  # the bar of this lane
            self.ray_pays_s = ray_pays_s(self.num_cpus, self.driver_threads, forked)
        lanes = (ProcessLanes if forked else DriverLanes)(
            lambda: SegmentRunner(config, segment, str(work_dir)), self.driver_threads
        )
        timers: dict[str, threading.Timer] = {}  # of the driver's tasks in flight
        nodes = 0
        driver_seconds: list[float] = []  # per task the driver ran: wall over its threads
        try:
            while queue or running or lanes.busy:
                if self.starting is not None and not self.starting.begun:
                    self._begin_ray_if_it_pays(queue, driver_seconds)
                if pool is None and self.ray_available and self._pool_pays(queue, driver_seconds):
                    pool = self._pool(config, work_dir, len(queue))
                    # With the driver as a lane, an actor holds a second task, so that it
                    # never waits for the driver to finish one of its own to be fed.
                    idle, nodes = list(pool) * (2 if self.driver_lane else 1), _alive_nodes()
                    lanes.limit = 1  # the actors take the other cores
                while idle and queue:
                    actor = idle.pop(0)
                    running[actor.run_task.remote(segment, queue.popleft())] = actor
                while queue and lanes.idle and self._driver_should_help(pool):
                    task = queue.popleft()
                    lanes.submit(task)
                    first = len(driver_seconds) < self.driver_threads  # a warm-up task
                    timer = self._ray_begins_if_slow(len(queue), first=first)
                    if timer is not None:
                        timers[task["task_id"]] = timer
                self._begin_asked_for()
                if lanes.busy:
                    for result, seconds in lanes.results(timeout=_LANE_POLL_S):
                        if (timer := timers.pop(result["task_id"], None)) is not None:
                            timer.cancel()
                        driver_seconds.append(seconds / lanes.limit)
                        on_task(result)
                        self.driver_tasks += 1
                    idle += self._collect(running, on_task, timeout=0)
                    continue
                if not running:  # Ray still starting and the driver may not help
                    self.starting.wait()
                    continue
                finished = self._collect(running, on_task, timeout=_TAIL_CHECK_S)
                if not finished and idle and _alive_nodes() < nodes:
                    # A node was lost: an actor restarting elsewhere may need the CPUs
                    # the idle ones hold (a deadlock otherwise); later segments refill.
                    busy = {id(actor) for actor in running.values()}
                    self._release([a for a in dict.fromkeys(idle) if id(a) not in busy])
                    idle = [a for a in idle if id(a) in busy]
                idle += finished
            self._begin_asked_for()  # a segment without tasks
        except BaseException:
            # The pool is shared by the run's segments: stop it, so that no task still in
            # flight writes into the work directory after the failure is reported.
            self.close()
            raise
        finally:
            for timer in timers.values():
                timer.cancel()
            lanes.close()  # on a failure, cancels the driver's tasks still in flight

    def _begin_asked_for(self) -> None:
        """Begin Ray now if ``ray.start: always`` waits for the lane's fork."""
        if self.begin_after_fork:
            self.begin_after_fork = False
            self.starting.begin()

    def _pace(self, driver_seconds: list[float]) -> float:
        """Seconds per task at the driver's steady pace: each thread's first task (its
        runner's warm-up) left out while later ones exist."""
        steady = driver_seconds[self.driver_threads :] or driver_seconds
        return sum(steady) / len(steady)

    def _ray_bar(self, first: bool) -> float:
        """Work left above which Ray is begun: :attr:`ray_pays_s`, twice that while only
        warm-up tasks (each driver thread's first of the segment) have been timed."""
        return self.ray_pays_s * (2 if first else 1)

    def _begin_ray_if_it_pays(self, queue: deque, driver_seconds: list[float]) -> None:
        """Embedded Ray is started only once a segment's work left, at the driver's
        measured pace, is more than starting it pays back (:func:`ray_pays_s`): a small
        run never starts it and finishes as fast as in process. Each driver thread's first
        task carries the warm-up of its runner (first calls, caches: 0.35 s against 0.15 s
        for the next ones on the demo recipe), so their pace alone starts Ray only at twice
        the bar."""
        if not driver_seconds:
            return
        left = len(queue) * self._pace(driver_seconds)
        if left > self._ray_bar(first=len(driver_seconds) <= self.driver_threads):
            self.starting.begin()
        else:
            self.most_work_left = max(self.most_work_left, left)

    def _ray_begins_if_slow(self, left: int, first: bool) -> threading.Timer | None:
        """For a task the driver starts with ``left`` more in the segment and Ray not
        begun: a timer that begins Ray as soon as the task has taken long enough that the
        tasks left, each at least as long (shared by the driver's threads), pass the bar of
        :meth:`_begin_ray_if_it_pays` (a file split into large tasks would otherwise start
        Ray only after the first one). The caller cancels it when the task ends."""
        if self.starting is None or self.starting.begun or left == 0:
            return None
        if self.ray_pays_s == float("inf"):  # Ray never pays here
            return None
        due = self._ray_bar(first) * self.driver_threads / left
        timer = threading.Timer(due, self.starting.begin)
        timer.daemon = True
        timer.start()
        return timer

    def _pool_pays(self, queue: deque, driver_seconds: list[float]) -> bool:
        """Whether to start (or take from the run's pool) the actors now. A pool that
        exists is free to use; a sized pool or a cluster always starts. The driver lane
        runs one task of the segment first and starts actors only when the rest, at its
        pace, is more work than an actor costs to start (:data:`_ACTOR_START_S`): on a
        small run the actor's imports only compete with the driver (measured: the demo
        recipe's 16 MB run 5.9 -> 5.55 s without it)."""
        if self.actors or not self.driver_lane:
            return True
        if not driver_seconds:
            return False
        return len(queue) * self._pace(driver_seconds) > _ACTOR_START_S

    def _driver_should_help(self, pool: list[Any] | None) -> bool:
        if not self.driver_helps:
            return False
        if self.driver_lane:
            return True
        return pool is None or any(id(actor) not in self.warm for actor in pool)

    def _collect(
        self,
        running: dict[ray.ObjectRef, Any],
        on_task: Callable[[dict[str, Any]], None],
        timeout: float,
    ) -> list[Any]:
        """Report the tasks that finish within ``timeout`` (at least one unless it
        passes); returns their actors, now idle."""
        if not running:
            return []
        import ray  # deferred

        done, _ = ray.wait(list(running), num_returns=1, timeout=timeout)
        if done:  # and whatever else has finished by now
            done, _ = ray.wait(list(running), num_returns=len(running), timeout=0)
        freed = []
        for ref in done:
            actor = running.pop(ref)
            on_task(ray.get(ref))
            self.warm.add(id(actor))
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


def _why_ray_was_not_started(executor: RayExecutor) -> str:
    always = "(ray.start: always starts it with the run)"
    if executor.ray_pays_s == float("inf"):
        return (
            f"Ray was not started: on {executor.num_cpus} CPU(s) the driver's lanes run the "
            f"work as fast as Ray's actors would {always}"
        )
    return (
        f"Ray was not started: the work left, at most {executor.most_work_left:.1f} s at the "
        f"driver's pace, never passed the {executor.ray_pays_s:.1f} s that starting it pays "
        f"back {always}"
    )


def run_on_ray(
    config: PipelineConfig,
    out: str | Path,
    address: str | None = None,
    overwrite: bool = False,
    log: Callable[[str], None] | None = None,
    progress: RunProgress | None = None,
) -> dict[str, Any]:
    """``dataforge run``: claim and lock ``out``, then start or join Ray and run the
    pipeline on it (a refused or already complete run never starts Ray). Embedded Ray
    starts in the background while the driver runs the first tasks. The pipeline's
    counters also go to Ray's metrics (:mod:`dataforge.runtime.ray_metrics`)."""
    config, out = resolve_run_paths(config, out)
    kwargs = {"log": log} if log else {}
    progress = progress or RunProgress.silent()
    executors: list[RayExecutor] = []
    starts: list[RayStart] = []
    connected: list[bool] = []
    restores: list[Callable[[], None]] = []
    cluster = resolve_address(config, address) is not None

    def joined() -> str:
        where = connect(config, address, verbose=progress.verbose)
        if log:
            log(f"running on {where}")
        return where

    def start_ray() -> RayExecutor:
        if ray_initialized() or cluster:
            if not ray_initialized():
                connected.append(True)
            joined()
            from dataforge.runtime.ray_metrics import RayMetrics

            progress.listeners = (*progress.listeners, RayMetrics(config))
            executor = RayExecutor(config, cluster=cluster)
        else:
            restores.append(exit_on_sigterm())
            starts.append(RayStart(joined, begin=False))  # the executor begins it
            progress.listeners = (*progress.listeners, MetricsOnceUp(config, starts[0]))
            executor = RayExecutor(config, starting=starts[0])
        executors.append(executor)
        return executor

    completed = False
    try:
        manifest = run_pipeline(
            config, out, start_ray, overwrite=overwrite, progress=progress, **kwargs
        )
        completed = True
        return manifest
    finally:
        for executor in executors:
            executor.close()
            if log and executor.driver_tasks:
                log(f"the driver ran {executor.driver_tasks} of the run's tasks itself")
            if log and completed and executor.starting and not executor.starting.begun:
                log(_why_ray_was_not_started(executor))
        # Leaving or stopping Ray stops the worker-log relay too, so that Ray's copies of a
        # failed task's trace do not trail after the one-line error the CLI prints next.
        if connected and ray_initialized():
            sys.modules["ray"].shutdown()  # leaves the cluster; it runs on
        for start in starts:
            start.finished()  # a start cannot be interrupted: its node is stopped once up
            try:
                if ray_initialized():
                    stop_embedded_ray()
            finally:
                start.release()
        for restore in restores:
            restore()
