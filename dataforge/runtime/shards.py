"""The two shard backends a barrier's planner gets through its context (dedup's index
shards): in-process objects or Ray actors.

Both implement :class:`dataforge.ops.barrier.ShardBackend`: ``call_one(shard, method,
*args)`` (returns a ref or future), ``call_all(method)`` (results), ``broadcast(method,
*args)`` (the same arguments to all), ``wait(pending)``, ``exchange(send, receive)`` (every
shard's ``send`` output slot i goes to shard i's ``receive``; returns the receive results),
``nodes()`` (where each shard runs, as the manifest's ``runtime`` names nodes) and
``close()``. ``failures`` lists the exceptions that mean "a shard died: retry".
:func:`shard_workers` is the factory the barrier task puts in the context.
"""

from __future__ import annotations

import functools
import socket
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dataforge.ops.barrier import ShardFactory

__all__ = ["LocalShards", "RayShards", "shard_workers"]


def shard_workers(ray_available: bool, num_cpus: int) -> ShardFactory:
    """The shard workers of a run's barriers: Ray actors with the Ray executor, else
    objects in the planning worker (with several CPUs each on a thread of its own, so that
    the shards work side by side)."""
    if ray_available:
        return RayShards
    return functools.partial(LocalShards, threaded=num_cpus > 1)


class LocalShards:
    """Shards as plain objects in this process (no Ray). With ``threaded``, each
    shard has a thread of its own that runs its calls in the order they were made, as an
    actor would: shards work side by side (their numpy and Arrow work outside the GIL)
    while the driver reads the next part; without, every call runs at once in the caller."""

    failures: tuple[type[BaseException], ...] = ()

    def __init__(self, count: int, shard: type, *args: Any, threaded: bool = False):
        self.count = count
        self.shards = [shard(*args) for _ in range(count)]
        self._threads = [
            ThreadPoolExecutor(1, thread_name_prefix=f"dataforge-shard-{i}")
            for i in range(count if threaded and count > 1 else 0)
        ]

    def call_one(self, shard: int, method: str, *args: Any) -> Any:
        call = getattr(self.shards[shard], method)
        return self._threads[shard].submit(call, *args) if self._threads else call(*args)

    def _on_each(self, calls: list[tuple[str, tuple]]) -> list[Any]:
        """Shard i runs ``calls[i]``; the results in shard order."""
        pending = [self.call_one(i, method, *args) for i, (method, args) in enumerate(calls)]
        return [p.result() if isinstance(p, Future) else p for p in pending]

    def call_all(self, method: str) -> list[Any]:
        return self._on_each([(method, ())] * self.count)

    def broadcast(self, method: str, *args: Any) -> list[Any]:
        return self._on_each([(method, args)] * self.count)

    def wait(self, pending: list[Any]) -> None:
        """Wait for the calls ``call_one`` returned (a shard's error is raised here)."""
        for call in pending:
            if isinstance(call, Future):
                call.result()

    def nodes(self) -> list[str]:
        return [socket.gethostname()] * self.count  # as the local executor names its node

    def exchange(self, send: str, receive: str, *args: Any) -> list[Any]:
        sent = self._on_each([(send, args)] * self.count)
        calls = [(receive, tuple(out[i] for out in sent)) for i in range(self.count)]
        del sent  # each shard's pieces are freed once it has received them
        pending = []
        while calls:
            method, pieces = calls.pop(0)
            pending.append(self.call_one(len(pending), method, *pieces))
            del pieces
        return [p.result() if isinstance(p, Future) else p for p in pending]

    def close(self) -> None:
        for thread in self._threads:
            thread.shutdown(wait=True, cancel_futures=True)
        self._threads = []
        self.shards = []


class RayShards:
    """Shards as Ray actors; shuffles pass object refs actor to actor."""

    def __init__(self, count: int, shard: type, *args: Any) -> None:
        import ray

        self._ray = ray
        # ActorUnschedulableError: the node a shard was pinned to left before it started;
        # the retry places fresh shards on the nodes alive then.
        self.failures = (
            ray.exceptions.RayActorError,
            ray.exceptions.ActorUnavailableError,
            ray.exceptions.ActorUnschedulableError,
        )
        self.count = count
        # num_cpus=0: the shards run after the actor pools drained; asking for CPUs here
        # could wait forever behind pools that hold them. Zero-CPU actors are not spread by
        # "SPREAD", nor reliably by a soft node affinity, so each shard is pinned to a node
        # in turn.
        remote = ray.remote(_placed(shard))
        # Not waited for: they start while the caller prepares its first calls.
        self.actors = [
            remote.options(
                num_cpus=0, max_restarts=0, max_task_retries=0, scheduling_strategy=where
            ).remote(*args)
            for where in _round_robin(ray, count)
        ]

    def call_one(self, shard: int, method: str, *args: Any) -> Any:
        return getattr(self.actors[shard], method).remote(*args)

    def call_all(self, method: str) -> list[Any]:
        return self._ray.get([getattr(a, method).remote() for a in self.actors])

    def broadcast(self, method: str, *args: Any) -> list[Any]:
        refs = [self._ray.put(a) for a in args]  # one copy in the object store, not N
        return self._ray.get([getattr(a, method).remote(*refs) for a in self.actors])

    def wait(self, pending: list[Any]) -> None:
        self._ray.get(pending)

    def nodes(self) -> list[str]:
        return self._ray.get([a.node.remote() for a in self.actors])

    def exchange(self, send: str, receive: str, *args: Any) -> list[Any]:
        """Every shard's ``send(*args)`` output slot i goes to shard i's ``receive`` (refs
        only: the data moves actor to actor through the object store, never through the
        driver)."""
        sent = [getattr(a, send).options(num_returns=self.count).remote(*args) for a in self.actors]
        if self.count == 1:
            sent = [[ref] for ref in sent]
        results = [
            getattr(a, receive).remote(*[out[i] for out in sent]) for i, a in enumerate(self.actors)
        ]
        return self._ray.get(results)

    def close(self) -> None:
        for actor in self.actors:
            self._ray.kill(actor)
        self.actors = []


def _round_robin(ray: Any, count: int) -> list[Any]:
    """Scheduling strategies pinning ``count`` actors to the alive nodes that offer CPUs,
    in turn (node ids sorted, so the same cluster gets the same placement)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    nodes = sorted(
        n["NodeID"] for n in ray.nodes() if n["Alive"] and n.get("Resources", {}).get("CPU", 0)
    )
    if not nodes:
        return ["SPREAD"] * count
    return [
        NodeAffinitySchedulingStrategy(node_id=nodes[i % len(nodes)], soft=False)
        for i in range(count)
    ]


@functools.cache
def _placed(shard: type) -> type:
    """``shard`` with a ``node()`` method: which Ray node it runs on."""
    return type("_PlacedShard", (shard,), {"node": _node})


def _node(self: Any) -> str:
    from dataforge.runtime.cluster import node_name  # deferred: it imports ray

    return node_name()
