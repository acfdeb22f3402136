"""``dataforge validate ABLATION.yaml``: every check an ablation's run would make before
its first pipeline starts, without running anything.

It checks the file, each variant's pipeline (with the pipeline checks of ``dataforge
validate``, handed in by the CLI since the trainer never imports the runtime), the training
recipe against the tokenizer and ``init_from``, and each evaluation set.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

from dataforge.config import PipelineConfig, load_pipeline
from dataforge.typed_config import ConfigError
from trainer.ablate.config import AblationConfig, EvalSet, Variant, load_ablation
from trainer.ablate.steps import (
    check_variants,
    eval_pipeline_spec,
    recipe_probe,
    variant_overrides,
    write_pipeline_file,
)

__all__ = ["PipelineCheck", "ablation_problems", "is_ablation_file"]

PipelineCheck = Callable[[PipelineConfig, str | None], list[str]]
"""The problems of a pipeline run into a location (``runtime.validate.validate_pipeline``)."""


def is_ablation_file(raw: object) -> bool:
    """An ablation file names ``variants`` and no ``stages`` (a pipeline file's key)."""
    return isinstance(raw, dict) and "variants" in raw and "stages" not in raw


def ablation_problems(
    path: str, overrides: list[str], check: PipelineCheck, out: str | None = None
) -> tuple[AblationConfig | None, list[str]]:
    """The loaded ablation (None if the file itself is invalid) and one line per problem;
    ``out`` is the ``-o`` folder the ablation would write (its variants' run folders are
    checked there)."""
    try:
        config = load_ablation(path, overrides)
    except ConfigError as exc:
        return None, [str(exc)]
    problems = []
    for variant in config.variants:
        data = None if out is None else str(Path(out) / "variants" / variant.name / "data")
        found = _guarded("", lambda v=variant, d=data: _variant_problems(config, v, d, check))
        problems += [f"variants.{variant.name} ({config.pipeline_of(variant)}): {p}" for p in found]
    if not problems:  # the variants load: do they share the ablation's tokenizer?
        problems = _guarded("variants", lambda: check_variants(config))
    with tempfile.TemporaryDirectory(prefix="dataforge-ablation-") as scratch:
        root = Path(scratch)
        problems += _guarded("train.recipe", lambda: recipe_probe(config, "mds", root, 0))
        for eval_set in config.eval:
            found = _guarded("", lambda s=eval_set: _eval_problems(config, s, root, check))
            problems += [f"eval.{eval_set.name}: {p}" for p in found]
    return config, problems


def _guarded(key: str, work: Callable[[], object]) -> list[str]:
    """The problems ``work`` returns, or the one its ConfigError or ValueError names."""
    try:
        found = work()
    except (ConfigError, ValueError) as exc:
        return [f"{key}: {exc}" if key and not str(exc).startswith(key) else str(exc)]
    return found if isinstance(found, list) else []


def _variant_problems(
    config: AblationConfig, variant: Variant, data: str | None, check: PipelineCheck
) -> list[str]:
    loaded = load_pipeline(config.pipeline_of(variant), variant_overrides(config, variant))
    return check(loaded, data)


def _eval_problems(
    config: AblationConfig, eval_set: EvalSet, root: Path, check: PipelineCheck
) -> list[str]:
    if eval_set.mds is not None:
        index = Path(config.resolve(eval_set.mds)) / "index.json"
        if "://" not in eval_set.mds and not index.is_file():
            return [f"mds {config.resolve(eval_set.mds)}: no index.json (not an MDS folder)"]
        return []
    pipeline = root / "eval" / eval_set.name / "pipeline.yaml"
    spec = eval_pipeline_spec(config, eval_set, pipeline.parent)
    write_pipeline_file(pipeline, spec)
    return check(load_pipeline(pipeline), spec["output"]["path"])
