"""Forked processes of the driver that run a segment's tasks (the driver's lane, GIL-free).

Threads (:mod:`dataforge.runtime.driver_lanes`) share one GIL: what a task does in Python
(rjieba's token lists, the ops' per-batch code, MinHash rows) runs on one core at a time,
and two threads gave 1.6x one on 2 cores. A forked child has its own interpreter and
starts in milliseconds with everything the driver has imported and loaded (copy on
write): no import, no Ray worker, no object store. The driver builds the segment's
:class:`SegmentRunner` once, at the first task, and forks the children with it: each
runs its own copy (models loaded once and shared by the pages of the fork, as the
threads share them). A task's stats come back through a pipe and the driver alone
reports them; a task writes only its own staging directory, part and marker, so where it
runs changes nothing in the output.

Safety:

- :meth:`ProcessLanes.close` sets the shared cancel flag (a task in flight stops at its
  next batch, removing its staging directory, as in a thread) and waits for the children;
  one that does not stop within :data:`_STOP_S` is killed.
- A child dies with the driver (``PR_SET_PDEATHSIG``): a killed run leaves no process
  writing into its work directory, as with threads.
- A child that dies (OOM killer, a crash in native code) fails the run with its exit
  status and task, as a task's error does; nothing of that task was committed (the
  marker is written last) and the rerun resumes.
- Ctrl-C reaches the whole process group: the children ignore SIGINT and leave stopping to
  the driver's cancel; SIGTERM kills a child at once (its staging directory is what a
  killed run leaves; ``_work`` goes when the run completes).
- A child writes through new ``sys.stdout``/``sys.stderr`` objects and leaves with
  ``os._exit`` (no atexit handler, no flush of buffers it shares with the driver), so a
  lock a driver thread held at the fork is never waited for.

The executor forks only on Linux (fork, ``prctl``), before embedded Ray is begun (a forked
copy of Ray's connection threads is not safe) and while the process has made no client
of remote storage (an S3 client's connection pool must not be shared:
:func:`dataforge.io.fs.remote_in_use`); otherwise its lane is threads. The children
start with pyarrow's pandas probe already answered (:func:`dataforge.lazy.skip_pandas_probe`
in ``dataforge run``): each would otherwise import pandas, 0.3-0.45 s.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import multiprocessing
import multiprocessing.connection
import os
import pickle
import signal
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from dataforge.runtime.driver_lanes import LaneSlots
from dataforge.runtime.failures import RunFailed

if TYPE_CHECKING:
    from dataforge.runtime.segments import SegmentRunner

__all__ = ["ForkedCall", "ProcessLanes", "lanes_are_processes"]

_STOP_S = 60.0
"""How long :meth:`ProcessLanes.close` waits for a child to stop at its next batch."""
_PR_SET_PDEATHSIG = 1


def lanes_are_processes() -> bool:
    """Whether the driver's lane forks (Linux; ``DATAFORGE_DRIVER_LANES=threads`` keeps
    threads). The caller forks only while Ray is not begun in the process."""
    choice = os.environ.get("DATAFORGE_DRIVER_LANES") or "processes"  # empty: unset
    if choice not in ("processes", "threads"):
        raise ValueError(
            f"DATAFORGE_DRIVER_LANES: {choice!r} is not valid; valid: processes, threads"
        )
    return choice == "processes" and sys.platform.startswith("linux")


class _SharedFlag:
    """A flag set by the driver and read by its forked children (one shared byte), with
    :class:`threading.Event`'s ``set``/``is_set``: what :attr:`SegmentRunner.cancel` reads."""

    def __init__(self) -> None:
        self._byte = mmap.mmap(-1, 1)  # anonymous and shared: the children see its writes

    def set(self) -> None:
        self._byte[0] = 1

    def is_set(self) -> bool:
        return self._byte[0] == 1


class _Lane:
    def __init__(self, process: Any, conn: Any) -> None:
        self.process = process
        self.conn = conn
        self.task: dict[str, Any] | None = None


class ProcessLanes(LaneSlots):
    """``processes`` forked children, each running one submitted task at a time with a
    runner made by ``make_runner``; :class:`DriverLanes`' interface."""

    def __init__(self, make_runner: Callable[[], SegmentRunner], processes: int) -> None:
        super().__init__(processes, "processes")
        self._make_runner = make_runner
        self._context = multiprocessing.get_context("fork")
        self._cancel = _SharedFlag()
        self._lanes: list[_Lane] = []

    def submit(self, task: dict[str, Any]) -> None:
        self._take_slot()
        if not self._lanes:  # all at the first task: no fork once Ray may be starting
            try:
                runner = self._make_runner()  # here: its error is the caller's; models shared
            except BaseException:
                self.busy -= 1
                raise
            self._lanes = [self._start(i, runner) for i in range(self.threads)]
        lane = next(lane for lane in self._lanes if lane.task is None)
        lane.task = task
        lane.conn.send(task)

    def results(self, timeout: float) -> list[tuple[dict[str, Any], float]]:
        """The tasks finished within ``timeout`` (waits for the first, then takes whatever
        else has finished), each with its wall seconds. A task's exception is raised here."""
        busy = {lane.conn: lane for lane in self._lanes if lane.task is not None}
        done: list[tuple[dict[str, Any], float]] = []
        ready = multiprocessing.connection.wait(list(busy), timeout)
        for conn in ready:
            lane = busy[conn]
            try:
                stats, seconds, error = conn.recv()
            except (EOFError, OSError):
                error = self._died(lane)
            lane.task = None
            self.busy -= 1
            if error is not None:
                raise error
            done.append((stats, seconds))
        return done

    def close(self) -> None:
        """Cancel the tasks in flight (each stops at its next batch) and wait for the
        children to leave, reading and dropping the replies no one waits for any more (a
        child blocked on a full pipe would never leave); one still running after
        :data:`_STOP_S` is killed."""
        self._cancel.set()
        for lane in self._lanes:
            with contextlib.suppress(OSError):  # it has died already
                lane.conn.send(None)
        alive = {lane.process.sentinel: lane for lane in self._lanes}
        replies = {lane.conn: lane for lane in self._lanes}
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
        for lane in self._lanes:
            if lane.process.sentinel in alive:
                lane.process.kill()
            lane.process.join()
            lane.conn.close()
        self._lanes = []

    def _start(self, index: int, runner: SegmentRunner) -> _Lane:
        ours, theirs = self._context.Pipe()
        process = self._context.Process(
            target=_lane_main,
            args=(theirs, runner, self._cancel, os.getpid()),
            name=f"dataforge-lane-{index}",
            daemon=True,
        )
        process.start()
        theirs.close()
        return _Lane(process, ours)

    def _died(self, lane: _Lane) -> BaseException:
        lane.process.join(5.0)
        code = lane.process.exitcode
        how = f"killed by signal {-code}" if code is not None and code < 0 else f"exit {code}"
        task_id = lane.task["task_id"] if lane.task else "?"
        self._lanes.remove(lane)
        lane.conn.close()
        return RunFailed(
            f"task {task_id}: the driver's lane process {lane.process.pid} died ({how}); "
            "nothing of the task was committed"
        )


