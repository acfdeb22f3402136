"""validate_pipeline: the library function behind `dataforge validate`."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import ClassVar

import pytest

from dataforge.config import load_pipeline
from dataforge.ops.base import OP_REGISTRY, BarrierOp, Op, op_class
from dataforge.runtime.validate import op_class_problems, validate_pipeline


def _pipeline(tmp_path: Path, stages: str, path: str = "a.jsonl") -> Path:
    (tmp_path / "a.jsonl").write_text('{"text": "hello"}\n')
    file = tmp_path / "p.yaml"
    file.write_text(
        f"name: t\ninputs: [{{name: a, path: {path}}}]\noutput: {{path: out}}\nstages: {stages}\n"
    )
    return file


def test_a_valid_pipeline_has_no_problems(tmp_path: Path) -> None:
    config = load_pipeline(
        _pipeline(tmp_path, "[{op: clean}, {op: dedup}, {op: sample, keep_total: true}]")
    )
    assert validate_pipeline(config) == []


def test_every_problem_is_reported_with_its_place(tmp_path: Path) -> None:
    stages = (
        "[{op: clean}, {op: sample, unit: tokens, keep_total: true},"
        " {op: perplexity_filter, models: {en: missing.bin}, max_ppl: {en: 100}},"
        " {op: tokenize, tokenizer: nowhere}]"
    )
    config = load_pipeline(_pipeline(tmp_path, stages, path="missing/*.jsonl"))
    problems = validate_pipeline(config)
    assert problems[0] == "inputs[0] (a): path 'missing/*.jsonl' matches no file"
    assert problems[1].startswith("stages[1] (sample): unit: tokens needs a tokenize stage")
    assert any(
        p.startswith("stages[2] (perplexity_filter): perplexity_filter: models.en")
        for p in problems
    )
    assert any(
        p.startswith("stages[3] (tokenize): tokenize: tokenizer directory") for p in problems
    )
    assert not any(p.startswith("stages[0]") for p in problems)


@pytest.mark.parametrize("name", sorted(OP_REGISTRY))
def test_every_barrier_op_has_its_planner_beside_it(name: str) -> None:
    cls = op_class(name)
    if issubclass(cls, BarrierOp):
        assert op_class_problems(cls) == []
        assert cls.plan.__module__ == cls.__module__ == f"dataforge.ops.{name}"
        assert importlib.util.find_spec(f"dataforge.ops.{name}.planner") is not None
    else:
        assert not hasattr(cls, "plan")
        assert op_class_problems(cls) == []
        assert Op.check_pipeline is cls.check_pipeline or name == "sample"


class _NoPlanner(BarrierOp):
    name: ClassVar[str] = "no_planner"


def test_a_barrier_op_without_a_planner_is_an_error() -> None:
    assert op_class_problems(_NoPlanner) == [
        "barrier op 'no_planner' declares no planner (define plan(self, ctx))"
    ]
    with pytest.raises(TypeError, match=r"abstract method '?plan"):
        _NoPlanner(_NoPlanner.Config())
