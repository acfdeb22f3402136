"""What every executor offers: the :class:`Executor` that runs a run's tasks, and the
:class:`ExecutorSpec` by which ``dataforge run`` and ``validate`` pick and describe one."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from dataforge.config import PipelineConfig
from dataforge.io.readers import InputTask
from dataforge.runtime.memory_budget import MemoryBudget
from dataforge.runtime.placement import Placement
from dataforge.runtime.segments import Segment

__all__ = ["Executor", "ExecutorChoice", "ExecutorSpec"]


class Executor(Protocol):
    """Runs ``SegmentRunner(config, segment, work_dir).run_task(task)`` for many tasks and
    calls ``on_task(stats)`` as each one commits; :attr:`placement` counts where."""

    num_cpus: int
    ray_available: bool
    placement: Placement

    def memory_budget(self, config: PipelineConfig) -> MemoryBudget:
        """What each worker may hold for a global stage before it spills
        (:mod:`dataforge.runtime.memory_budget`)."""

    def check_paths(
        self, config: PipelineConfig, work: Path | None, tasks: list[InputTask]
    ) -> None:
        """Raise before any work if the workers cannot see the run's paths."""

    def run_segment(
        self,
        config: PipelineConfig,
        segment: Segment,
        work_dir: str,
        tasks: list[dict[str, Any]],
        on_task: Callable[[dict[str, Any]], None],
    ) -> None: ...

    def run_call(
        self, config: PipelineConfig, work_dir: str, fn: Callable[..., Any], *args: Any
    ) -> Any:
        """``fn(*args)`` on one of the run's workers (a barrier's planning); its result."""


@dataclasses.dataclass(frozen=True)
class ExecutorChoice:
    """The executor of a run, decided before any work
    (:func:`dataforge.runtime.executors.choose_executor`)."""

    name: str
    """A key of :data:`dataforge.runtime.executors.EXECUTORS`."""
    address: str | None
    """The Ray cluster the run joins; None: embedded local Ray, or no Ray at all."""
    why: str
    """One line for the user: the executor, what chose it, where every task runs."""


@dataclasses.dataclass(frozen=True)
class ExecutorSpec:
    """One executor as ``dataforge run`` and ``validate`` see it."""

    place: Callable[[PipelineConfig, str | None], tuple[str | None, str]]
    """``place(config, address)``, ``address`` as ``--address`` gives it: the cluster the
    run joins (None: none) and where every task runs, in words. Raises ``ConfigError``
    when the config or ``address`` contradicts the executor."""
    run: Callable[..., dict[str, Any]]
    """``run(config, out, address, *, overwrite, log, progress)``: the run into ``out``;
    its manifest. ``address``: the choice's cluster (:attr:`ExecutorChoice.address`)."""
