"""The shard workers a planner gets from its context (:meth:`BarrierContext.start_shards`):
``count`` copies of one class, each in a worker of its own, called by method name.

The runtime implements both kinds (``dataforge.runtime.shards``: Ray actors, or objects in
the planning worker's process, each on a thread of its own); a planner sees only this
protocol, so it runs unchanged on either and never imports Ray.
"""

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["ShardBackend", "ShardFactory"]


class ShardBackend(Protocol):
    """``count`` shards; each runs its calls in the order they were made, as an actor does.

    Attributes:
        count: the number of shards.
        failures: the exceptions that mean "a shard died: start fresh ones and retry"
            (none for in-process shards).
    """

    count: int
    failures: tuple[type[BaseException], ...]

    def call_one(self, shard: int, method: str, *args: Any) -> Any:
        """Call ``method(*args)`` on shard ``shard``; returns a handle for :meth:`wait`."""
        ...

    def call_all(self, method: str) -> list[Any]:
        """``method()`` on every shard; the results in shard order."""
        ...

    def broadcast(self, method: str, *args: Any) -> list[Any]:
        """``method(*args)`` with the same arguments on every shard; the results."""
        ...

    def wait(self, pending: list[Any]) -> None:
        """Wait for the handles :meth:`call_one` returned (a shard's error is raised here)."""
        ...

    def exchange(self, send: str, receive: str, *args: Any) -> list[Any]:
        """Every shard's ``send(*args)`` output slot i goes to shard i's ``receive``;
        returns the receive results in shard order."""
        ...

    def nodes(self) -> list[str]:
        """Where each shard runs, as the manifest's ``runtime`` names nodes."""
        ...

    def close(self) -> None:
        """Stop the shards (their state is lost)."""
        ...


class ShardFactory(Protocol):
    """Starts shard workers: ``factory(count, shard, *args)`` gives ``count`` workers each
    holding ``shard(*args)`` (``shard`` a class whose methods the backend calls by name)."""

    def __call__(self, count: int, shard: type, *args: Any) -> ShardBackend: ...
