"""Loss functions: causal LM (pretrain and completion-only SFT) and DPO.

Labels follow the loader's convention (``dataforge.loader.collate``): they are already
shifted, ``labels[:, t]`` is the target of the logits at position ``t`` (the next input
token), and ``-100`` marks positions with no target: padding, SFT prompts, and the last
token of each document (so no token is predicted across a packed sequence boundary).

Losses are returned as *sums* with their counts, so the loop can divide by the number of
targets in the whole optimizer step (all micro-batches, all ranks) and get the same
gradient whatever the split.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F

__all__ = [
    "IGNORE_INDEX",
    "DPOStats",
    "causal_lm_loss_sum",
    "count_targets",
    "dpo_loss",
    "sequence_logps",
]

IGNORE_INDEX = -100


def count_targets(labels: torch.Tensor) -> torch.Tensor:
    """Number of predicted tokens in a batch (labels that are not -100)."""
    return (labels != IGNORE_INDEX).sum()


def causal_lm_loss_sum(
    logits: torch.Tensor, labels: torch.Tensor, label_smoothing: float = 0.0
) -> torch.Tensor:
    """Summed next-token cross-entropy over the targets that are not -100 (float32).

    Completion-only SFT is this loss on labels whose prompt tokens are -100.
    """
    vocab = logits.size(-1)
    return F.cross_entropy(
        logits.reshape(-1, vocab).float(),
        labels.reshape(-1),
        ignore_index=IGNORE_INDEX,
        label_smoothing=label_smoothing,
        reduction="sum",
    )


def sequence_logps(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Sum of log p(target) over each row's targets that are not -100: shape (B,)."""
    mask = labels != IGNORE_INDEX
    logps = torch.log_softmax(logits.float(), dim=-1)
    picked = logps.gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return (picked * mask).sum(dim=-1)


@dataclasses.dataclass
class DPOStats:
    """Per-pair DPO outputs; ``losses`` carries gradients, the rest is detached."""

    losses: torch.Tensor
    chosen_rewards: torch.Tensor
    rejected_rewards: torch.Tensor

    @property
    def reward_margins(self) -> torch.Tensor:
        return self.chosen_rewards - self.rejected_rewards

    @property
    def correct(self) -> torch.Tensor:
        """1.0 where the implicit reward prefers the chosen response."""
        return (self.reward_margins > 0).float()


def dpo_loss(
    policy_chosen: torch.Tensor,
    policy_rejected: torch.Tensor,
    ref_chosen: torch.Tensor,
    ref_rejected: torch.Tensor,
    beta: float = 0.1,
) -> DPOStats:
    """Sigmoid DPO loss (Rafailov et al. 2023) per pair from sequence log-probs.

    loss = -log sigmoid(beta * ((pi_c - ref_c) - (pi_r - ref_r))); the implicit rewards
    are beta * (pi - ref).
    """
    chosen = policy_chosen - ref_chosen
    rejected = policy_rejected - ref_rejected
    losses = -F.logsigmoid(beta * (chosen - rejected))
    return DPOStats(
        losses=losses,
        chosen_rewards=beta * chosen.detach(),
        rejected_rewards=beta * rejected.detach(),
    )
