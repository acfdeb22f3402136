"""Starting embedded Ray beside a running driver: when it pays (:func:`ray_pays_s`), the
background start thread and the process-level setup around it (SIGTERM handling), and
whether Ray is up without importing it.

Used by :mod:`dataforge.runtime.ray_runner`, which decides when a start begins.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from dataforge.config import PipelineConfig

if TYPE_CHECKING:
    from dataforge.runtime.ray_metrics import RayMetrics

__all__ = ["MetricsOnceUp", "RayStart", "exit_on_sigterm", "ray_initialized", "ray_pays_s"]

_RAY_START_COST_S = 2.76
"""What starting embedded Ray costs, in seconds of the driver's work it has to save: ~3 s
until the node is up plus ~2 s until an actor answers, during which the driver's own tasks
run ~1.3x slower. Calibrated on 2 cores with a one-thread driver: Ray
begun at the first task against never (``benchmarks/peers.py`` recipe, 3 rounds, fresh
processes) was slower by 0.5-0.9 s at 31 MB (~3.8 s of work left after the second task),
by 0.4-1.2 s at 47 MB (~5.6 s), a tie within 0.2 s at 63 MB (~7.7 s): break-even at ~7 s
left, of which Ray, running it 1.65x as fast, saves 7 x (1 - 1 / 1.65) = 2.76 s."""
_CORE_GAIN = 0.65
"""What each core adds to one on this work: two give 1.65x (``benchmarks/core_sharing.py``)."""
_THREADS_GAIN = 1.6
"""The driver lane's two threads against one (:mod:`dataforge.runtime.driver_lanes`) on
segment 0 of the ``benchmarks/peers.py`` recipe at 112 MB: 30.8 s in process against
18.9 s (1.63x) once JSON lines were read and written outside the GIL (1.36x before)."""


_PROCESSES_GAIN = 1.95
"""The driver lane's two forked processes against one thread
(:mod:`dataforge.runtime.lane_processes`), segment 0 of the ``benchmarks/peers.py`` recipe
at 112 MB, 3 interleaved rounds: 25.9 / 10.6, 25.4 / 13.0, 22.9 / 12.7 s (2.43x, 1.95x,
1.81x; the machine's pace moved between runs)."""


def ray_pays_s(num_cpus: int, threads: int, processes: bool = False) -> float:
    """Work left in a segment (seconds at the driver's measured pace) above which starting
    embedded Ray pays back: :data:`_RAY_START_COST_S` over the share of that time Ray
    saves, running the work on the driver and ``num_cpus - 1`` actors instead of the
    driver's ``threads`` lanes (forked ``processes`` or threads). With threads: 7 s for
    one on 2 CPUs, 91 s for two (measured at 112 MB, ~19 s of work left at the driver's
    pace: the two-thread driver alone 23.5-24.5 s, runs that started Ray 28-29 s), 6.0 s
    on 4 CPUs, 3.2 s on 16. With two forked lanes: never on 2 CPUs (they run the work
    faster than the driver and one actor would), 8.1 s on 4, 3.4 s on 16 (extrapolated,
    not measured here)."""
    with_ray = 1 + _CORE_GAIN * (num_cpus - 1)
    gain = (_PROCESSES_GAIN if processes else _THREADS_GAIN) if threads > 1 else 1.0
    saved = 1 - gain / with_ray
    return _RAY_START_COST_S / saved if saved > 0 else float("inf")


def ray_initialized() -> bool:
    """``ray.is_initialized()`` without importing Ray (not imported: not initialized)."""
    return "ray" in sys.modules and sys.modules["ray"].is_initialized()


class RayStart:
    """Starts Ray in a background thread (``start`` returns a description for the log)
    once :meth:`begin` is called; :meth:`ready` polls (False before ``begin``),
    :meth:`wait` blocks (beginning the start if needed), and both raise the start's error.

    The thread lives until :meth:`release`: Ray spawns its processes with
    ``PR_SET_PDEATHSIG``, which fires when the spawning *thread* ends, so a thread that
    returned after ``ray.init`` would take the node's GCS and raylet with it.
    """

    def __init__(self, start: Callable[[], str], begin: bool = True) -> None:
        self.where: str | None = None
        self.error: BaseException | None = None
        self._begin_lock = threading.Lock()  # begun by the driver or by its timer
        self._done = threading.Event()
        self._released = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(start,), name="dataforge-ray-start", daemon=True
        )
        if begin:
            self.begin()

    @property
    def begun(self) -> bool:
        return self._thread.ident is not None

    def begin(self) -> None:
        """Start Ray now (in the background); a second call does nothing."""
        with self._begin_lock:
            if not self.begun:
                self._thread.start()

    def _run(self, start: Callable[[], str]) -> None:
        try:
            self.where = start()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the driver's thread
            self.error = exc
        finally:
            self._done.set()
        self._released.wait()

    def ready(self) -> bool:
        if not self._done.is_set():
            return False
        if self.error is not None:
            raise self.error
        return True

    def wait(self) -> None:
        self.begin()
        self._done.wait()
        self.ready()

    def finished(self) -> None:
        """Wait for a begun start to end, whatever its outcome."""
        if self.begun:
            self._done.wait()

    def release(self) -> None:
        """End the thread, once the node it started is stopped."""
        self._released.set()
        if self.begun:
            self._thread.join()


class _NotMainThreadNotice(logging.Filter):
    """Drops Ray's warning that ``ray.init`` outside the main thread sets no SIGTERM
    handler: :func:`exit_on_sigterm` sets one first."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "SIGTERM handler is not set" not in record.getMessage()


def exit_on_sigterm() -> Callable[[], None]:
    """As ``ray.init`` does in the main thread: SIGTERM raises ``SystemExit`` (status
    128 + 15), so the run's ``finally`` blocks release the lock and stop Ray. Only where
    no handler is set; also quiets Ray's notice that a start outside the main thread sets
    none. Returns what puts the previous handler back (for callers that go on)."""
    ray_worker_log = logging.getLogger("ray._private.worker")
    if not any(isinstance(f, _NotMainThreadNotice) for f in ray_worker_log.filters):
        ray_worker_log.addFilter(_NotMainThreadNotice())
    main = threading.current_thread() is threading.main_thread()
    if not main or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return lambda: None
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    return lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL)


class MetricsOnceUp:
    """A progress listener that records into :class:`RayMetrics` once Ray is up; the
    events of tasks the driver committed before are kept and replayed then."""

    def __init__(self, config: PipelineConfig, starting: RayStart) -> None:
        self.config, self.starting = config, starting
        self.metrics: RayMetrics | None = None
        self.pending: list[tuple[str, tuple]] = []

    def _forward(self, method: str, args: tuple) -> None:
        self.pending.append((method, args))
        if self.metrics is None and self.starting.where is not None:
            from dataforge.runtime.ray_metrics import RayMetrics  # Ray is up: imported

            self.metrics = RayMetrics(self.config)
        if self.metrics is not None:
            for name, pending_args in self.pending:
                getattr(self.metrics, name)(*pending_args)
            self.pending = []

    def task_committed(self, segment: int, stats: dict[str, Any], input_bytes: int) -> None:
        self._forward("task_committed", (segment, stats, input_bytes))

    def phase_finished(self, name: str, seconds: float) -> None:
        self._forward("phase_finished", (name, seconds))
