"""Training objectives (one component each) and the loss functions they use.

``build_objective(stage, config)`` gives the objective of a stage; see
:mod:`trainer.objectives.base` for the interface.
"""

from __future__ import annotations

from collections.abc import Callable

from trainer.config import ConfigError, TrainerConfig
from trainer.objectives.base import Objective
from trainer.objectives.causal_lm import SFT, CausalLM, Pretrain
from trainer.objectives.dpo import DPO
from trainer.objectives.losses import (
    IGNORE_INDEX,
    DPOStats,
    causal_lm_loss_sum,
    count_targets,
    dpo_loss,
    sequence_logps,
)
from trainer.objectives.reward import Reward

__all__ = [
    "DPO",
    "IGNORE_INDEX",
    "OBJECTIVES",
    "SFT",
    "CausalLM",
    "DPOStats",
    "Objective",
    "Pretrain",
    "Reward",
    "build_objective",
    "causal_lm_loss_sum",
    "count_targets",
    "dpo_loss",
    "sequence_logps",
]

OBJECTIVES: dict[str, Callable[[TrainerConfig], Objective]] = {
    "pretrain": lambda config: Pretrain(config.train.label_smoothing),
    "sft": lambda config: SFT(config.train.label_smoothing),
    "dpo": lambda config: DPO(config.dpo, base_reference=config.lora.enabled),
    "reward": lambda config: Reward(),
}


def build_objective(stage: str, config: TrainerConfig) -> Objective:
    """The objective of ``stage``.

    Raises:
        ConfigError: ``stage`` is not one of :data:`OBJECTIVES`.
    """
    if stage not in OBJECTIVES:
        raise ConfigError(f"stage {stage!r} is not valid; valid: {', '.join(OBJECTIVES)}")
    return OBJECTIVES[stage](config)