class ForkedCall:
    """``function(*args)`` in a forked child of this process (with the lanes' safety: it
    dies with the driver, ignores Ctrl-C, leaves with ``os._exit``); :meth:`result`
    returns its value or raises its exception. Its value comes back pickled, so it
    should be small. Fork only where the lanes may (:func:`lanes_are_processes`, Ray not
    begun, no client of remote storage)."""

    def __init__(self, name: str, function: Callable[..., Any], *args: Any) -> None:
        context = multiprocessing.get_context("fork")
        self._conn, theirs = context.Pipe(duplex=False)
        self.process = context.Process(
            target=_call_main, args=(theirs, function, args, os.getpid()), name=name, daemon=True
        )
        self.process.start()
        theirs.close()

    def result(self) -> Any:
        """Wait for the child's value (its exception is raised here; its death is a
        :class:`RunFailed`)."""
        try:
            value, error = self._conn.recv()
        except (EOFError, OSError):
            self.process.join(5.0)
            code = self.process.exitcode
            how = f"killed by signal {-code}" if code is not None and code < 0 else f"exit {code}"
            raise RunFailed(
                f"{self.process.name}: process {self.process.pid} died ({how})"
            ) from None
        finally:
            self._conn.close()
        self.process.join()
        if error is not None:
            raise error
        return value

    def kill(self) -> None:
        """Stop the child now (the caller gave up on its value)."""
        if self.process.is_alive():
            self.process.kill()
        self.process.join()
        self._conn.close()


def _call_main(conn: Any, function: Callable[..., Any], args: tuple, parent: int) -> None:
    code = 0
    try:
        if _child_setup(parent):
            try:
                reply = (function(*args), None)
            except BaseException as exc:  # noqa: BLE001 - handed to the driver
                reply = (None, _picklable(exc))
            try:
                conn.send(reply)
            except OSError:
                raise
            except Exception as exc:  # noqa: BLE001 - the value does not pickle (none sent)
                conn.send((None, RuntimeError(f"its value cannot be sent back ({exc})")))
    except BaseException:  # noqa: BLE001 - the driver's end of the pipe closed
        code = 1
    os._exit(code)


def _child_setup(parent: int) -> bool:
    """A forked child's signals (the driver cancels on Ctrl-C; it dies with the driver) and
    fresh standard streams; False when the driver died before ``prctl``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    with contextlib.suppress(OSError, AttributeError):  # no prctl: the pipe's end
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        return False
    _fresh_std_streams()
    return True


def _lane_main(conn: Any, runner: SegmentRunner, cancel: _SharedFlag, parent: int) -> None:
    """A child: set up its signals and run :func:`_serve`; leaves with ``os._exit`` (1 on an
    error of its own, which the driver reports as the lane's death)."""
    code = 0
    try:
        if _child_setup(parent):
            runner.cancel = cancel
            _serve(conn, runner)
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
            stream = open(  # noqa: SIM115 - lives as long as the child
                fd, "w", buffering=1, encoding=encoding, errors="backslashreplace", closefd=False
            )
        except OSError:  # the descriptor is closed: keep what there is
            continue
        setattr(sys, name, stream)


def _serve(conn: Any, runner: SegmentRunner) -> None:
    """Run each task sent until ``None`` or the driver's end of the pipe closes."""
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):
            return
        if task is None:
            return
        started = time.perf_counter()
        try:
            reply = (runner.run_task(task), time.perf_counter() - started, None)
        except BaseException as exc:  # noqa: BLE001 - handed to the driver
            reply = (None, 0.0, _picklable(exc))
        try:
            conn.send(reply)
        except OSError:
            return
        except Exception as exc:  # noqa: BLE001 - the stats do not pickle (nothing was sent)
            error = RuntimeError(
                f"task {task.get('task_id')}: its stats cannot be sent to the driver "
                f"({type(exc).__name__}: {exc})"
            )
            conn.send((None, 0.0, error))


def _picklable(exc: BaseException) -> BaseException:
    """``exc`` if it survives the pipe, else a RuntimeError with its type and message."""
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:  # noqa: BLE001 - any pickling failure
        return RuntimeError(f"{type(exc).__name__}: {exc}")
    return exc
