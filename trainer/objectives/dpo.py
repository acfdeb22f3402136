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
from trainer.lora import adapters_disabled
from trainer.objectives.base import Batch, Objective
from trainer.objectives.losses import dpo_loss, sequence_logps

__all__ = ["DPO"]


class DPO(Objective):
    """Mean DPO loss over the pairs of a step; logs preference accuracy and margins."""

    loader_mode: ClassVar[str] = "dpo"
    row_prefixes = ("chosen_", "rejected_")
    stat_names = ("correct", "margin_sum", "chosen_reward_sum", "rejected_reward_sum")

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

    def weight(self, batch: Batch) -> int:
        return int(batch["chosen_input_ids"].shape[0])

    def loss(
        self, model: nn.Module, batch: Batch, training: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor]:
        ids = torch.cat([batch["chosen_input_ids"], batch["rejected_input_ids"]])
        pos = torch.cat([batch["chosen_position_ids"], batch["rejected_position_ids"]])
        labels = torch.cat([batch["chosen_labels"], batch["rejected_labels"]])
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
        extra = torch.stack(
            [
                stats.correct.sum(),
                stats.reward_margins.sum(),
                stats.chosen_rewards.sum(),
                stats.rejected_rewards.sum(),
            ]
        )
        return stats.losses.sum(), extra.double()

    def metrics(self, loss_sum: float, stats: list[float], weight: float) -> dict[str, float]:
        pairs = max(weight, 1.0)
        correct, margin, chosen, rejected = stats
        return {
            "loss": loss_sum / pairs,
            "preference_accuracy": correct / pairs,
            "reward_margin": margin / pairs,
            "chosen_reward": chosen / pairs,
            "rejected_reward": rejected / pairs,
        }
