"""One writer per output folder: an exclusive ``flock`` on ``OUT/.dataforge-lock``.

:func:`acquire_run_lock` returns a :class:`LocalRunLock` held for the whole run. The kernel
drops the lock when the holder dies, so a lock left by a killed run is taken over by the
next run, which says whose it was (the holder's host, pid and start time stay in the file
until a clean release). ``dataforge run`` (through :mod:`dataforge.rundir.ownership`, which
adds object-storage leases behind the same interface) and ``dataforge ablate`` use it.
"""

from __future__ import annotations

import datetime
import fcntl
import json
import os
import socket
import time
from pathlib import Path
from typing import Any, Protocol

__all__ = [
    "LOCK_FILE",
    "LocalRunLock",
    "RunDirError",
    "RunLock",
    "RunLockedError",
    "acquire_run_lock",
    "describe_holder",
]

LOCK_FILE = ".dataforge-lock"


class RunDirError(ValueError):
    """OUT holds something this run must not touch (another config or input set, a
    folder that is not a run, an input)."""


class RunLockedError(RunDirError):
    """Another live run holds OUT."""


class RunLock(Protocol):
    """An exclusive hold on one run directory, for the whole run.

    Attributes:
        holder: who holds it (``host``, ``pid``, ``started``).
        previous: the holder recorded by a run that died without releasing, else None.
    """

    holder: dict[str, Any]
    previous: dict[str, Any] | None

    def release(self) -> None: ...


def describe_holder(holder: dict[str, Any]) -> str:
    return (
        f"host {holder.get('host', '?')}, pid {holder.get('pid', '?')}, "
        f"started {holder.get('started', '?')}"
    )


class LocalRunLock:
    """``flock`` on ``OUT/.dataforge-lock`` (local disks; NFS v4 maps it to a lease)."""

    def __init__(self, fd: int, holder: dict[str, Any], previous: dict[str, Any] | None):
        self._fd: int | None = fd
        self.holder = holder
        self.previous = previous

    def release(self) -> None:
        """Clear the holder record, then unlock (idempotent)."""
        if self._fd is None:
            return
        os.ftruncate(self._fd, 0)
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> LocalRunLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


_HOLDER_WAIT_S = 2.0


def _settled_holder(fd: int) -> dict[str, Any] | None:
    """The record of the run that holds the lock. A run writes its record just after it
    takes the lock, so a run refused in that instant reads an empty record, or the one its
    predecessor left; it reads again for up to :data:`_HOLDER_WAIT_S` until the record
    names a live process (on another host: any record)."""
    deadline = time.monotonic() + _HOLDER_WAIT_S
    while True:
        holder = _read_holder(fd)
        if holder is not None and _names_live_process(holder):
            return holder
        if time.monotonic() >= deadline:
            return holder
        time.sleep(0.01)


def _names_live_process(holder: dict[str, Any]) -> bool:
    if holder.get("host") != socket.gethostname():
        return holder.get("pid") != "?"  # another host: cannot check; unreadable: retry
    try:
        os.kill(int(holder["pid"]), 0)
    except (KeyError, ValueError, TypeError, ProcessLookupError):
        return False
    except PermissionError:
        return True  # alive, another user's
    return True


def _read_holder(fd: int) -> dict[str, Any] | None:
    os.lseek(fd, 0, os.SEEK_SET)
    data = os.read(fd, 4096)
    if not data.strip():
        return None
    try:
        holder = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return {"host": "?", "pid": "?", "started": "? (unreadable lock record)"}
    return holder if isinstance(holder, dict) else None


def acquire_run_lock(out: Path) -> RunLock:
    """Take the exclusive lock on run directory ``out`` (which must exist).

    Raises:
        RunLockedError: another live run holds it; the message names its host, pid and
            start time.
    """
    fd = os.open(Path(out) / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _settled_holder(fd) or {}
        os.close(fd)
        raise RunLockedError(
            f"{out} is being written by another dataforge run ({describe_holder(holder)}); wait for "
            "it to finish or choose another -o"
        ) from None
    previous = _read_holder(fd)
    holder = {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    os.write(fd, json.dumps(holder).encode())
    os.fsync(fd)
    return LocalRunLock(fd, holder, previous)
