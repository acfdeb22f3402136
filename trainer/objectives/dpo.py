"""Direct preference optimisation (sigmoid DPO) against a frozen reference.

Batches hold ``chosen_*`` and ``rejected_*`` rows of one width (loader contract), run
through the model in one forward. The reference log-probs come from a frozen copy of the
starting weights (``dpo.reference: model``; with LoRA, the model itself with its adapters
off) or from the batch (``precomputed``:
``ref_chosen_logps``/``ref_rejected_logps``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import ClassVar

import torch
from torch import nn

from trainer.config import DPOConfig
from trainer.model.lora import adapters_disabled
from trainer.objectives.base import Batch
from trainer.objectives.losses import dpo_loss, sequence_logps
from trainer.objectives.pairs import PairObjective

__all__ = ["DPO"]


class DPO(PairObjective):
    """Mean DPO loss over the pairs of a step; logs preference accuracy and margins."""

    accuracy_name: ClassVar[str] = "preference_accuracy"

    def __init__(self, config: DPOConfig, base_reference: bool = False) -> None:
        self.config = config
        self.reference: nn.Module | None = None
        # LoRA: the reference is the trained model with its adapters off (no copy).
        self.base_reference = base_reference and config.reference == "model"

    def prepare(self, model: nn.Module, wrap: Callable[[nn.Module], nn.Module]) -> None:
        if self.config.reference == "model" and not self.base_reference:
            self.reference = wrap(copy.deepcopy(model).eval().requires_grad_(False))

    @property
    def forward_flops_factor(self) -> float:
        return 4 / 3 if self.reference is not None or self.base_reference else 1.0

    def loss(
        self, model: nn.Module, batch: Batch, training: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor]:
        ids, pos = self.stacked(batch, "input_ids"), self.stacked(batch, "position_ids")
        labels = self.stacked(batch, "labels")
        policy_chosen, policy_rejected = sequence_logps(model(ids, pos), labels).chunk(2)
        if self.base_reference:
            with torch.no_grad(), adapters_disabled(model):
                ref = sequence_logps(model(ids, pos), labels)
            ref_chosen, ref_rejected = ref.chunk(2)
        elif self.reference is None:
            ref_chosen, ref_rejected = batch["ref_chosen_logps"], batch["ref_rejected_logps"]
        else:
            with torch.no_grad():
                ref = sequence_logps(self.reference(ids, pos), labels)
            ref_chosen, ref_rejected = ref.chunk(2)
        stats = dpo_loss(policy_chosen, policy_rejected, ref_chosen, ref_rejected, self.config.beta)
        extra = self.pair_stats(
            stats.correct, stats.reward_margins, stats.chosen_rewards, stats.rejected_rewards
        )
        return stats.losses.sum(), extra
