"""The local executor's worker processes: tasks run in other processes with the output of
the in-process run; a task's error, a worker's death or the end of the run stops them all."""

from __future__ import annotations

import dataclasses
import os
import signal
import time
from pathlib import Path

import pytest

from dataforge.config import load_pipeline
from dataforge.io import fs
from dataforge.io.mds import iter_samples
from dataforge.ops.dedup import Dedup
from dataforge.runtime.executors.local import LocalExecutor
from dataforge.runtime.failures import RunFailed
from dataforge.runtime.local_pool import WorkerPool
from dataforge.runtime.pipeline import run_pipeline
from dataforge.runtime.segments import SegmentRunner, TaskCancelled, build_segments

STAGES = """
stages:
  - {op: clean}
  - {op: quality_filter}
  - {op: dedup, method: exact}
"""


@pytest.fixture(autouse=True)
def _no_remote_client(monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers are forked only while the driver holds no remote-storage client; earlier tests
    in the same process may have made one (the test that needs one makes its own)."""
    monkeypatch.setattr(fs, "_REMOTE_USED", set())


def _config(pipeline_file: Path):
    pipeline_file.write_text(pipeline_file.read_text() + STAGES, encoding="utf-8")
    return load_pipeline(pipeline_file)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_workers_run_every_task_with_the_in_process_output(
    pipeline_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = _config(pipeline_file)
    marks = tmp_path / "marks"
    marks.mkdir()
    run_task = SegmentRunner.run_task

    def recorded(self, task):  # forked with the workers: one file per task, its pid
        time.sleep(0.05)  # long enough that the second worker takes the next task
        (marks / f"{self.segment.index}-{task['task_id']}").write_text(str(os.getpid()))
        return run_task(self, task)

    monkeypatch.setattr(SegmentRunner, "run_task", recorded)
    plan = Dedup.plan

    def planned(op, ctx):  # forked too: the barrier's planner records its pid
        (tmp_path / "planner").write_text(str(os.getpid()))
        return plan(op, ctx)

    monkeypatch.setattr(Dedup, "plan", planned)
    executor = LocalExecutor(workers=2)
    try:
        manifest = run_pipeline(config, tmp_path / "out", executor, log=lambda m: None)
    finally:
        executor.close()
    pids = {int(p.read_text()) for p in marks.iterdir()}
    tasks = len(manifest["inputs"])
    assert len(list(marks.iterdir())) == 2 * tasks  # both segments, every task
    assert len(pids) == 2 and os.getpid() not in pids
    assert int((tmp_path / "planner").read_text()) in pids  # a worker planned, not the driver
    assert not [p for p in pids if _alive(p)]  # close() ended them
    assert manifest["runtime"] == {
        "executor": "local", "num_cpus": 2, "nodes": 1, "tasks_on_driver": 0,
        "tasks_by_node": {os.uname().nodename: 2 * tasks},
        "barrier_work_by_node": {os.uname().nodename: 1 + 2},  # the planner, 2 index shards
    }  # fmt: skip
    monkeypatch.setattr(SegmentRunner, "run_task", run_task)
    reference = run_pipeline(config, tmp_path / "ref", LocalExecutor(), log=lambda m: None)
    assert reference["runtime"]["tasks_on_driver"] == 2 * tasks  # in process: the driver
    assert list(iter_samples(tmp_path / "out")) == list(iter_samples(tmp_path / "ref"))


def _pool_of_two(pipeline_file: Path, tmp_path: Path, monkeypatch, behave) -> tuple:
    """A pool of two workers whose ``run_task`` is ``behave(runner, task, marks)``."""
    config = _config(pipeline_file)
    marks = tmp_path / "marks"
    marks.mkdir()
    monkeypatch.setattr(SegmentRunner, "run_task", lambda self, task: behave(self, task, marks))
    segment = build_segments(config)[0]
    return WorkerPool(config, str(tmp_path / "work"), 2), segment, marks


def _waits_or_dies(runner, task, marks: Path):
    name = task["task_id"]
    if name == "wait":
        (marks / "waiting").write_text(str(os.getpid()))
        deadline = time.monotonic() + 30
        while not runner.cancel.is_set() and time.monotonic() < deadline:
            time.sleep(0.01)
        (marks / "cancelled").write_text(str(runner.cancel.is_set()))
        raise TaskCancelled(name)
    while not (marks / "waiting").exists():  # the other worker is in "wait" first
        time.sleep(0.01)
    if name == "die":
        os.kill(os.getpid(), signal.SIGKILL)
    raise ValueError(f"bad record in {name}.jsonl line 3")


@pytest.mark.parametrize("second", ["fail", "die"])
def test_an_error_or_a_dead_worker_cancels_the_task_in_flight(
    pipeline_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, second: str
) -> None:
    pool, segment, marks = _pool_of_two(pipeline_file, tmp_path, monkeypatch, _waits_or_dies)
    expected = {
        "fail": r"bad record in fail\.jsonl line 3",
        "die": r"task die: local worker process \d+ died \(killed by signal 9\); nothing of "
        r"the task was committed",
    }[second]
    with pytest.raises((RunFailed, ValueError), match=expected):
        pool.run_segment(segment, [{"task_id": "wait"}, {"task_id": second}], lambda s, p: None)
    # run_segment closed the pool: "wait" saw the cancel, stopped, and its worker left
    assert (marks / "cancelled").read_text() == "True"
    assert not _alive(int((marks / "waiting").read_text()))
    with pytest.raises(RuntimeError, match="the worker pool is closed"):
        pool.run_segment(segment, [{"task_id": "after"}], lambda s, p: None)


def test_results_come_back_with_the_worker_that_ran_them(
    pipeline_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def stats(runner, task, marks):
        return {"task_id": task["task_id"], "big": "x" * 200_000}  # more than a pipe holds

    pool, segment, _ = _pool_of_two(pipeline_file, tmp_path, monkeypatch, stats)
    done: list[tuple[str, int]] = []
    try:
        tasks = [{"task_id": f"t{i}"} for i in range(6)]
        pool.run_segment(segment, tasks, lambda s, pid: done.append((s["task_id"], pid)))
    finally:
        pool.close()
    assert sorted(t for t, _ in done) == [f"t{i}" for i in range(6)]
    assert os.getpid() not in {pid for _, pid in done}


def test_a_worker_pool_needs_a_worker(pipeline_file: Path, tmp_path: Path) -> None:
    config = dataclasses.replace(_config(pipeline_file))
    with pytest.raises(ValueError, match="workers: 0 is not valid; valid: >= 1"):
        WorkerPool(config, str(tmp_path), 0)


def test_with_a_remote_storage_client_the_workers_are_spawned_fresh(
    pipeline_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A driver holding an S3 client does not fork it: its workers start as new
    interpreters, with the same output."""
    from dataforge.io import fs
    from dataforge.runtime import local_pool

    config = _config(pipeline_file)
    monkeypatch.setattr(fs, "remote_in_use", lambda: True)
    methods: list[str] = []
    get_context = local_pool.multiprocessing.get_context
    monkeypatch.setattr(
        local_pool.multiprocessing, "get_context", lambda m: methods.append(m) or get_context(m)
    )
    executor = LocalExecutor(workers=2)
    try:
        run_pipeline(config, tmp_path / "out", executor, log=lambda m: None)
    finally:
        executor.close()
    assert methods == ["spawn"]
    run_pipeline(config, tmp_path / "ref", LocalExecutor(), log=lambda m: None)
    assert list(iter_samples(tmp_path / "out")) == list(iter_samples(tmp_path / "ref"))
