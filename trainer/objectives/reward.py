"""Reward model: a scalar head on the causal model, Bradley-Terry loss on preference pairs.

Reads the same ``chosen_*``/``rejected_*`` batches as DPO (loader mode ``dpo``). The model
gets a zero-initialised ``score`` head (:meth:`trainer.model.transformer.Transformer.add_score_head`);
a sequence's reward is the head's value at its last real token, and the loss of a pair is
``-logsigmoid(r_chosen - r_rejected)`` (log 2 at the start, when every reward is 0). The
LM head gets no gradient and stays frozen unless it is tied to the embedding. The head is
part of the model's state dict, so checkpoints carry it and exports write it as
``score.weight`` beside the LM weights.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from trainer.objectives.base import Batch
from trainer.objectives.pairs import PairObjective

__all__ = ["Reward", "last_token_scores"]


def last_token_scores(scores: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """(B, T) per-position scores -> (B,) the score at each right-padded row's last token."""
    last = attention_mask.sum(-1).clamp(min=1) - 1
    return scores.gather(1, last[:, None].long()).squeeze(1)


class Reward(PairObjective):
    """Mean Bradley-Terry loss over the pairs of a step; logs pairwise accuracy."""

    def prepare(self, model: nn.Module, wrap: Callable[[nn.Module], nn.Module]) -> None:
        del wrap
        if not hasattr(model, "score"):
            model.add_score_head()
        if not model.config.tie_embeddings:  # unused: DDP must not wait for its gradient
            model.lm_head.requires_grad_(False)

    def loss(
        self, model: nn.Module, batch: Batch, training: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor]:
        ids, pos = self.stacked(batch, "input_ids"), self.stacked(batch, "position_ids")
        mask = self.stacked(batch, "attention_mask")
        rewards = last_token_scores(model(ids, pos, None, head="score"), mask).float()
        chosen, rejected = rewards.chunk(2)
        margin = chosen - rejected
        losses = -F.logsigmoid(margin)
        return losses.sum(), self.pair_stats(margin > 0, margin, chosen, rejected)
