"""The driver's lane threads: two threads run a segment's tasks with the output of one;
a failure or an interrupt cancels the task still in flight, which commits nothing."""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from dataforge.config import load_pipeline
from dataforge.io import fs
from dataforge.io.mds import iter_samples
from dataforge.runtime.barriers import dedup as planner
from dataforge.runtime.driver_lanes import DriverLanes
from dataforge.runtime.failures import RunFailed
from dataforge.runtime.lane_processes import ProcessLanes, lanes_are_processes
from dataforge.runtime.pipeline import LocalExecutor, run_pipeline
from dataforge.runtime.ray_runner import RayExecutor, RayStart, ray_pays_s
from dataforge.runtime.segments import SegmentRunner, TaskCancelled

STAGES = """
stages:
  - {op: clean}
  - {op: quality_filter}
  - {op: dedup, method: exact}
"""


def _config(pipeline_file: Path, cpus: int = 2):
    pipeline_file.write_text(pipeline_file.read_text() + STAGES, encoding="utf-8")
    config = load_pipeline(pipeline_file)
    return dataclasses.replace(config, ray=dataclasses.replace(config.ray, num_cpus=cpus))


def _run_on_the_lanes(config, out: Path) -> tuple[RayExecutor, dict]:
    """The run on the Ray executor with a Ray start that is never begun: the driver's
    lanes run every task."""
    start = RayStart(lambda: "never used", begin=False)
    try:
        executor = RayExecutor(config, starting=start)
        return executor, run_pipeline(config, out, executor, log=lambda m: None)
    finally:
        start.release()


