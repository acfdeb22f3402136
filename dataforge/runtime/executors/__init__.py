"""Where a run's tasks run: one module per executor, picked by name before any work.

- ``ray`` (:mod:`.ray`): a pool of Ray actors, on embedded local Ray or a cluster.
- ``local`` (:mod:`.local`): worker processes forked on this machine, no Ray.

Both run the same :class:`~dataforge.runtime.segments.SegmentRunner` per task, so the
output is the same bytes. :func:`choose_executor` is the one rule for which executor a run
uses and which cluster it joins; ``dataforge validate`` and ``dataforge run`` print its
line, and the run follows it.
"""

from __future__ import annotations

import dataclasses

from dataforge.config import PipelineConfig
from dataforge.runtime.executors.base import ExecutorChoice, ExecutorSpec
from dataforge.runtime.executors.local import LOCAL
from dataforge.runtime.executors.ray import RAY
from dataforge.typed_config import ConfigError

__all__ = ["EXECUTORS", "ExecutorChoice", "ExecutorSpec", "choose_executor"]

EXECUTORS: dict[str, ExecutorSpec] = {"ray": RAY, "local": LOCAL}
"""The executors by the name ``executor:`` and ``--executor`` give."""

_DEFAULT = next(f.default for f in dataclasses.fields(PipelineConfig) if f.name == "executor")


def choose_executor(
    executor: str | None, address: str | None, config: PipelineConfig
) -> ExecutorChoice:
    """Which executor a run uses, the cluster it joins, and one line saying why:
    ``--executor`` (``executor``), else the pipeline's ``executor`` key (default ``ray``).
    Ray joins the cluster named by ``--address`` (``address``), ``ray.address`` or
    ``RAY_ADDRESS``, else starts embedded.

    Raises:
        ConfigError: an unknown executor name, or ``local`` with ``--address`` or
            ``ray.address`` (local runs no Ray).
    """
    name = executor or config.executor
    if name not in EXECUTORS:
        raise ConfigError(f"executor {name!r} is not valid; valid: {', '.join(EXECUTORS)}")
    if executor:
        said = "--executor"
    elif name == _DEFAULT:
        said = "the default; executor: local or --executor local runs without Ray"
    else:
        said = "the pipeline's executor key"
    cluster, where = EXECUTORS[name].place(config, address)
    return ExecutorChoice(name, cluster, f"executor: {name} ({said}): every task runs on {where}")
