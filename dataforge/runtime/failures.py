"""Failed tasks reported in one or two lines, with the full trace in ``OUT/logs/``.

A task that raises (a truncated input, a full disk) records ``_work/seg<k>/<task>.failed``
(the one-line message and the trace's path) before the exception leaves the worker. The
driver reads those records whatever the executor wrapped the exception in (Ray adds a
30-line remote trace and its own advice), so the user sees which file failed, after which
record, and why.
"""

from __future__ import annotations

import errno
import json
import re
import traceback
from pathlib import Path
from typing import Any

__all__ = [
    "RunFailed",
    "clear_task_failure",
    "collect_task_failures",
    "driver_failure_message",
    "one_line",
    "record_task_failure",
    "write_trace",
]


class RunFailed(RuntimeError):
    """A task or the driver failed; the message is what the user reads (1-2 lines)."""


def one_line(exc: BaseException, where: str | Path | None = None) -> str:
    """``exc`` as one line: a full disk names the path and says "no space left"."""
    if isinstance(exc, OSError) and (exc.errno == errno.ENOSPC or "No space left" in str(exc)):
        path = exc.filename or where or "?"
        return f"{path}: no space left on device"
    text = " ".join(str(exc).split()) or "(no message)"
    return f"{type(exc).__name__}: {text[:500]}"


def write_trace(logs: Path, name: str, exc: BaseException) -> Path | None:
    """Write ``exc``'s full trace to ``logs/<name>.log``; None if that fails too (a full
    disk), in which case the one-line message is all there is."""
    try:
        logs.mkdir(parents=True, exist_ok=True)
        path = logs / f"{name}.log"
        path.write_text("".join(traceback.format_exception(exc)), encoding="utf-8")
        return path
    except OSError:
        return None


def _marker(seg_dir: Path, task_id: str) -> Path:
    return seg_dir / f"{task_id}.failed"


def record_task_failure(
    seg_dir: Path, logs: Path, task: dict[str, Any], exc: BaseException, records_read: int
) -> str:
    """Record why ``task`` failed; returns the one-line message."""
    task_id = task["task_id"]
    what = task.get("input", {}).get("path") or task.get("previous") or task_id
    where = f"after record {records_read}" if records_read else "before its first record"
    message = f"task {task_id} ({what}, {where}): {one_line(exc, seg_dir)}"
    trace = write_trace(logs, f"{seg_dir.name}-{task_id}", exc)
    marker = _marker(seg_dir, task_id)
    try:
        marker.write_text(json.dumps({"message": message, "trace": str(trace) if trace else None}))
    except OSError:  # a full disk: the exception itself carries the message to the driver
        marker.unlink(missing_ok=True)  # ours: the marker this call began to write
    return message


def clear_task_failure(seg_dir: Path, task_id: str) -> None:
    """Forget a previous attempt's failure (the task runs again)."""
    _marker(seg_dir, task_id).unlink(missing_ok=True)  # ours: a failure marker in _work


def collect_task_failures(seg_dir: Path, task_ids: list[str]) -> list[dict[str, Any]]:
    """The failure records of these tasks, in task order."""
    found = []
    for task_id in task_ids:
        marker = _marker(seg_dir, task_id)
        if marker.exists():
            try:
                found.append(json.loads(marker.read_text()))
            except (OSError, ValueError):
                continue  # half-written on a full disk; the task's exception says it all
    return found


def driver_failure_message(out: Path, exc: BaseException) -> str:
    """The one or two lines for a run that failed outside a task record (its trace goes
    to ``OUT/logs/driver.log``)."""
    # A task's RunFailed arrives wrapped by Ray (RayTaskError, UserCodeException): its own
    # message is in the text; anything else is the driver's own failure.
    cause = getattr(exc, "cause", None)  # RayTaskError keeps the task's own exception
    found = re.search(r"RunFailed: (.+)", str(exc))
    if isinstance(cause, RunFailed):
        message = str(cause)
    else:
        message = found.group(1) if found else one_line(cause or exc, out)
    trace = write_trace(out / "logs", "driver", exc)
    return message + (f"\nfull trace: {trace}" if trace else "")
