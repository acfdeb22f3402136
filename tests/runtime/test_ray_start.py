"""Embedded Ray starts in the background while the driver runs tasks itself.

The driver's tasks use the same ``SegmentRunner`` as the actors, so the output is the
in-process run's whatever the split between them; a failed start fails the run in one
line; and the node the background thread started outlives that thread (Ray spawns its
processes with ``PR_SET_PDEATHSIG``, which fires when the spawning thread ends).
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from dataforge.config import load_pipeline
from dataforge.io.mds import iter_samples
from dataforge.runtime.failures import RunFailed
from dataforge.runtime.pipeline import LocalExecutor, run_pipeline
from dataforge.runtime.ray_runner import RayExecutor, RayStart

STAGES = """
stages:
  - {op: clean}
  - {op: quality_filter}
  - {op: dedup, method: exact}
"""


def _config(pipeline_file: Path):
    pipeline_file.write_text(pipeline_file.read_text() + STAGES, encoding="utf-8")
    return load_pipeline(pipeline_file)


def _reference(config, tmp_path: Path) -> list[dict]:
    run_pipeline(config, tmp_path / "local", LocalExecutor(), log=lambda m: None)
    return list(iter_samples(tmp_path / "local"))


def _stop(executor: RayExecutor, start: RayStart) -> None:
    """What ``run_on_ray`` does after a run: the pool, then the node its start began."""
    import ray

    from dataforge.runtime.cluster import stop_embedded_ray

    executor.close()
    start.finished()
    if ray.is_initialized():
        stop_embedded_ray()
    start.release()


@contextlib.contextmanager
def _unused_start(begin: bool = False) -> Iterator[RayStart]:
    """A start whose function is never meant to run (``begin``: its thread runs it)."""
    start = RayStart(lambda: "never used", begin=begin)
    try:
        yield start
    finally:
        start.release()


def test_run_completes_in_the_driver_while_ray_never_comes_up(
    pipeline_file: Path, tmp_path: Path
) -> None:
    config = _config(pipeline_file)
    gate = threading.Event()
    start = RayStart(lambda: gate.wait() and "never used")
    executor = RayExecutor(config, starting=start)
    try:
        assert not executor.ray_available
        manifest = run_pipeline(config, tmp_path / "out", executor, log=lambda m: None)
    finally:
        gate.set()
        start.release()
    tasks = len(manifest["inputs"])
    assert tasks == 5
    assert executor.driver_tasks == 2 * tasks  # both segments, every task, no actor
    assert executor.actors == []
    assert list(iter_samples(tmp_path / "out")) == _reference(config, tmp_path)


def test_a_failed_start_fails_the_run_in_one_line(pipeline_file: Path, tmp_path: Path) -> None:
    config = _config(pipeline_file)

    def broken() -> str:
        raise ConnectionError("raylet did not register within 30 s")

    start = RayStart(broken)
    start.finished()
    try:
        with pytest.raises(RunFailed, match="raylet did not register within 30 s"):
            run_pipeline(
                config, tmp_path / "out", RayExecutor(config, starting=start), log=lambda m: None
            )
    finally:
        start.release()
    assert not (tmp_path / "out" / "manifest.json").exists()


@pytest.mark.ray
def test_background_start_keeps_its_node_and_matches_the_in_process_run(
    pipeline_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ray

    import dataforge.runtime.ray_runner as ray_runner

    monkeypatch.setattr(ray_runner, "_ACTOR_START_S", 0.0)  # the tiny corpus still uses actors

    from dataforge.runtime.cluster import connect, embedded_cpus

    config = _config(pipeline_file)
    start = RayStart(lambda: connect(config, None))
    executor = RayExecutor(config, starting=start)
    try:
        start.wait()
        # The start thread is parked, not ended: the node it spawned stays up.
        assert ray.get(ray.remote(lambda: 41 + 1).remote(), timeout=60) == 42
        # A lean node: no autoscaler monitor, no log monitor, no dashboard API server;
        # ray.init's RayParams and Node.start_api_server restored.
        processes = ray._private.worker._global_node.all_processes
        assert {"gcs_server", "raylet"} <= set(processes)
        assert not {"monitor", "log_monitor", "dashboard"} & set(processes)
        assert ray._private.parameter.RayParams.__name__ == "RayParams"
        assert ray._private.node.Node.start_api_server.__qualname__ == "Node.start_api_server"
        manifest = run_pipeline(config, tmp_path / "out", executor, log=lambda m: None)
        assert executor.driver_tasks < 2 * len(manifest["inputs"])  # the actors ran some
        # the driver is one of the run's workers: one actor fewer than CPUs
        assert len(executor.actors) == max(1, embedded_cpus(config) - 1)
    finally:
        _stop(executor, start)
    assert not ray.is_initialized()
    assert list(iter_samples(tmp_path / "out")) == _reference(config, tmp_path)


@pytest.mark.ray
def test_with_ray_up_a_small_run_starts_no_actor(pipeline_file: Path, tmp_path: Path) -> None:
    """Ray is up before the run, but tasks of milliseconds never pay for an actor's start:
    the driver runs them all, no actor is created, the output is the in-process run's."""

    from dataforge.runtime.cluster import connect

    config = _config(pipeline_file)
    two = dataclasses.replace(config, ray=dataclasses.replace(config.ray, num_cpus=2))
    start = RayStart(lambda: connect(two, None))
    executor = RayExecutor(two, starting=start)
    try:
        start.wait()
        manifest = run_pipeline(two, tmp_path / "out", executor, log=lambda m: None)
        assert executor.actors == []
        assert executor.driver_tasks == 2 * len(manifest["inputs"])  # both segments
    finally:
        _stop(executor, start)
    assert list(iter_samples(tmp_path / "out")) == _reference(config, tmp_path)