def _mark_tasks_by_process(marks: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Patch ``run_task`` (forked with the lanes) to leave one file per task in ``marks``,
    named ``<segment>-<task>``, holding the pid of the process that ran it."""
    marks.mkdir()
    run_task = SegmentRunner.run_task

    def recorded(self, task):
        time.sleep(0.05)  # long enough that the second child takes the next task
        (marks / f"{self.segment.index}-{task['task_id']}").write_text(str(os.getpid()))
        return run_task(self, task)

    monkeypatch.setattr(SegmentRunner, "run_task", recorded)
    return marks


def test_two_driver_threads_run_the_tasks_with_the_output_of_one(
    pipeline_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATAFORGE_DRIVER_LANES", "threads")
    config = _config(pipeline_file)
    run_pipeline(config, tmp_path / "local", LocalExecutor(), log=lambda m: None)
    threads: list[str] = []
    run_task = SegmentRunner.run_task

    def recorded(self, task):
        threads.append(threading.current_thread().name)
        time.sleep(0.05)  # long enough that the second thread takes the next task
        return run_task(self, task)

    monkeypatch.setattr(SegmentRunner, "run_task", recorded)
    executor, manifest = _run_on_the_lanes(config, tmp_path / "lanes")
    assert not executor.starting.begun and executor.actors == []
    assert executor.driver_threads == 2
    assert executor.driver_tasks == len(threads) == 2 * len(manifest["inputs"])
    assert set(threads) == {"dataforge-lane-0", "dataforge-lane-1"}
    assert list(iter_samples(tmp_path / "lanes")) == list(iter_samples(tmp_path / "local"))


def test_two_forked_lanes_run_the_tasks_with_the_output_of_one(
    pipeline_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default lane: two forked children of the driver run every task (the patched
    ``run_task`` is forked with them and leaves one file per task naming its process)."""
    monkeypatch.delenv("DATAFORGE_DRIVER_LANES", raising=False)
    monkeypatch.setattr(fs, "_REMOTE_USED", set())  # whatever earlier tests made
    config = _config(pipeline_file)
    run_pipeline(config, tmp_path / "local", LocalExecutor(), log=lambda m: None)
    marks = _mark_tasks_by_process(tmp_path / "marks", monkeypatch)
    executor, manifest = _run_on_the_lanes(config, tmp_path / "lanes")
    assert not executor.starting.begun and executor.actors == [] and executor.fork_lanes
    # on 2 CPUs Ray never pays next to two forked lanes: no bar, no timer to begin it
    assert executor.ray_pays_s == float("inf")
    assert executor._ray_begins_if_slow(left=5, first=False) is None
    pids = {int(p.read_text()) for p in marks.iterdir()}
    assert executor.driver_tasks == len(list(marks.iterdir())) == 2 * len(manifest["inputs"])
    assert os.getpid() not in pids and len(pids) == 4  # two children in each segment
    assert not [t for t in threading.enumerate() if t.name.startswith("dataforge-lane")]
    assert list(iter_samples(tmp_path / "lanes")) == list(iter_samples(tmp_path / "local"))
    local = json.loads((tmp_path / "local" / "manifest.json").read_text())
    assert manifest["counts"] == local["counts"]


def test_ray_start_always_begins_once_the_lanes_have_forked(
    pipeline_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``ray.start: always`` next to the driver's lane: Ray is begun at the first task,
    after the lane forked, so segment 0 runs on two forked processes; later segments, with
    Ray begun, on the driver's threads. The output is the in-process run's."""
    monkeypatch.delenv("DATAFORGE_DRIVER_LANES", raising=False)
    monkeypatch.setattr(fs, "_REMOTE_USED", set())  # whatever earlier tests made
    config = _config(pipeline_file)
    config = dataclasses.replace(config, ray=dataclasses.replace(config.ray, start="always"))
    run_pipeline(config, tmp_path / "local", LocalExecutor(), log=lambda m: None)
    marks = _mark_tasks_by_process(tmp_path / "marks", monkeypatch)
    gate = threading.Event()  # a Ray start that never finishes: the lane runs every task
    start = RayStart(lambda: str(gate.wait(60)), begin=False)
    try:
        executor = RayExecutor(config, starting=start)
        assert executor.begin_after_fork and not start.begun
        run_pipeline(config, tmp_path / "lanes", executor, log=lambda m: None)
    finally:
        gate.set()
        start.release()
    assert start.begun and not executor.begin_after_fork
    pids = {p.name: int(p.read_text()) for p in marks.iterdir()}
    first = {pid for name, pid in pids.items() if name.startswith("0-")}
    later = {pid for name, pid in pids.items() if not name.startswith("0-")}
    assert len(first) == 2 and os.getpid() not in first  # forked before Ray began
    assert later == {os.getpid()}  # Ray begun: threads of the driver
    assert list(iter_samples(tmp_path / "lanes")) == list(iter_samples(tmp_path / "local"))


def test_a_process_with_a_remote_storage_client_runs_its_lane_on_threads(
    pipeline_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An S3 client's connection pool must not be forked: once one exists in the driver,
    the lane is threads (and the output the same)."""
    monkeypatch.delenv("DATAFORGE_DRIVER_LANES", raising=False)
    monkeypatch.setattr(fs, "_REMOTE_USED", set())  # whatever earlier tests made
    fs.filesystem("/tmp/x")
    fs.filesystem("file:///tmp/x")
    assert not fs.remote_in_use()
    fs.filesystem("s3://bucket/key")  # a client, made without any request
    assert fs.remote_in_use()
    config = _config(pipeline_file)
    threads: list[str] = []
    run_task = SegmentRunner.run_task

    def recorded(self, task):
        threads.append(threading.current_thread().name)
        return run_task(self, task)

    monkeypatch.setattr(SegmentRunner, "run_task", recorded)
    executor, manifest = _run_on_the_lanes(config, tmp_path / "lanes")
    assert executor.fork_lanes and len(threads) == 2 * len(manifest["inputs"])
    assert set(threads) <= {"dataforge-lane-0", "dataforge-lane-1"}


_DEDUP = """
stages:
  - {op: clean}
  - {op: dedup, method: minhash, threshold: 0.7}
"""


def test_a_run_on_forked_lanes_verifies_dedup_in_groups(
    pipeline_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DATAFORGE_DRIVER_LANES", raising=False)
    monkeypatch.setattr(fs, "_REMOTE_USED", set())  # whatever earlier tests made
    monkeypatch.setattr(planner, "GROUPS_MIN_DOCS", 0)
    pipeline_file.write_text(pipeline_file.read_text() + _DEDUP, encoding="utf-8")
    config = load_pipeline(pipeline_file)
    config = dataclasses.replace(config, ray=dataclasses.replace(config.ray, num_cpus=2))
    local = run_pipeline(config, tmp_path / "local", LocalExecutor(), log=lambda m: None)
    executor, manifest = _run_on_the_lanes(config, tmp_path / "lanes")
    assert executor.may_fork
    grouped, alone = manifest["stages"][-1]["summary"], local["stages"][-1]["summary"]
    assert grouped["verification_groups"] == 2 and alone["verification_groups"] == 1
    assert grouped["dropped"] == alone["dropped"] > 0
    assert grouped["verified_pairs"] == alone["verified_pairs"]
    assert manifest["counts"] == local["counts"]
    assert list(iter_samples(tmp_path / "lanes")) == list(iter_samples(tmp_path / "local"))
    assert not multiprocessing.active_children()
    saved = json.loads((tmp_path / "lanes" / "manifest.json").read_text())
    assert saved["stages"][-1]["summary"]["verification_groups"] == 2


class _CancelsFirstTask(LocalExecutor):
    """Runs segment 0's first task with its cancel event set, looks at the work directory,
    then runs every task as usual."""

    def __init__(self) -> None:
        self.after_cancel: list[str] | None = None

    def run_segment(self, config, segment, work_dir, tasks, on_task) -> None:
        if segment.index == 0:
            runner = SegmentRunner(config, segment, str(work_dir))
            runner.cancel = threading.Event()
            runner.cancel.set()
            with pytest.raises(TaskCancelled):
                runner.run_task(tasks[0])
            self.after_cancel = sorted(
                str(p.relative_to(work_dir)) for p in Path(work_dir).rglob("*")
            )
        super().run_segment(config, segment, work_dir, tasks, on_task)


def test_a_cancelled_task_commits_nothing_and_is_no_failure(
    pipeline_file: Path, tmp_path: Path
) -> None:
    config = _config(pipeline_file)
    executor = _CancelsFirstTask()
    run_pipeline(config, tmp_path / "out", executor, log=lambda m: None)
    # no part, no marker, no staging directory, no failure record: as if never started
    assert executor.after_cancel == ["run.json", "seg0"]  # seg0: empty
    assert not (tmp_path / "out" / "logs").exists()
    run_pipeline(config, tmp_path / "local", LocalExecutor(), log=lambda m: None)
    assert list(iter_samples(tmp_path / "out")) == list(iter_samples(tmp_path / "local"))


class _Runner:
    """Stands for a SegmentRunner: task "fail" raises, "wait" runs until cancelled."""

    def __init__(self, started: threading.Event) -> None:
        self.cancel: threading.Event | None = None
        self.started = started

    def run_task(self, task):
        if task["task_id"] == "fail":
            raise ValueError("bad record in fail")
        if task["task_id"] == "wait":
            self.started.set()
            assert self.cancel.wait(30)
            raise TaskCancelled("wait")
        return {"task_id": task["task_id"]}


def test_lanes_hand_back_results_and_errors_and_cancel_on_close() -> None:
    started = threading.Event()
    lanes = DriverLanes(lambda: _Runner(started), threads=2)
    assert lanes.idle == 2
    lanes.submit({"task_id": "a"})
    lanes.submit({"task_id": "b"})
    with pytest.raises(RuntimeError, match="every lane is busy"):
        lanes.submit({"task_id": "c"})
    done: list[str] = []
    while len(done) < 2:
        done += [stats["task_id"] for stats, seconds in lanes.results(timeout=5)]
    assert sorted(done) == ["a", "b"] and lanes.busy == 0
    lanes.submit({"task_id": "wait"})
    assert started.wait(5)
    lanes.submit({"task_id": "fail"})
    with pytest.raises(ValueError, match="bad record in fail"):
        lanes.results(timeout=5)
    lanes.close()  # cancels "wait" and joins both threads
    assert not [t for t in threading.enumerate() if t.name.startswith("dataforge-lane")]
    lanes.limit = 1
    assert lanes.idle == 0  # "wait" was never collected: still counted busy


def test_ray_pays_back_later_when_the_driver_has_two_threads() -> None:
    assert ray_pays_s(2, 1) == pytest.approx(7.0, abs=0.05)  # the measured break-even
    assert ray_pays_s(2, 2) == pytest.approx(91.1, abs=0.1)
    assert ray_pays_s(16, 2) < ray_pays_s(4, 2) < ray_pays_s(2, 2)
    assert ray_pays_s(1, 1) == float("inf")  # one CPU: nothing to gain
    # two forked lanes run the work faster than the driver and one actor on 2 CPUs would
    assert ray_pays_s(2, 2, processes=True) == float("inf")
    assert ray_pays_s(4, 2, processes=True) == pytest.approx(8.14, abs=0.01)
    assert ray_pays_s(16, 2, processes=True) < ray_pays_s(4, 2, processes=True)


def test_a_runner_that_cannot_be_built_fails_in_the_caller() -> None:
    """An op that cannot load in a lane thread (a model file gone since ``validate``)
    reaches the driver's thread as its own error; zero threads is no valid lane."""

    def broken() -> _Runner:
        raise FileNotFoundError("models/zh.bin: no such file")

    lanes = DriverLanes(broken, threads=2)
    lanes.submit({"task_id": "a"})
    with pytest.raises(FileNotFoundError, match="models/zh.bin"):
        lanes.results(timeout=5)
    assert lanes.busy == 0 and lanes.results(timeout=0.01) == []
    lanes.close()
    with pytest.raises(ValueError, match="threads: 0 is not valid; valid: >= 1"):
        DriverLanes(broken, threads=0)
    # forked lanes build the runner in the driver, before forking: the error is submit's
    forked = ProcessLanes(broken, processes=2)
    with pytest.raises(FileNotFoundError, match="models/zh.bin"):
        forked.submit({"task_id": "a"})
    assert forked.busy == 0 and forked.idle == 2
    forked.close()
    with pytest.raises(ValueError, match="processes: 0 is not valid; valid: >= 1"):
        ProcessLanes(broken, processes=0)


# -- forked lanes --------------------------------------------------------------------


class _ForkRunner:
    """Stands for a SegmentRunner in a forked lane: "fail" raises, "odd" raises an
    exception that cannot be pickled, "lock" returns stats that cannot, "wait" marks a
    file and runs until cancelled, "die" kills its own process; others return their id
    and the lane's pid."""

    def __init__(self, marks: Path) -> None:
        self.cancel = None
        self.marks = marks

    def run_task(self, task):
        name = task["task_id"]
        if name == "fail":
            raise RunFailed("task fail: bad record in fail.jsonl line 3")
        if name == "odd":
            raise _Unpicklable("a lock inside", threading.Lock())
        if name == "die":
            os.kill(os.getpid(), signal.SIGKILL)
        if name == "lock":
            return {"task_id": name, "lock": threading.Lock()}
        if name == "say":
            print("lane says: 你好", file=sys.stderr)
        if name == "wait":
            (self.marks / "waiting").write_text(str(os.getpid()))
            deadline = time.monotonic() + 30
            while not self.cancel.is_set() and time.monotonic() < deadline:
                time.sleep(0.01)
            (self.marks / "cancelled").write_text(str(self.cancel.is_set()))
            raise TaskCancelled(name)
        return {"task_id": name, "pid": os.getpid(), "big": "x" * 200_000}


class _Unpicklable(Exception):
    """Raised with a lock among its arguments: it cannot cross the pipe as it is."""


def _collect(lanes, count: int) -> list[dict]:
    done: list[dict] = []
    deadline = time.monotonic() + 30
    while len(done) < count and time.monotonic() < deadline:
        done += [stats for stats, seconds in lanes.results(timeout=1)]
    return done


def test_forked_lanes_run_tasks_in_two_other_processes(
    tmp_path: Path, capfd: pytest.CaptureFixture
) -> None:
    lanes = ProcessLanes(lambda: _ForkRunner(tmp_path), processes=2)
    try:
        assert lanes.idle == 2
        lanes.submit({"task_id": "a"})
        lanes.submit({"task_id": "b"})
        with pytest.raises(RuntimeError, match="every lane is busy"):
            lanes.submit({"task_id": "c"})
        first = _collect(lanes, 2)
        lanes.submit({"task_id": "c"})
        lanes.submit({"task_id": "d"})
        done = first + _collect(lanes, 2)
        assert sorted(d["task_id"] for d in done) == ["a", "b", "c", "d"]
        pids = {d["pid"] for d in done}  # two children, neither the driver; large replies
        assert len(pids) == 2 and os.getpid() not in pids and lanes.busy == 0
        assert all(len(d["big"]) == 200_000 for d in done)
        lanes.submit({"task_id": "say"})  # what a task prints reaches the driver's stderr
        assert [d["task_id"] for d in _collect(lanes, 1)] == ["say"]
        assert "lane says: 你好\n" in capfd.readouterr().err
    finally:
        lanes.close()
    assert not [p for p in pids if _alive(p)]


def test_forked_lanes_hand_back_errors_and_cancel_on_close(tmp_path: Path) -> None:
    lanes = ProcessLanes(lambda: _ForkRunner(tmp_path), processes=2)
    lanes.submit({"task_id": "wait"})
    deadline = time.monotonic() + 30
    while not (tmp_path / "waiting").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    lanes.submit({"task_id": "fail"})
    with pytest.raises(RunFailed, match="bad record in fail.jsonl line 3"):
        lanes.results(timeout=30)
    lanes.submit({"task_id": "odd"})  # the freed lane takes the next task
    with pytest.raises(RuntimeError, match="_Unpicklable: .*a lock inside"):
        lanes.results(timeout=30)
    lanes.submit({"task_id": "lock"})
    with pytest.raises(RuntimeError, match="task lock: its stats cannot be sent to the driver"):
        lanes.results(timeout=30)
    lanes.submit({"task_id": "a"})  # the lane goes on after each of those
    assert [stats["task_id"] for stats in _collect(lanes, 1)] == ["a"]
    waiting = int((tmp_path / "waiting").read_text())
    lanes.close()  # "wait" sees the cancel flag, stops; both children leave
    assert (tmp_path / "cancelled").read_text() == "True"
    assert not _alive(waiting)


def test_a_lane_process_that_dies_fails_the_run_naming_its_task(tmp_path: Path) -> None:
    lanes = ProcessLanes(lambda: _ForkRunner(tmp_path), processes=2)
    try:
        lanes.submit({"task_id": "die"})
        with pytest.raises(
            RunFailed,
            match=r"task die: the driver's lane process \d+ died "
            r"\(killed by signal 9\); nothing of the task was committed",
        ):
            _collect(lanes, 1)
    finally:
        lanes.close()


def test_the_lane_kind_is_chosen_by_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DATAFORGE_DRIVER_LANES", raising=False)
    assert lanes_are_processes()  # Linux
    monkeypatch.setenv("DATAFORGE_DRIVER_LANES", "")  # set empty: as if unset
    assert lanes_are_processes()
    monkeypatch.setenv("DATAFORGE_DRIVER_LANES", "threads")
    assert not lanes_are_processes()
    monkeypatch.setenv("DATAFORGE_DRIVER_LANES", "fork")
    with pytest.raises(
        ValueError, match="DATAFORGE_DRIVER_LANES: 'fork' is not valid; valid: processes, threads"
    ):
        lanes_are_processes()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False
