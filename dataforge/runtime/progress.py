"""Live progress of a run and its closing summary.

The driver feeds :class:`RunProgress` a few events (a segment starts, a task committed with
its stats, a barrier starts or ends, the run finished with its manifest); nothing here
touches the work itself. Per segment and barrier it shows tasks, records and input MB done,
records/s, MB/s, elapsed time, an ETA from the input bytes still to go, and records kept
and dropped so far.

Where it goes: in a terminal a live table (``rich``), redrawn twice a second; without
one (CI, ``ray job logs``, a pipe) a plain line per segment and barrier start and end, and a
status line every ``interval`` seconds while one runs. ``verbose`` adds a line per task.
Listeners (e.g. :class:`dataforge.runtime.ray_metrics.RayMetrics`) receive the same events.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
import time
from typing import Any, Protocol, TextIO

from dataforge.runtime.summary import render_summary

__all__ = ["PROGRESS_MODES", "Phase", "ProgressListener", "RunProgress"]

PROGRESS_MODES = ("auto", "live", "plain", "off")


class ProgressListener(Protocol):
    def task_committed(self, segment: int, stats: dict[str, Any], input_bytes: int) -> None: ...

    def phase_finished(self, name: str, seconds: float) -> None: ...


@dataclasses.dataclass
class Phase:
    """One segment or barrier as it runs."""

    name: str
    started: float
    tasks_total: int = 0
    bytes_total: int = 0
    tasks_done: int = 0
    bytes_done: int = 0
    records: int = 0
    kept: int = 0
    dropped: int = 0
    finished: float | None = None

    def elapsed(self, now: float) -> float:
        return (self.finished or now) - self.started

    def eta(self, now: float) -> float | None:
        """Seconds left, from the input bytes (or tasks) done so far; None before any."""
        if self.finished is not None:
            return 0.0
        done, total = (
            (self.bytes_done, self.bytes_total)
            if self.bytes_total
            else (self.tasks_done, self.tasks_total)
        )
        if not done or not total:
            return None
        return self.elapsed(now) * (total - done) / done

    def status(self, now: float) -> str:
        """The phase on one plain line."""
        elapsed = self.elapsed(now)
        if not self.tasks_total:
            return f"{self.name}: {'in' if self.finished else 'running'} {_duration(elapsed)}"
        rate = self.records / elapsed if elapsed > 0 else 0.0
        mb_rate = self.bytes_done / 1e6 / elapsed if elapsed > 0 else 0.0
        eta = self.eta(now)
        return (
            f"{self.name}: {self.tasks_done}/{self.tasks_total} tasks, "
            f"{self.records:,} records, {self.bytes_done / 1e6:.1f}/{self.bytes_total / 1e6:.1f} MB"
            f" | {rate:,.0f} rec/s {mb_rate:.2f} MB/s | kept {self.kept:,} dropped "
            f"{self.dropped:,} | elapsed {_duration(elapsed)} ETA "
            f"{'-' if eta is None else _duration(eta)}"
        )


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def _task_counts(stats: dict[str, Any]) -> tuple[int, int, int]:
    """Records a task handled, kept (live, repeats included) and dropped."""
    kept = sum(c["docs"] for c in stats["by_source"].values())
    dropped = sum(sum(c["dropped"].values()) for c in stats["by_source"].values())
    return kept + dropped, kept, dropped


class RunProgress:
    """Progress of one run; see the module docstring.

    Args:
        stream: where to write (standard error by default).
        mode: ``auto`` (live in a terminal, else plain), ``live``, ``plain`` or ``off``.
        interval: seconds between plain status lines (``DATAFORGE_PROGRESS_INTERVAL``).
        verbose: also a line per committed task.
        listeners: receive every committed task and finished phase.
    """

    def __init__(
        self,
        stream: TextIO | None = None,
        mode: str = "auto",
        interval: float | None = None,
        verbose: bool = False,
        listeners: tuple[ProgressListener, ...] = (),
    ) -> None:
        if mode not in PROGRESS_MODES:
            raise ValueError(f"progress mode {mode!r}; valid: {PROGRESS_MODES}")
        self.stream = stream or sys.stderr
        if mode == "auto":
            mode = "live" if self.stream.isatty() else "plain"
        self.mode = mode
        env_interval = os.environ.get("DATAFORGE_PROGRESS_INTERVAL")
        self.interval = interval or (float(env_interval) if env_interval else 10.0)
        self.verbose = verbose
        self.listeners = listeners
        self.phases: list[Phase] = []
        self.task_bytes: dict[str, int] = {}
        self.segment = -1
        self.cost_seconds = 0.0
        """CPU seconds spent in this object's code (events, and every redraw on rich's
        thread), for the overhead benchmark."""
        self._last_line = time.monotonic()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        self._live = None

    @classmethod
    def silent(cls) -> RunProgress:
        return cls(mode="off")

    # -- events from the driver ---------------------------------------------------------
    def start(self, task_bytes: dict[str, int]) -> None:
        """The run's planned tasks (id -> input bytes); starts the display."""
        self.task_bytes = dict(task_bytes)
        if self.mode == "live":
            self._start_live()
        elif self.mode == "plain":
            self._ticker = threading.Thread(target=self._tick, name="progress", daemon=True)
            self._ticker.start()

    def segment_started(self, index: int, ops: list[str], pending: list[str]) -> None:
        started = time.thread_time()
        self.segment = index
        name = f"segment {index} [{', '.join(ops) or 'apply'}]"
        phase = Phase(name, time.monotonic(), tasks_total=len(pending))
        phase.bytes_total = sum(self.task_bytes.get(t, 0) for t in pending)
        self._begin(phase)
        self.cost_seconds += time.thread_time() - started

    def task_committed(self, stats: dict[str, Any]) -> None:
        started = time.thread_time()
        phase = self.phases[-1]
        nbytes = self.task_bytes.get(stats["task_id"], 0)
        records, kept, dropped = _task_counts(stats)
        phase.tasks_done += 1
        phase.bytes_done += nbytes
        phase.records += records
        phase.kept += kept
        phase.dropped += dropped
        for listener in self.listeners:
            listener.task_committed(self.segment, stats, nbytes)
        if self.verbose:
            self._line(
                f"{phase.name}: task {stats['task_id']} committed ({kept} kept, {dropped} dropped)"
                f" [{phase.tasks_done}/{phase.tasks_total}]"
            )
        elif self.mode == "plain" and time.monotonic() - self._last_line >= self.interval:
            self._line(phase.status(time.monotonic()))
        self.cost_seconds += time.thread_time() - started

    def segment_finished(self) -> None:
        self._end()

    def barrier_started(self, stage_index: int, op: str) -> None:
        self._begin(Phase(f"barrier {stage_index} [{op}]", time.monotonic()))

    def barrier_finished(self) -> None:
        self._end()

    def finish(self, manifest: dict[str, Any]) -> None:
        """Stop the display and print the closing summary."""
        self.close()
        if self.mode != "off":
            render_summary(manifest, self.stream, rich_output=self.mode == "live")

    def close(self) -> None:
        """Stop the display (idempotent; also on failure)."""
        self._stop.set()
        if self._live is not None:
            self._live.stop()
            self._live = None
        if self._ticker is not None:
            self._ticker.join()
            self._ticker = None

    # -- display ------------------------------------------------------------------------
    def _begin(self, phase: Phase) -> None:
        self.phases.append(phase)
        if self.mode == "plain" or self.verbose:
            self._line(f"{phase.name}: started" + (
                f" ({phase.tasks_total} tasks, {phase.bytes_total / 1e6:.1f} MB)"
                if phase.tasks_total else ""))  # fmt: skip

    def _end(self) -> None:
        phase = self.phases[-1]
        phase.finished = time.monotonic()
        for listener in self.listeners:
            listener.phase_finished(phase.name, phase.finished - phase.started)
        if self.mode == "plain" or self.verbose:
            self._line(phase.status(phase.finished).replace(": ", ": done, ", 1))

    def _line(self, text: str) -> None:
        self._last_line = time.monotonic()
        if self._live is not None:
            self._live.console.print(f"[dataforge] {text}", markup=False, highlight=False)
        elif self.mode != "off":
            print(f"[dataforge] {text}", file=self.stream, flush=True)

    def _tick(self) -> None:
        while not self._stop.wait(1.0):
            if self.phases and time.monotonic() - self._last_line >= self.interval:
                started = time.thread_time()
                self._line(self.phases[-1].status(time.monotonic()))
                self.cost_seconds += time.thread_time() - started

    def _start_live(self) -> None:
        from rich.console import Console
        from rich.live import Live

        console = Console(file=self.stream, stderr=self.stream is sys.stderr)
        self._live = Live(
            get_renderable=self._table, console=console, refresh_per_second=2, transient=False
        )
        redraw = self._live.refresh

        def timed_refresh() -> None:  # the redraws run on rich's thread: count them too
            started = time.thread_time()
            redraw()
            self.cost_seconds += time.thread_time() - started

        self._live.refresh = timed_refresh
        self._live.start()

    def _table(self):
        from rich.table import Table
        from rich.text import Text

        now = time.monotonic()
        table = Table(box=None, pad_edge=False, header_style="bold")
        for col in ("phase", "tasks", "records", "MB", "rec/s", "MB/s", "kept", "dropped"):
            table.add_column(col, justify="left" if col == "phase" else "right", no_wrap=True)
        table.add_column("elapsed", justify="right")
        table.add_column("ETA", justify="right")
        for phase in self.phases:
            elapsed = phase.elapsed(now)
            eta = phase.eta(now)
            rate = phase.records / elapsed if elapsed > 0 else 0.0
            mb_rate = phase.bytes_done / 1e6 / elapsed if elapsed > 0 else 0.0
            cells = [
                f"{phase.tasks_done}/{phase.tasks_total}",
                f"{phase.records:,}",
                f"{phase.bytes_done / 1e6:.1f}/{phase.bytes_total / 1e6:.1f}",
                f"{rate:,.0f}",
                f"{mb_rate:.2f}",
                f"{phase.kept:,}",
                f"{phase.dropped:,}",
            ]
            if not phase.tasks_total:  # a barrier: only its time
                cells = [""] * len(cells)
            mark = "✓ " if phase.finished else "▶ "
            eta_text = "-" if eta is None else _duration(eta)
            # Text(): phase names hold [ ], which rich would read as markup
            table.add_row(Text(mark + phase.name), *cells, _duration(elapsed), eta_text)
        return table