def test_the_driver_is_a_lane_unless_the_pool_is_sized(pipeline_file: Path) -> None:
    config = _config(pipeline_file)
    with _unused_start(begin=True) as start:
        two = dataclasses.replace(config, ray=dataclasses.replace(config.ray, num_cpus=2))
        assert RayExecutor(two, starting=start).driver_lane
        one = dataclasses.replace(config, ray=dataclasses.replace(config.ray, num_cpus=1))
        assert not RayExecutor(one, starting=start).driver_lane  # helps only until warm
        sized = dataclasses.replace(two, ray=dataclasses.replace(two.ray, actors=2))
        assert not RayExecutor(sized, starting=start).driver_lane
        assert not RayExecutor(two, cluster=True, starting=start).driver_helps


@pytest.mark.ray
def test_run_on_ray_leaves_the_process_as_it_found_it(pipeline_file: Path, tmp_path: Path) -> None:
    """A library caller goes on after the run: embedded Ray stopped, the SIGTERM handler
    the run installed for its own clean exit removed again."""
    import signal

    import ray

    from dataforge.runtime.ray_runner import run_on_ray

    config = _config(pipeline_file)
    # a sized pool starts Ray at once (the tiny corpus alone would never start it)
    sized = dataclasses.replace(config, ray=dataclasses.replace(config.ray, actors=1))
    # an earlier ray.init in this process (other tests) may have left Ray's own handler
    before = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    logged: list[str] = []
    try:
        run_on_ray(sized, tmp_path / "out", log=logged.append)
        assert any(line.startswith("running on") for line in logged)
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGTERM, before)
    assert not ray.is_initialized()
    assert list(iter_samples(tmp_path / "out")) == _reference(config, tmp_path)


def test_the_lane_starts_actors_only_for_work_that_pays_for_them(pipeline_file: Path) -> None:
    from collections import deque

    from dataforge.runtime.ray_runner import _ACTOR_START_S

    config = _config(pipeline_file)
    two = dataclasses.replace(config, ray=dataclasses.replace(config.ray, num_cpus=2))
    with _unused_start(begin=True) as start:
        lane = RayExecutor(two, starting=start)
        pace = _ACTOR_START_S / 4  # seconds per task the driver measured
        assert not lane._pool_pays(deque(range(9)), [])  # the driver runs one task first
        assert lane._pool_pays(deque(range(5)), [pace, pace])  # 5 tasks left > 4
        assert not lane._pool_pays(deque(range(4)), [pace])  # 4 left: not more than it
        # each of the driver's two threads' first tasks (warm-up) is left out of the pace
        assert not lane._pool_pays(deque(range(4)), [100.0, 100.0, pace])
        lane.actors = ["an actor of an earlier segment"]
        assert lane._pool_pays(deque(range(1)), [])  # an existing pool is free to use
        sized = dataclasses.replace(two, ray=dataclasses.replace(two.ray, actors=1))
        assert RayExecutor(sized, starting=start)._pool_pays(deque(range(1)), [])
        assert RayExecutor(two, cluster=True, starting=start)._pool_pays(deque(range(1)), [])


