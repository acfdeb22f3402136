"""One PPO step on one screen: rollout, rewards, GAE, then ``ppo_epochs`` passes of
shuffled mini-batch updates of the policy and value model.

Losses are token means over a mini-batch's response tokens (summed over its
``train.grad_accum_steps`` micro-batches, then divided by the mini-batch's tokens), so an
update does not depend on how the mini-batch is split.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math

import torch
from torch import nn

from trainer.config import TrainerConfig
from trainer.ppo.losses import (
    AdaptiveKLController,
    gae,
    logprobs_from_logits,
    masked_mean,
    masked_whiten,
    policy_loss,
    token_rewards,
    value_loss,
)
from trainer.ppo.rollout import PolicyAndValue, Rollout, generate, response_logits, score_rollout

__all__ = ["PPORun", "ppo_step"]


@dataclasses.dataclass
class PPORun:
    """What a step needs; built once by :func:`trainer.ppo.loop.train_ppo`."""

    config: TrainerConfig
    model: PolicyAndValue
    reference: nn.Module
    reward: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    kl: AdaptiveKLController
    stop_ids: tuple[int, ...]
    sampling: torch.Generator
    """Draws the responses; its own stream (a data loader's iterator also draws from the
    global RNG), saved in checkpoints."""
    shuffling: torch.Generator
    """Orders the mini-batches (CPU)."""
    pad_id: int = 0

    def autocast(self) -> contextlib.AbstractContextManager:
        precision = self.config.train.precision
        device = next(self.model.parameters()).device.type
        if precision == "fp32":
            return contextlib.nullcontext()
        dtype = torch.bfloat16 if precision == "bf16" else torch.float16
        return torch.autocast(device, dtype=dtype)


def _advantages(run: PPORun, rollout: Rollout) -> tuple[torch.Tensor, ...]:
    """Per-token rewards (KL reward + score), then GAE advantages and returns."""
    ppo = run.config.ppo
    scores = rollout.scores
    if ppo.missing_stop_penalty is not None:
        scores = scores - ppo.missing_stop_penalty * (~rollout.stopped).float()
    rewards, kl = token_rewards(
        scores, rollout.logprobs, rollout.ref_logprobs, rollout.mask, run.kl.coef
    )
    if ppo.whiten_rewards:
        rewards = masked_whiten(rewards, rollout.mask, shift_mean=False)
    advantages, returns = gae(rollout.values, rewards, rollout.mask, ppo.gamma, ppo.lam)
    if ppo.whiten_advantages:
        advantages = masked_whiten(advantages, rollout.mask)
    return advantages, returns, rewards, kl


def _update(
    run: PPORun,
    rollout: Rollout,
    rows: torch.Tensor,
    advantages: torch.Tensor,
    returns: torch.Tensor,
) -> torch.Tensor:
    """One optimizer update on mini-batch ``rows``; returns its sums (policy loss, value
    loss, clipped, value clipped, approx KL, tokens) and its gradient norm."""
    ppo, model = run.config.ppo, run.model
    tokens = rollout.mask[rows].sum().clamp(min=1)
    sums = torch.zeros(6, dtype=torch.float64)
    for micro in rows.chunk(run.config.train.grad_accum_steps):
        ids, positions, cu = rollout.layout(micro)
        mask, width = rollout.mask[micro], rollout.prompt_width
        with run.autocast():
            logits, values = model(ids, positions, cu)
        logits = response_logits(logits, width).float() / ppo.temperature
        values = response_logits(values, width).float()
        logprobs = logprobs_from_logits(logits, rollout.responses[micro])
        old = rollout.logprobs[micro]
        pg = policy_loss(logprobs, old, advantages[micro], mask, ppo.clip_range)
        vf = value_loss(values, rollout.values[micro], returns[micro], mask, ppo.clip_range_value)
        ((pg.loss_sum + ppo.vf_coef * vf.loss_sum) / tokens).backward()
        approx_kl = 0.5 * (((logprobs - old) ** 2) * mask).sum()
        parts = [pg.loss_sum, vf.loss_sum, pg.clipped, vf.clipped, approx_kl, mask.sum()]
        sums += torch.stack([p.detach().double().cpu() for p in parts])
    max_norm = run.config.optim.max_grad_norm or math.inf
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    if torch.isfinite(grad_norm):
        run.optimizer.step()
    run.optimizer.zero_grad(set_to_none=True)
    return torch.cat([sums, grad_norm.detach().double().cpu().view(1)])


def ppo_step(run: PPORun, prompts: list[list[int]]) -> dict[str, float]:
    """Roll out ``prompts``, then update the policy and value model; the step's metrics."""
    ppo, model = run.config.ppo, run.model
    model.eval()  # no dropout in sampling or scoring
    rollout = generate(
        model.policy, prompts, ppo.max_new_tokens, run.stop_ids, ppo.temperature, ppo.top_k,
        run.pad_id, run.autocast, run.sampling,
    )  # fmt: skip
    score_rollout(
        rollout, model.policy, run.reference, model.value, run.reward, ppo.temperature,
        run.autocast,
    )  # fmt: skip
    kl_coef = run.kl.coef
    advantages, returns, _, kl = _advantages(run, rollout)
    model.train()
    lr = run.optimizer.param_groups[0]["lr"]
    totals, updates, bad = torch.zeros(7, dtype=torch.float64), 0, 0
    for _ in range(ppo.ppo_epochs):
        order = torch.randperm(len(prompts), generator=run.shuffling)
        for rows in order.split(ppo.mini_batch_size):
            sums = _update(run, rollout, rows.to(rollout.mask.device), advantages, returns)
            bad += 0 if math.isfinite(sums[6]) else 1
            totals, updates = totals + sums.nan_to_num(), updates + 1
    run.scheduler.step()
    mask = rollout.mask
    seq_kl = kl.sum(1)
    run.kl.update(float(seq_kl.mean()), len(prompts))
    tokens = float(totals[5])
    pg, vf, clipped, vf_clipped, approx_kl = (float(v) / tokens for v in totals[:5])
    return {
        "loss": pg + ppo.vf_coef * vf,
        "reward": float(rollout.scores.mean()),
        "reward_std": float(rollout.scores.std()) if len(prompts) > 1 else 0.0,
        "kl": float(seq_kl.mean()),
        "kl_coef": kl_coef,
        "non_score_reward": float((-kl_coef * seq_kl).mean()),
        "entropy": float(masked_mean(rollout.entropy, mask)),
        "policy_loss": pg,
        "value_loss": vf,
        "clip_fraction": clipped,
        "value_clip_fraction": vf_clipped,
        "approx_kl": approx_kl,
        "response_length": float(mask.sum(1).mean()),
        "stopped_fraction": float(rollout.stopped.float().mean()),
        "advantage_mean": float(masked_mean(advantages, mask)),
        "return_mean": float(masked_mean(returns, mask)),
        "value_mean": float(masked_mean(rollout.values, mask)),
        "lr": lr,
        "grad_norm": float(totals[6]) / max(1, updates - bad),
        "skipped_updates": float(bad),
        "tokens": float(mask.sum()),
    }
