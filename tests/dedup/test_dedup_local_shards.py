"""Index shards in the driver on threads of their own: each shard's calls run in the order
they were made, shards side by side; a shard's error reaches the planner; close joins."""

from __future__ import annotations

import threading
import time

import pytest

from dataforge.runtime.shards import LocalShards


class _Shard:
    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

    def add(self, n: int) -> None:
        time.sleep(0.001 * (n % 3))  # calls of unequal length
        if n < 0:
            raise ValueError(f"bad batch {n}")
        self.calls.append((threading.current_thread().name, n))

    def sent(self) -> list[int]:
        return [len(self.calls)] * 2

    def receive(self, *counts: int) -> int:
        return sum(counts)


def test_each_shard_runs_its_calls_in_order_on_its_own_thread() -> None:
    backend = LocalShards(2, _Shard, threaded=True)
    shards = backend.shards
    pending = [backend.call_one(n % 2, "add", n) for n in range(40)]
    backend.wait(pending)
    for i, shard in enumerate(shards):
        assert [n for _, n in shard.calls] == list(range(i, 40, 2))
        assert {name for name, _ in shard.calls} == {f"dataforge-shard-{i}_0"}
    assert backend.exchange("sent", "receive") == [40, 40]  # 20 calls on each, from both
    backend.close()
    assert not [t for t in threading.enumerate() if t.name.startswith("dataforge-shard")]


def test_a_shard_error_reaches_the_caller_and_close_joins() -> None:
    backend = LocalShards(2, _Shard, threaded=True)
    pending = [backend.call_one(0, "add", 1), backend.call_one(1, "add", -5)]
    with pytest.raises(ValueError, match="bad batch -5"):
        backend.wait(pending)
    backend.close()
    assert not [t for t in threading.enumerate() if t.name.startswith("dataforge-shard")]


def test_unthreaded_shards_run_in_the_caller() -> None:
    backend = LocalShards(2, _Shard, threaded=False)
    assert backend.call_one(1, "add", 4) is None  # ran already: nothing pending
    assert backend.shards[1].calls == [("MainThread", 4)]
