"""The ablation file (``dataforge ablate ABLATION.yaml``): variants of a recipe, one
training recipe, evaluation sets. Paths resolve against the ablation file's directory.

```yaml
name: demo
tokenizer: ../tokenizers/demo          # every variant's tokenize stage must use this one
inputs: [...]                          # optional: replaces every variant pipeline's inputs
variants:
  - {name: raw, pipeline: demo_raw.yaml}
  - {name: recipe, pipeline: demo.yaml, set: ["stages.3.threshold=0.5"]}
train:
  tokens: 262144                       # trained per model, equal for every variant
  eval_points: 6                       # evaluations along training (the loss curves)
  recipe: {model: {preset: tiny}, data: {loader: {max_tokens: 4096, packing: true}}}
seeds: [1]
eval:
  - {name: news_zh, inputs: [{path: ../data/heldout/news.jsonl, lang: zh}], stages: [{op: clean}]}
  - {name: docs_en, mds: ../out/docs_heldout/mds}
```
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

from dataforge.typed_config import (
    ConfigError,
    apply_overrides,
    from_mapping,
    read_yaml_file,
)

__all__ = [
    "AblationConfig",
    "EvalSet",
    "TrainRecipe",
    "Variant",
    "load_ablation",
]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
"""Variant and evaluation-set names become folder names under the output directory."""


def _check_name(key: str, name: str) -> None:
    if not _NAME.match(name) or name in (".", ".."):
        raise ValueError(
            f"{key}: {name!r} is not a valid name; valid: 1-64 letters, digits, '_', '.', '-', "
            "starting with a letter or digit"
        )


@dataclasses.dataclass(frozen=True)
class Variant:
    """One recipe variant: a pipeline file, with ``--set`` overrides on top."""

    name: str
    pipeline: str | None = None
    """Pipeline YAML (relative to the ablation file); default: the top-level ``base``."""
    set: tuple[str, ...] = ()
    """``key.path=value`` overrides of that pipeline, as ``dataforge run --set`` takes them."""

    def __post_init__(self) -> None:
        _check_name("variants.name", self.name)


@dataclasses.dataclass(frozen=True)
class TrainRecipe:
    """How every variant's model is trained: the same recipe, budget and seeds."""

    tokens: int
    """Tokens trained per model. The same for every variant: a variant with fewer tokens is
    repeated (its epochs are reported), never trained on less."""
    recipe: Any = dataclasses.field(default_factory=dict)
    """A trainer config (the ``dataforge train pretrain`` YAML) inline, or the path of one.
    ``data.loader.packing`` must be true so that every step trains the same number of
    tokens; the ablation sets the streams, checkpoint and run folders, seed and steps."""
    eval_points: int = 5
    """Evaluations along training, evenly spaced, the last at the end (the loss curves)."""
    eval_batches: int | None = None
    """At most this many batches of each evaluation set (default: all of them)."""
    bootstrap: int = 1000
    """Bootstrap resamples of the evaluation batches for the loss's 95% interval."""

    def __post_init__(self) -> None:
        if self.tokens < 1:
            raise ValueError(f"train.tokens={self.tokens}; valid range: >= 1")
        if not 1 <= self.eval_points <= 1000:
            raise ValueError(f"train.eval_points={self.eval_points}; valid range: 1 to 1000")
        if self.eval_batches is not None and self.eval_batches < 1:
            raise ValueError(f"train.eval_batches={self.eval_batches}; valid range: >= 1")
        if not 100 <= self.bootstrap <= 100_000:
            raise ValueError(f"train.bootstrap={self.bootstrap}; valid range: 100 to 100000")
        if not isinstance(self.recipe, dict | str):
            raise ValueError("train.recipe: give a trainer config mapping or the path of one")


@dataclasses.dataclass(frozen=True)
class EvalSet:
    """A held-out set: an MDS folder already tokenized by the ablation's tokenizer, or raw
    ``inputs`` entries (as a pipeline takes them) that the ablation tokenizes itself."""

    name: str
    mds: str | None = None
    inputs: tuple[dict[str, Any], ...] = ()
    stages: tuple[dict[str, Any], ...] = ()
    """Stages run on ``inputs`` before they are tokenized, e.g. ``[{op: clean}]``: held-out
    text normalized as the variants normalize theirs, so that a normalization difference
    (full- vs half-width punctuation) is not scored as a quality difference."""

    def __post_init__(self) -> None:
        _check_name("eval.name", self.name)
        if self.stages and self.mds is not None:
            raise ValueError(f"eval {self.name!r}: 'stages' apply to 'inputs', not to 'mds'")
        if (self.mds is None) == (not self.inputs):
            raise ValueError(f"eval {self.name!r}: give exactly one of 'mds' or 'inputs'")


@dataclasses.dataclass(frozen=True)
class AblationConfig:
    name: str
    tokenizer: str
    variants: tuple[Variant, ...]
    train: TrainRecipe
    eval: tuple[EvalSet, ...]
    seeds: tuple[int, ...] = (0,)
    base: str | None = None
    """The pipeline of variants that name none."""
    inputs: tuple[dict[str, Any], ...] = ()
    """Shared inputs: replace every variant pipeline's ``inputs`` when given."""
    base_dir: str = "."
    """Directory of the ablation file (set by the loader, not in YAML)."""

    def __post_init__(self) -> None:
        _check_name("name", self.name)
        for key, items in (("variants", self.variants), ("eval", self.eval)):
            if not items:
                raise ValueError(f"{key}: give at least one")
            names = [item.name for item in items]
            twice = sorted({n for n in names if names.count(n) > 1})
            if twice:
                raise ValueError(f"{key}: names must be unique; repeated: {', '.join(twice)}")
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds: {list(self.seeds)}; give one or more distinct integers")
        for variant in self.variants:
            if variant.pipeline is None and self.base is None:
                raise ValueError(f"variants.{variant.name}: no 'pipeline' and no top-level 'base'")

    def resolve(self, path: str) -> str:
        """A path from the file, absolute (a URI unchanged)."""
        if "://" in path:
            return path
        return str((Path(self.base_dir) / path).resolve())

    def pipeline_of(self, variant: Variant) -> str:
        return self.resolve(variant.pipeline or self.base or "")

    def shared_inputs(self) -> list[dict[str, Any]]:
        """``inputs`` with their paths made absolute (they go to each variant's ``--set``)."""
        return [_absolute_input(self, entry) for entry in self.inputs]

    def trainer_mapping(self) -> dict[str, Any]:
        """The training recipe as a trainer config mapping (a copy)."""
        recipe = self.train.recipe
        if isinstance(recipe, str):
            raw = read_yaml_file(self.resolve(recipe), "trainer config")
            if not isinstance(raw, dict):
                raise ConfigError(f"{self.resolve(recipe)}: the top level must be a mapping")
            return raw
        return json.loads(json.dumps(recipe))


def _absolute_input(config: AblationConfig, entry: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
        raise ConfigError(f"{config.base_dir}: an input entry needs a 'path' string: {entry!r}")
    return {**entry, "path": config.resolve(entry["path"])}


def load_ablation(path: str | Path, overrides: list[str] | None = None) -> AblationConfig:
    """Read an ablation file (plus ``key.path=value`` overrides).

    Raises:
        ConfigError: unreadable file, unknown keys, wrong types or a failed rule; the
            message names the file and the key.
    """
    path = Path(path)
    raw = read_yaml_file(path, "ablation file")
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: the top level must be a mapping")
    raw = apply_overrides(raw, overrides or [], str(path))
    raw["base_dir"] = str(path.resolve().parent)
    return from_mapping(AblationConfig, raw, str(path))
