"""Trainer YAML -> typed, frozen dataclasses, one module per group of sections.

Loading follows the shared typed-config rules (:mod:`dataforge.typed_config`): safe YAML
with YAML 1.2 numbers (``lr: 3e-4`` is a float),
unknown keys are errors listing the valid ones, and each dataclass checks its own
cross-field rules in ``__post_init__``. A ``model.preset`` name expands to a size from
:data:`MODEL_PRESETS`; keys given next to it override the preset. Relative paths in the
file resolve against its directory, those of ``--set`` overrides against the working
directory (:mod:`trainer.config.paths`).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from dataforge.typed_config import (
    ConfigError,
    apply_overrides,
    from_mapping,
    read_yaml_file,
    to_plain,
)
from trainer.config.distributed import DistributedConfig, check_mesh
from trainer.config.model import LORA_TARGETS, MODEL_PRESETS, ROPE_SCALINGS, LoRAConfig, ModelConfig
from trainer.config.stages import DPOConfig, PPOConfig
from trainer.config.train import (
    CheckpointConfig,
    DataConfig,
    EvalConfig,
    MetricsConfig,
    OptimConfig,
    TrainConfig,
)

__all__ = [
    "LORA_TARGETS",
    "MODEL_PRESETS",
    "ROPE_SCALINGS",
    "CheckpointConfig",
    "ConfigError",
    "DataConfig",
    "DistributedConfig",
    "DPOConfig",
    "EvalConfig",
    "PPOConfig",
    "LoRAConfig",
    "MetricsConfig",
    "ModelConfig",
    "OptimConfig",
    "TrainConfig",
    "TrainerConfig",
    "config_from_mapping",
    "load_config",
    "to_plain",
]


@dataclasses.dataclass(frozen=True)
class TrainerConfig:
    model: ModelConfig = ModelConfig()
    optim: OptimConfig = OptimConfig()
    train: TrainConfig = TrainConfig()
    data: DataConfig = DataConfig()
    checkpoint: CheckpointConfig = CheckpointConfig()
    distributed: DistributedConfig = DistributedConfig()
    dpo: DPOConfig = DPOConfig()
    ppo: PPOConfig = PPOConfig()
    eval: EvalConfig = EvalConfig()
    metrics: MetricsConfig = MetricsConfig()
    lora: LoRAConfig = LoRAConfig()
    tokenizer: str | None = None
    """Tokenizer directory; gives ``model.vocab_size`` when that is null."""
    init_from: str | None = None
    """Exported weights directory (safetensors + config.json) to start from, e.g. SFT from
    a pretrained model, DPO from an SFT model. Ignored when resuming a checkpoint."""
    run_dir: str = "runs/default"
    """metrics.jsonl and TensorBoard events go here."""

    def __post_init__(self) -> None:
        if self.model.vocab_size is None and self.tokenizer is None:
            raise ValueError("set model.vocab_size or tokenizer (a directory to read it from)")
        if self.lora.enabled and "lm_head" in self.lora.targets and self.model.tie_embeddings:
            raise ValueError("lora.targets lm_head with model.tie_embeddings: untie, or drop it")
        if self.data.source == "synthetic" and self.model.vocab_size is None:
            raise ValueError("data.source synthetic needs an explicit model.vocab_size")
        check_mesh(self)
        if self.train.max_steps is not None and self.optim.warmup_steps > self.train.max_steps:
            raise ValueError(
                f"optim.warmup_steps {self.optim.warmup_steps} > train.max_steps "
                f"{self.train.max_steps}"
            )

    def to_json(self) -> str:
        return json.dumps(to_plain(self), sort_keys=True)


_TOP_KEYS = {f.name for f in dataclasses.fields(TrainerConfig)}


def config_from_mapping(raw: dict[str, Any], where: str = "<config>") -> TrainerConfig:
    """Build a TrainerConfig from a parsed mapping (expanding ``model.preset``).

    Raises:
        ConfigError: unknown keys or preset, wrong types, or a failed cross-field rule.
    """
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: the top level must be a mapping with keys {sorted(_TOP_KEYS)}")
    raw = dict(raw)
    model = dict(raw.get("model") or {})
    preset = model.pop("preset", None)
    if preset is not None:
        if preset not in MODEL_PRESETS:
            raise ConfigError(
                f"{where}: model.preset {preset!r} is not valid; valid: {', '.join(MODEL_PRESETS)}"
            )
        model = {**MODEL_PRESETS[preset], **model}
    raw["model"] = model
    return from_mapping(TrainerConfig, raw, where)


def load_config(path: str | Path, overrides: list[str] | None = None) -> TrainerConfig:
    """Read a trainer YAML file plus ``key.path=value`` overrides.

    Raises:
        ConfigError: unreadable file, invalid YAML, or an invalid config (see
            :func:`config_from_mapping`); the message names the file and key.
    """
    from trainer.config.paths import resolve_paths, with_default_dirs

    path = Path(path)
    raw = read_yaml_file(path, "trainer config")
    if isinstance(raw, dict):
        defaults = (TrainerConfig.run_dir, CheckpointConfig.dir)
        raw = resolve_paths(with_default_dirs(raw, *defaults), path.absolute().parent)
    raw = apply_overrides(raw if isinstance(raw, dict) else {}, overrides or [], str(path))
    return config_from_mapping(resolve_paths(raw, Path.cwd()), str(path))
