"""Where a run's tasks ran: the manifest's ``runtime`` (both executors count into it)."""

from __future__ import annotations

import collections
import os
from typing import Any

__all__ = ["Placement"]


class Placement:
    """Where the tasks this invocation ran went: per node, and how many in the driver's own
    process; where barriers planned and their index shards ran (the manifest's ``runtime``)."""

    def __init__(self, executor: str, num_cpus: int, driver_node: str, nodes: int = 1) -> None:
        self.executor, self.num_cpus, self.nodes = executor, num_cpus, nodes
        self.driver = (driver_node, os.getpid())
        self.by_node: collections.Counter[str] = collections.Counter()
        self.on_driver = 0
        self.barrier_work: collections.Counter[str] = collections.Counter()

    def ran(self, node: str, pid: int) -> None:
        self.by_node[node] += 1
        self.on_driver += (node, pid) == self.driver

    def barrier_ran(self, nodes: list[str]) -> None:
        """A barrier's planner and its parallel work (index shards) ran on ``nodes``."""
        self.barrier_work.update(nodes)

    def summary(self) -> dict[str, Any]:
        barrier = {"barrier_work_by_node": dict(sorted(self.barrier_work.items()))}
        return {
            "executor": self.executor,
            "num_cpus": self.num_cpus,
            "nodes": self.nodes,
            "tasks_on_driver": self.on_driver,
            "tasks_by_node": dict(sorted(self.by_node.items())),
        } | (barrier if self.barrier_work else {})
