"""A function in a forked child of the driver (``ForkedCall``): its value, its error, its
death, and a kill."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time

import pytest

from dataforge.runtime.failures import RunFailed
from dataforge.runtime.lane_processes import ForkedCall


def _pid_and(value):
    return os.getpid(), value


def _fails():
    raise KeyError("missing in the child")


def _unpicklable():
    return lambda: None


def _dies():
    os.kill(os.getpid(), signal.SIGKILL)


def test_a_forked_call_returns_its_value_or_raises_its_error() -> None:
    pid, value = ForkedCall("plain", _pid_and, [1, 2]).result()
    assert pid != os.getpid() and value == [1, 2]
    with pytest.raises(KeyError, match="missing in the child"):
        ForkedCall("fails", _fails).result()
    with pytest.raises(RuntimeError, match="its value cannot be sent back"):
        ForkedCall("unpicklable", _unpicklable).result()
    with pytest.raises(RunFailed, match=r"^dies: process \d+ died \(killed by signal 9\)$"):
        ForkedCall("dies", _dies).result()
    assert not multiprocessing.active_children()


def test_kill_stops_a_child_at_once() -> None:
    call = ForkedCall("sleeper", time.sleep, 60)
    started = time.monotonic()
    call.kill()
    assert time.monotonic() - started < 5 and not call.process.is_alive()
    assert call.process.exitcode == -signal.SIGKILL
    call.kill()  # twice: nothing left to do
