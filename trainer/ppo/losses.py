"""The formulas of PPO for language models, on (B, T) tensors of response tokens.

``mask`` marks a row's real response tokens (1) against the padding after its end (0).
They follow the standard RLHF PPO (Ziegler et al. 2019; Ouyang et al. 2022; TRL's
``PPOTrainer``): per-token KL rewards with the sequence's score on its last token,
GAE, whitened advantages, the clipped surrogate policy loss and the clipped value loss.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F

__all__ = [
    "AdaptiveKLController",
    "LossStats",
    "entropy_from_logits",
    "gae",
    "logprobs_from_logits",
    "masked_mean",
    "masked_var",
    "masked_whiten",
    "policy_loss",
    "token_rewards",
    "value_loss",
]


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``values`` where ``mask`` is 1."""
    return (values * mask).sum() / mask.sum().clamp(min=1)


def masked_var(values: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Variance of ``values`` where ``mask`` is 1 (Bessel-corrected when ``unbiased``)."""
    mean = masked_mean(values, mask)
    var = masked_mean((values - mean) ** 2, mask)
    if unbiased:
        count = mask.sum()
        var = var * count / (count - 1).clamp(min=1)
    return var


def masked_whiten(
    values: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True
) -> torch.Tensor:
    """``values`` scaled to unit variance over the masked entries, and moved to mean 0
    when ``shift_mean`` (else the mean is kept); masked-out entries are 0."""
    mean, var = masked_mean(values, mask), masked_var(values, mask)
    whitened = (values - mean) * torch.rsqrt(var + 1e-8)
    if not shift_mean:
        whitened = whitened + mean
    return whitened * mask


def logprobs_from_logits(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """(B, T, V) logits, (B, T) ids -> (B, T) log-probabilities of those ids (float32)."""
    logp = F.log_softmax(logits.float(), dim=-1)
    return logp.gather(-1, tokens.long().unsqueeze(-1)).squeeze(-1)


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """(B, T, V) -> (B, T) entropy of each position's distribution (nats)."""
    logits = logits.float()
    probs = F.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - (probs * logits).sum(-1)


def token_rewards(
    scores: torch.Tensor,
    logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor,
    mask: torch.Tensor,
    kl_coef: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token rewards: ``-kl_coef * (log p - log p_ref)`` at every response token plus
    each row's score at its last one. Returns (rewards, per-token KL), both masked."""
    kl = (logprobs - ref_logprobs) * mask
    rewards = -kl_coef * kl
    last = (mask.sum(-1).long() - 1).clamp(min=0)
    rows = torch.arange(len(scores), device=scores.device)
    rewards[rows, last] += scores
    return rewards * mask, kl


def gae(
    values: torch.Tensor, rewards: torch.Tensor, mask: torch.Tensor, gamma: float, lam: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over each row's response tokens.

    ``delta_t = r_t + gamma * V_{t+1} - V_t`` with ``V`` = 0 past a row's end, and
    ``A_t = delta_t + gamma * lam * A_{t+1}``. Returns (advantages, returns = A + V),
    both masked.
    """
    values, rewards = values * mask, rewards * mask
    advantages = torch.zeros_like(values)
    running = torch.zeros_like(values[:, 0])
    steps = values.shape[1]
    for t in reversed(range(steps)):
        next_value = values[:, t + 1] if t + 1 < steps else torch.zeros_like(running)
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        running = (delta + gamma * lam * running) * mask[:, t]
        advantages[:, t] = running
    return advantages, (advantages + values) * mask


@dataclasses.dataclass
class LossStats:
    """Sums over a micro-batch's response tokens (divide by the token count)."""

    loss_sum: torch.Tensor
    """Masked sum of the per-token loss (with gradients)."""
    clipped: torch.Tensor
    """Tokens whose clipped term was the one taken."""


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_range: float,
) -> LossStats:
    """Clipped surrogate: per token ``max(-A * r, -A * clip(r, 1 - c, 1 + c))`` with
    ``r = exp(log p - log p_old)``."""
    ratio = torch.exp(logprobs - old_logprobs)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_range, 1.0 + clip_range)
    losses = torch.maximum(unclipped, clipped)
    return LossStats((losses * mask).sum(), ((clipped > unclipped).float() * mask).sum())


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    clip_range_value: float,
) -> LossStats:
    """Clipped value loss: per token ``0.5 * max((V - R)^2, (V_clip - R)^2)`` with
    ``V_clip = clip(V, V_old - c, V_old + c)``."""
    clipped_values = old_values + torch.clamp(
        values - old_values, -clip_range_value, clip_range_value
    )
    unclipped = (values - returns) ** 2
    clipped = (clipped_values - returns) ** 2
    losses = 0.5 * torch.maximum(unclipped, clipped)
    return LossStats((losses * mask).sum(), ((clipped > unclipped).float() * mask).sum())


class AdaptiveKLController:
    """Ziegler et al. (2019)'s KL coefficient: after each rollout of ``n`` sequences,
    ``coef *= 1 + clip(kl / target - 1, -0.2, 0.2) * n / horizon``. Without a target the
    coefficient stays fixed."""

    def __init__(self, coef: float, target: float | None, horizon: int) -> None:
        self.coef, self.target, self.horizon = coef, target, horizon

    def update(self, kl: float, n: int) -> None:
        if self.target is None:
            return
        error = min(max(kl / self.target - 1.0, -0.2), 0.2)
        self.coef *= 1.0 + error * n / self.horizon
