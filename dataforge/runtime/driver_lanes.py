"""Threads of the driver that run a segment's tasks (the driver's lane of the Ray executor
where it may not fork: :mod:`dataforge.runtime.lane_processes` is the lane otherwise).

Much of a task's work runs outside the GIL: Arrow's compute kernels (clean's regex passes,
filters, takes), Parquet reading and writing, numpy's sorts. A second
thread in the driver puts the second core to that part without starting anything: on 2
cores, two threads run the ``benchmarks/peers.py`` recipe's first segment 1.63x as fast as
one at 112 MB (30.8 -> 18.9 s) since JSON lines are read in C++ outside the GIL (1.36x
before: 31 MB 4.35 -> 3.2 s, 94 MB 12.6 -> 9.2 s), more than embedded Ray's node and actor
net on such a machine. A third thread added nothing measurable then: the rest holds the
GIL (rjieba's segmentation among it: its per-token Python strings).

Each thread builds its own :class:`SegmentRunner` (its own ops; models are read-only and
process caches are safe to share) on its first task. Results go back to the calling
thread, which alone reports them (progress, commit). :meth:`DriverLanes.close` cancels: a
task in flight stops at its next batch (its staging directory removed, nothing committed)
and the threads are joined, so none writes into the work directory once the caller has
returned or raised.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from dataforge.runtime.segments import SegmentRunner

__all__ = ["DriverLanes", "LaneSlots"]


class LaneSlots:
    """What every kind of lane counts: ``threads`` lanes (threads or processes), the tasks
    submitted and not yet returned by ``results()`` (:attr:`busy`), and how many may run
    now (:attr:`limit`, which the caller lowers when other workers, e.g. Ray actors, take
    the cores). Submit only while :attr:`idle`."""

    def __init__(self, lanes: int, name: str) -> None:
        if lanes < 1:
            raise ValueError(f"{name}: {lanes} is not valid; valid: >= 1")
        self.threads = lanes
        self.busy = 0
        self.limit = lanes

    @property
    def idle(self) -> int:
        return max(0, self.limit - self.busy)

    def _take_slot(self) -> None:
        if self.idle <= 0:
            raise RuntimeError("submit: every lane is busy")
        self.busy += 1


class DriverLanes(LaneSlots):
    """``threads`` threads, each running one submitted task at a time with a runner made
    by ``make_runner``. Submit only while :attr:`idle`; collect with :meth:`results`."""

    def __init__(self, make_runner: Callable[[], SegmentRunner], threads: int) -> None:
        super().__init__(threads, "threads")
        self._make_runner = make_runner
        self._inbox: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._outbox: queue.Queue[tuple[dict[str, Any] | None, float, BaseException | None]]
        self._outbox = queue.Queue()
        self._cancel = threading.Event()
        self._workers: list[threading.Thread] = []

    def submit(self, task: dict[str, Any]) -> None:
        self._take_slot()
        if len(self._workers) < self.busy:  # every thread has a task: one more (lazily,
            # so a segment of one task builds one runner)
            worker = threading.Thread(
                target=self._work, name=f"dataforge-lane-{len(self._workers)}", daemon=True
            )
            worker.start()
            self._workers.append(worker)
        self._inbox.put(task)

    def results(self, timeout: float) -> list[tuple[dict[str, Any], float]]:
        """The tasks finished within ``timeout`` (waits for the first, then takes whatever
        else has finished), each with its wall seconds. A task's exception is raised here."""
        done: list[tuple[dict[str, Any], float]] = []
        block = True
        while self.busy:
            try:
                stats, seconds, error = self._outbox.get(block, timeout)
            except queue.Empty:
                break
            self.busy -= 1
            if error is not None:
                raise error
            done.append((stats, seconds))
            block = False
        return done

    def close(self) -> None:
        """Cancel the tasks in flight (each stops at its next batch) and join the threads."""
        self._cancel.set()
        for _ in self._workers:
            self._inbox.put(None)
        for worker in self._workers:
            worker.join()
        self._workers = []

    def _work(self) -> None:
        runner: SegmentRunner | None = None
        while (task := self._inbox.get()) is not None:
            started = time.perf_counter()
            try:
                if runner is None:
                    runner = self._make_runner()
                    runner.cancel = self._cancel
                stats = runner.run_task(task)
            except BaseException as exc:  # noqa: BLE001 - handed to the calling thread
                self._outbox.put((None, 0.0, exc))
                continue
            self._outbox.put((stats, time.perf_counter() - started, None))
