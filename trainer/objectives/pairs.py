"""What DPO and the reward model share: batches of preference pairs.

A pair batch (loader mode ``dpo``) holds ``chosen_*`` and ``rejected_*`` rows of one width;
both objectives run them through the model in one forward, chosen rows first, and log
four sums per pair: correct orderings, margin, chosen and rejected reward.
"""

from __future__ import annotations

from typing import ClassVar

import torch

from trainer.objectives.base import Batch, Objective

__all__ = ["PairObjective"]


class PairObjective(Objective):
    """An objective over preference pairs (see the module docstring)."""

    loader_mode: ClassVar[str] = "dpo"
    row_prefixes = ("chosen_", "rejected_")
    stat_names = ("correct", "margin_sum", "chosen_reward_sum", "rejected_reward_sum")
    accuracy_name: ClassVar[str] = "accuracy"
    """The logged name of the share of pairs ordered correctly."""

    def weight(self, batch: Batch) -> int:
        return int(batch["chosen_input_ids"].shape[0])

    @staticmethod
    def stacked(batch: Batch, column: str) -> torch.Tensor:
        """``chosen_<column>`` rows, then ``rejected_<column>`` rows."""
        return torch.cat([batch[f"chosen_{column}"], batch[f"rejected_{column}"]])

    @staticmethod
    def pair_stats(
        correct: torch.Tensor, margin: torch.Tensor, chosen: torch.Tensor, rejected: torch.Tensor
    ) -> torch.Tensor:
        """The float64 vector of :attr:`stat_names` sums."""
        sums = [correct.sum(), margin.sum(), chosen.sum(), rejected.sum()]
        return torch.stack([s.detach().double() for s in sums])

    def metrics(self, loss_sum: float, stats: list[float], weight: float) -> dict[str, float]:
        pairs = max(weight, 1.0)
        correct, margin, chosen, rejected = stats
        return {
            "loss": loss_sum / pairs,
            self.accuracy_name: correct / pairs,
            "reward_margin": margin / pairs,
            "chosen_reward": chosen / pairs,
            "rejected_reward": rejected / pairs,
        }
