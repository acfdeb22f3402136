"""``validate_pipeline``: everything checkable about a loaded pipeline before any work.

What ``dataforge validate`` (and ``dataforge run``, before it starts Ray) reports beyond
the YAML itself, which :func:`dataforge.config.load_pipeline` already checked: the output
and input storage answers (endpoint, credentials, bucket: :func:`dataforge.io.fs.check_location`), every input
path matches files, every op's resources are usable (:meth:`Op.validate`: model files,
tokenizer directories, importable segmenters), cross-stage rules hold
(:meth:`Op.check_pipeline`), the output is not equal to, inside or above an input nor read by
an input glob through a symlink, and every barrier op defines its planner
(:meth:`BarrierOp.plan`). Runs without Ray and without loading any model.
"""

from __future__ import annotations

import os
from pathlib import Path

from dataforge.config import PipelineConfig
from dataforge.io import fs
from dataforge.io.globbing import may_match_below, walk_reaches
from dataforge.io.readers import InputTask, plan_input_tasks
from dataforge.ops.base import BarrierOp, Op, op_class
from dataforge.runtime.segments import make_op
from dataforge.typed_config import ConfigError

__all__ = [
    "op_class_problems",
    "output_overlaps_inputs",
    "output_reached_through_links",
    "validate_pipeline",
]


def validate_pipeline(config: PipelineConfig, out: str | None = None) -> list[str]:
    """The problems that would make a run of ``config`` (into ``out``, a path or URI;
    default ``output.path``) fail; empty when it can start.

    Each problem is one line naming the input, stage (``stages[2] (perplexity_filter):
    ...``) or storage location (``s3://bucket/out: bucket 'bucket' does not exist``).
    """
    fs.configure(config.storage)
    problems = []
    try:
        fs.check_location(out or config.locate(config.output.path))
        tasks = plan_input_tasks(config)
        if out is not None and not fs.is_uri(out):
            problems += output_overlaps_inputs(Path(out), config, tasks)
            problems += [] if problems else output_reached_through_links(Path(out), config)
    except fs.StorageError as exc:
        return [str(exc)]  # the stages' own checks would fail on the same storage
    except ConfigError as exc:
        problems.append(str(exc))
    stages = list(config.stages)
    for i, stage in enumerate(stages):
        found = op_class_problems(op_class(stage.op))
        if not found:  # an abstract class cannot be made
            op = make_op(stage, config)
            found = [*_op_problems(op), *op.check_pipeline(stages, i)]
        problems += [f"stages[{i}] ({stage.op}): {p}" for p in found]
    return problems


def op_class_problems(cls: type[Op]) -> list[str]:
    """Why op class ``cls`` cannot be made (empty if it can): a barrier op that does not
    define its planner (:meth:`BarrierOp.plan`, abstract on the base class)."""
    if issubclass(cls, BarrierOp) and "plan" in cls.__abstractmethods__:
        return [f"barrier op {cls.name!r} declares no planner (define plan(self, ctx))"]
    return []


def _op_problems(op) -> list[str]:
    """``op.validate()``; a model or tokenizer at a URI it could not fetch is one problem
    naming the location (``s3://bucket/tok: cannot reach the storage endpoint ...``)."""
    try:
        return op.validate()
    except fs.StorageError as exc:
        return [str(exc)]


def output_overlaps_inputs(out: Path, config: PipelineConfig, tasks: list[InputTask]) -> list[str]:
    """Why ``out`` may not be the output of ``config`` over ``tasks`` (empty if it may):
    it is, or lies above, an input file, or a source's glob could read files written in it.
    """
    real_out = Path(os.path.realpath(out))
    problems = []
    for task in tasks:
        if "://" not in task.path and Path(os.path.realpath(task.path)).is_relative_to(real_out):
            problems.append(
                f"output {out} holds input file {task.path} of source {task.source!r}; the "
                "output must not be equal to or above an input"
            )
            break
    for source in config.inputs:
        if "://" in source.path:
            continue  # object storage: never below a local output
        if may_match_below(str(config.resolve(source.path)), real_out):
            problems.append(
                f"output {out} lies inside the folder that source {source.name!r} reads "
                f"({source.path!r}): a run could read its own output; choose an -o outside it"
            )
    return problems[:1]  # one line: the first overlap says what to change


def output_reached_through_links(out: Path, config: PipelineConfig) -> list[str]:
    """A line (at most one) naming the source whose glob, following symlinks, would read
    files in ``out``: a run would read its own output, a later run the earlier output."""
    for source in config.inputs:
        if fs.is_uri(source.path):
            continue
        via = walk_reaches(str(config.resolve(source.path)), out)
        if via is not None:
            return [
                f"output {out} is read by source {source.name!r} ({source.path!r}) through "
                f"{via}: a run could read its own output; choose an -o outside it"
            ]
    return []