def test_embedded_ray_starts_only_when_the_work_left_pays_for_it(pipeline_file: Path) -> None:
    """Each driver lane's first task of a segment carries its warm-up: their pace alone
    starts Ray only at twice the bar; after them, the later tasks' pace decides. (On 4
    CPUs: on 2, two forked lanes never make Ray pay.)"""
    from collections import deque

    config = _config(pipeline_file)
    two = dataclasses.replace(config, ray=dataclasses.replace(config.ray, num_cpus=4))

    def begun(queue: int, driver_seconds: list[float]) -> bool:
        with _unused_start() as start:
            RayExecutor(two, starting=start)._begin_ray_if_it_pays(
                deque(range(queue)), driver_seconds
            )
            return start.begun

    with _unused_start() as start:
        pace = RayExecutor(two, starting=start).ray_pays_s / 10
    assert not begun(50, [])  # nothing measured yet
    assert not begun(19, [pace])  # 1.9x the bar on the first task alone: wait
    assert begun(21, [pace])  # 2.1x
    assert not begun(19, [pace, pace])  # the second thread's first task: still warm-up
    assert begun(11, [100.0, 100.0, pace])  # 1.1x at the third task's pace, warm-ups ignored
    assert not begun(10, [pace / 100, pace / 100, pace, pace])  # exactly the bar: not more
    # As asked: a sized pool at once; ``always`` at the driver's first task, once its lane
    # has forked (test_driver_lanes runs that)
    for asked, at_once in (({"actors": 1}, True), ({"start": "always"}, False)):
        config = dataclasses.replace(two, ray=dataclasses.replace(two.ray, **asked))
        with _unused_start() as start:
            executor = RayExecutor(config, starting=start)
            assert start.begun == at_once and executor.begin_after_fork != at_once, asked


def test_a_slow_driver_task_begins_ray_before_it_ends(
    pipeline_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task that alone shows the work left passes the bar begins Ray while it runs (a
    file split into large tasks); a quick one leaves Ray unbegun, also after it ended."""
    import time

    import dataforge.runtime.ray_runner as ray_runner

    monkeypatch.setattr(ray_runner, "ray_pays_s", lambda cpus, threads, processes: 0.5)
    config = _config(pipeline_file)
    two = dataclasses.replace(config, ray=dataclasses.replace(config.ray, num_cpus=2))

    def begun_during(seconds: float, left: int, first: bool) -> tuple[bool, bool]:
        with _unused_start() as start:
            executor = RayExecutor(two, starting=start)
            assert executor.driver_threads == 2  # the bar's work is shared by two threads
            timer = executor._ray_begins_if_slow(left, first)
            time.sleep(seconds)
            during = start.begun
            if timer is not None:
                timer.cancel()
            due = 0.5 * (2 if first else 1) * 2 / max(left, 1)  # when the timer would fire
            time.sleep(max(0.3, due - seconds + 0.3))  # a cancelled timer never fires later
            return during, start.begun

    # first task: bar 2 x 0.5 s x 2 threads over 20 tasks left -> begins 0.1 s into it
    assert begun_during(0.5, left=20, first=True) == (True, True)
    # first task, 1 task left: 2 s -> a 0.1 s task does not begin it
    assert begun_during(0.1, left=1, first=True) == (False, False)
    # a later task: 0.5 s x 2 / 1 left -> a 1.5 s task begins it; the first-task bar not
    assert begun_during(1.5, left=1, first=False) == (True, True)
    assert begun_during(1.5, left=1, first=True) == (False, False)
    assert begun_during(0.5, left=0, first=True) == (False, False)  # nothing left
