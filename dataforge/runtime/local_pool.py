"""The local executor's workers: ``num_cpus`` processes forked from the driver, one pool per
run, each running one task at a time (what a Ray actor is to the Ray executor).

A worker builds a segment's :class:`SegmentRunner` (its ops: jieba, KenLM, tokenizer) on
its first task of that segment and keeps it for the segment's other tasks; a task's stats
come back through a pipe and the driver alone reports and commits. A task writes only its
own staging directory, part and marker, so the worker it ran on changes nothing in the
output.

Safety:

- :meth:`WorkerPool.close` sets the shared cancel event (a task in flight stops at its
  next batch and removes its staging directory) and waits for the workers; one that does
  not stop within :data:`_STOP_S` is killed.
- A worker dies with the driver (``PR_SET_PDEATHSIG``): a killed run leaves no process
  writing into its work directory.
- A worker that dies (OOM killer, a crash in native code) fails the run with its exit
  status and task; nothing of that task was committed (the marker is written last) and
  the rerun resumes.
- Ctrl-C reaches the whole process group: workers ignore SIGINT and leave stopping to the
  driver's cancel.
- A worker writes through new ``sys.stdout``/``sys.stderr`` objects and leaves with
  ``os._exit``, so a lock a driver thread held at the fork is never waited for.

Workers are forked (they start in milliseconds with what the driver has imported) unless
the driver holds a client of remote storage, whose connection pool a fork must not share
(:func:`dataforge.io.fs.remote_in_use`): then they are spawned fresh.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import multiprocessing.connection
import os
import pickle
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from dataforge.config import PipelineConfig
from dataforge.io import fs
from dataforge.runtime.failures import RunFailed
from dataforge.runtime.segments import Segment, SegmentRunner

__all__ = ["WorkerPool", "exit_on_sigterm"]

_STOP_S = 60.0
"""How long :meth:`WorkerPool.close` waits for a worker to stop at its next batch."""
_PR_SET_PDEATHSIG = 1


class _Worker:
    def __init__(self, process: Any, conn: Any) -> None:
        self.process = process
        self.conn = conn
        self.task: dict[str, Any] | None = None


class WorkerPool:
    """``workers`` processes that run tasks of any segment of one run; :meth:`close` stops
    them."""

    def __init__(self, config: PipelineConfig, work_dir: str, workers: int) -> None:
        if workers < 1:
            raise ValueError(f"workers: {workers} is not valid; valid: >= 1")
        method = "spawn" if fs.remote_in_use() else "fork"
        self._context = multiprocessing.get_context(method)
        self._cancel = self._context.Event()
        self._workers = [self._start(i, config, work_dir) for i in range(workers)]

    def run_segment(
        self,
        segment: Segment,
        tasks: list[dict[str, Any]],
        on_task: Callable[[dict[str, Any], int], None],
    ) -> None:
        """Run ``tasks``, one per idle worker at a time; ``on_task(stats, worker_pid)`` as
        each one commits. A task's exception is raised here (and the pool stopped)."""
        if not self._workers:
            raise RuntimeError("the worker pool is closed")
        queue = deque(tasks)
        try:
            while queue or any(w.task is not None for w in self._workers):
                for worker in self._workers:
                    if worker.task is None and queue:
                        worker.task = queue.popleft()
                        worker.conn.send(("task", segment, worker.task))
                busy = {w.conn: w for w in self._workers if w.task is not None}
                for conn in multiprocessing.connection.wait(list(busy)):
                    stats, pid = self._reply(busy[conn])
                    on_task(stats, pid)
        except BaseException:
            self.close()  # no task still in flight writes after the failure is reported
            raise

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` on the first worker (a barrier's planning, between segments, when
        all are idle); its result, or its exception raised here."""
        if not self._workers:
            raise RuntimeError("the worker pool is closed")
        worker = self._workers[0]
        worker.task = {"task_id": getattr(fn, "__name__", "call")}
        try:
            worker.conn.send(("call", fn, args))
            return self._reply(worker)[0]
        except BaseException:
            self.close()
            raise

    def _reply(self, worker: _Worker) -> tuple[dict[str, Any], int]:
        try:
            stats, pid, error = worker.conn.recv()
        except (EOFError, OSError):
            error, pid = self._died(worker), 0
        worker.task = None
        if error is not None:
            raise error
        return stats, pid

    def close(self) -> None:
        """Cancel the tasks in flight (each stops at its next batch) and wait for the
        workers to leave, reading and dropping the replies no one waits for any more (a
        worker blocked on a full pipe would never leave); one still running after
        :data:`_STOP_S` is killed."""
        if not self._workers:
            return
        self._cancel.set()
        for worker in self._workers:
            with contextlib.suppress(OSError):  # it has died already
                worker.conn.send(None)
        alive = {w.process.sentinel: w for w in self._workers}
        replies = {w.conn: w for w in self._workers}
        deadline = time.monotonic() + _STOP_S
        while alive and (left := deadline - time.monotonic()) > 0:
            for ready in multiprocessing.connection.wait([*alive, *replies], left):
                if ready in alive:
                    del alive[ready]
                    continue
                try:
                    ready.recv()
                except (EOFError, OSError):
                    del replies[ready]
        for worker in self._workers:
            if worker.process.sentinel in alive:
                worker.process.kill()
            worker.process.join()
            worker.conn.close()
        self._workers = []

    def _start(self, index: int, config: PipelineConfig, work_dir: str) -> _Worker:
        ours, theirs = self._context.Pipe()
        process = self._context.Process(
            target=_worker_main,
            args=(theirs, config, work_dir, self._cancel, os.getpid()),
            name=f"dataforge-worker-{index}",
            daemon=True,
        )
        process.start()
        theirs.close()
        return _Worker(process, ours)

    def _died(self, worker: _Worker) -> BaseException:
        worker.process.join(5.0)
        code = worker.process.exitcode
        how = f"killed by signal {-code}" if code is not None and code < 0 else f"exit {code}"
        task_id = worker.task["task_id"] if worker.task else "?"
        self._workers.remove(worker)
        worker.conn.close()
        return RunFailed(
            f"task {task_id}: local worker process {worker.process.pid} died ({how}); "
            "nothing of the task was committed"
        )


def exit_on_sigterm() -> Callable[[], None]:
    """SIGTERM raises ``SystemExit`` (status 128 + 15), so the run's ``finally`` blocks
    stop the workers (or Ray) and release the lock. Main thread only; returns what puts the
    handler found here back."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    return lambda: signal.signal(signal.SIGTERM, previous)


def _child_setup(parent: int) -> bool:
    """A worker's signals (the driver cancels on Ctrl-C; it dies with the driver) and fresh
    standard streams; False when the driver died before ``prctl``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    with contextlib.suppress(OSError, AttributeError):  # no prctl: the pipe's end
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        return False
    _fresh_std_streams()
    return True


def _worker_main(
    conn: Any, config: PipelineConfig, work_dir: str, cancel: Any, parent: int
) -> None:
    """A worker: set up its signals and run :func:`_serve`; leaves with ``os._exit`` (1 on
    an error of its own, which the driver reports as the worker's death)."""
    code = 0
    try:
        if _child_setup(parent):
            _serve(conn, config, work_dir, cancel)
    except BaseException:  # noqa: BLE001 - a torn message from the driver, anything else
        code = 1
    os._exit(code)


def _fresh_std_streams() -> None:
    """New ``sys.stdout``/``sys.stderr`` objects on the same descriptors: a driver thread
    (the progress display) writing at the moment of the fork leaves the old objects' buffer
    lock held forever in the child, and a warning printed by a task would wait on it."""
    for name, fd in (("stdout", 1), ("stderr", 2)):
        old = getattr(sys, name)
        encoding = getattr(old, "encoding", None) or "utf-8"
        try:
            stream = open(  # noqa: SIM115 - lives as long as the worker
                fd, "w", buffering=1, encoding=encoding, errors="backslashreplace", closefd=False
            )
        except OSError:  # the descriptor is closed: keep what there is
            continue
        setattr(sys, name, stream)


def _serve(conn: Any, config: PipelineConfig, work_dir: str, cancel: Any) -> None:
    """Run each ``("task", segment, task)`` or ``("call", fn, args)`` sent until ``None``
    or the driver's end closes."""
    runner: SegmentRunner | None = None
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        kind, what, task = message  # a call: what = fn, task = its args
        try:
            if kind == "call":
                runner = None  # calls run between segments: free the last one's ops first
                reply = (what(*task), os.getpid(), None)
            else:
                segment = what
                if runner is None or runner.segment.index != segment.index:
                    runner = None  # free the previous segment's ops before loading the next
                    runner = SegmentRunner(config, segment, work_dir)
                    runner.cancel = cancel
                reply = (runner.run_task(task), os.getpid(), None)
        except BaseException as exc:  # noqa: BLE001 - handed to the driver
            reply = (None, os.getpid(), _picklable(exc))
        try:
            conn.send(reply)
        except OSError:
            return
        except Exception as exc:  # noqa: BLE001 - the stats do not pickle (nothing was sent)
            name = task.get("task_id") if kind == "task" else getattr(what, "__name__", kind)
            error = RuntimeError(
                f"task {name}: its stats cannot be sent to the driver ({type(exc).__name__}: {exc})"
            )
            conn.send((None, os.getpid(), error))


def _picklable(exc: BaseException) -> BaseException:
    """``exc`` if it survives the pipe, else a RuntimeError with its type and message."""
    try:
        pickle.loads(pickle.dumps(exc))  # safe: our own exception object, made in this process
    except Exception:  # noqa: BLE001 - any pickling failure
        return RuntimeError(f"{type(exc).__name__}: {exc}")
    return exc
