"""The stage registry: one entry per ``dataforge train`` stage.

A stage is named here once: the CLI's subcommands and their help, the loop's objective and
the choice of loop all come from :data:`STAGES`. A batch stage builds an
:class:`~trainer.objectives.base.Objective` for the shared loop (:func:`trainer.loop.train`);
PPO samples its own data and declares ``loop="ppo"`` (:func:`trainer.ppo.train_ppo`).
Objective classes are imported inside their builders, so the registry loads no torch
(``dataforge --help`` reads it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

from trainer.config import ConfigError, TrainerConfig

if TYPE_CHECKING:
    from trainer.objectives.base import Objective

__all__ = ["LOOPS", "STAGES", "Stage", "batch_stages", "build_objective"]

LOOPS = ("batch", "ppo")
"""The loops a stage can run on: :func:`trainer.loop.train`, :func:`trainer.ppo.train_ppo`."""


@dataclasses.dataclass(frozen=True)
class Stage:
    """One training stage."""

    help: str
    """One line for ``dataforge train --help`` and the stage's own ``--help``."""
    objective: Callable[[TrainerConfig], Objective] | None = None
    """Builds the stage's objective from the config (batch stages)."""
    loop: Literal["batch", "ppo"] = "batch"
    """``batch``: the shared loop over the objective's loader batches; ``ppo``: the PPO loop
    (rollouts, then several updates), which needs no objective."""

    def __post_init__(self) -> None:
        if self.loop not in LOOPS:
            raise ValueError(f"stage loop {self.loop!r}; valid: {', '.join(LOOPS)}")
        if self.loop == "batch" and self.objective is None:
            raise ValueError("a 'batch' stage needs an objective builder")
        if self.loop != "batch" and self.objective is not None:
            raise ValueError(f"a {self.loop!r} stage takes no objective builder (its own loop)")


def _pretrain(config: TrainerConfig) -> Objective:
    from trainer.objectives.causal_lm import Pretrain

    return Pretrain(config.train.label_smoothing)


def _sft(config: TrainerConfig) -> Objective:
    from trainer.objectives.causal_lm import SFT

    return SFT(config.train.label_smoothing)


def _dpo(config: TrainerConfig) -> Objective:
    from trainer.objectives.dpo import DPO

    return DPO(config.dpo, base_reference=config.lora.enabled)


def _reward(config: TrainerConfig) -> Objective:
    from trainer.objectives.reward import Reward

    return Reward()


STAGES: dict[str, Stage] = {
    "pretrain": Stage("causal LM pretraining on tokenized documents", _pretrain),
    "sft": Stage("supervised fine-tuning, loss on completions only", _sft),
    "dpo": Stage("direct preference optimisation on chosen/rejected pairs", _dpo),
    "reward": Stage(
        "reward model (scalar head, Bradley-Terry loss) on chosen/rejected pairs", _reward
    ),
    "ppo": Stage(
        "RLHF: PPO of an SFT policy against a frozen reward model, KL to a reference",
        loop="ppo",
    ),
}


def batch_stages() -> list[str]:
    """The stages the shared batch loop runs (those with an objective)."""
    return [name for name, stage in STAGES.items() if stage.loop == "batch"]


def build_objective(stage: str, config: TrainerConfig) -> Objective:
    """The objective of ``stage``.

    Raises:
        ConfigError: ``stage`` is not one of :func:`batch_stages`.
    """
    spec = STAGES.get(stage)
    if spec is None or spec.objective is None:
        raise ConfigError(f"stage {stage!r} is not valid; valid: {', '.join(batch_stages())}")
    return spec.objective(config)
