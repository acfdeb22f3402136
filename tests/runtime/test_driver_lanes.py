"""The driver's lane threads: two threads run a segment's tasks with the output of one;
a failure or an interrupt cancels the task still in flight, which commits nothing."""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path

import pytest

from dataforge.config import load_pipeline
from dataforge.io.mds import iter_samples
from dataforge.runtime.driver_lanes import DriverLanes
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


def test_two_driver_threads_run_the_tasks_with_the_output_of_one(
    pipeline_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = _config(pipeline_file)
    run_pipeline(config, tmp_path / "local", LocalExecutor(), log=lambda m: None)
    threads: list[str] = []
    run_task = SegmentRunner.run_task

    def recorded(self, task):
        threads.append(threading.current_thread().name)
        time.sleep(0.05)  # long enough that the second thread takes the next task
        return run_task(self, task)

    monkeypatch.setattr(SegmentRunner, "run_task", recorded)
    start = RayStart(lambda: "never used", begin=False)
    try:
        executor = RayExecutor(config, starting=start)
        manifest = run_pipeline(config, tmp_path / "lanes", executor, log=lambda m: None)
    finally:
        start.release()
    assert not start.begun and executor.actors == []
    assert executor.driver_threads == 2
    assert executor.driver_tasks == len(threads) == 2 * len(manifest["inputs"])
    assert set(threads) == {"dataforge-lane-0", "dataforge-lane-1"}
    assert list(iter_samples(tmp_path / "lanes")) == list(iter_samples(tmp_path / "local"))


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
