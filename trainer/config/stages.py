"""Settings of the preference and RL stages: ``dpo`` and ``ppo``."""

from __future__ import annotations

import dataclasses
import math
from typing import Literal

from dataforge.typed_config import check_range

__all__ = ["DPOConfig", "PPOConfig"]


@dataclasses.dataclass(frozen=True)
class DPOConfig:
    beta: float = 0.1
    """DPO temperature: how far the policy may move from the reference."""
    reference: Literal["model", "precomputed"] = "model"
    """``model``: a frozen copy of the starting weights; ``precomputed``: batches carry
    ``ref_chosen_logps``/``ref_rejected_logps``."""

    def __post_init__(self) -> None:
        if self.beta <= 0:
            raise ValueError(f"dpo.beta must be > 0, got {self.beta}")


@dataclasses.dataclass(frozen=True)
class PPOConfig:
    """RLHF with PPO (``dataforge train ppo``): the policy starts from ``init_from`` (an SFT
    export), a frozen copy of it is the KL reference, a frozen reward model scores each
    response (see :mod:`trainer.ppo`)."""

    reward_model: str | None = None
    """Export of ``dataforge train reward`` (its ``score.weight`` head scores a response at
    its last token); required by the ppo stage."""
    value_init: Literal["policy", "reward"] = "policy"
    """Value model start: the policy's weights with a zero scalar head, or the reward model's
    weights and head."""
    prompts: str | None = None
    """JSONL file of prompts (``prompt_tokens``: ids ending with the assistant marker, or
    ``prompt``: text rendered with the tokenizer's chat layout); None: ``data.loader`` MDS
    shards (SFT or DPO format: the tokens before the first learned one)."""
    rollout_batch_size: int = 16
    """Prompts per PPO step (one rollout)."""
    mini_batch_size: int = 8
    """Rollouts per optimizer update; must divide ``rollout_batch_size``."""
    ppo_epochs: int = 4
    """Passes over each rollout batch (shuffled mini-batches)."""
    max_new_tokens: int = 32
    """Longest response generated."""
    max_prompt_len: int | None = None
    """Longer prompts are dropped (counted); None: ``model.max_seq_len - max_new_tokens``."""
    temperature: float = 1.0
    """Sampling temperature; the log-probs the losses and KL use are of the same tempered
    distribution."""
    top_k: int = 0
    """Sample among the k most likely tokens; 0: the whole vocabulary."""
    stop_token_ids: tuple[int, ...] | None = None
    """Generation ends at any of these ids (kept in the response); None: the
    ``eos_token_id`` of ``init_from``'s ``generation_config.json`` (``<eos>`` and the
    end-of-turn id for dataforge chat tokenizers)."""
    gamma: float = 1.0
    """Discount of GAE."""
    lam: float = 0.95
    """GAE's lambda (bias/variance trade-off of the advantages)."""
    clip_range: float = 0.2
    """Policy ratio clip: ratios outside [1 - c, 1 + c] give no gradient."""
    clip_range_value: float = 0.2
    """Value clip: new values more than this from the rollout's give no gradient."""
    vf_coef: float = 0.1
    """Weight of the value loss in the summed loss."""
    kl_coef: float = 0.05
    """Per-token KL reward ``-kl_coef * (log p - log p_ref)``; the initial coefficient
    when ``target_kl`` is set."""
    target_kl: float | None = None
    """Adaptive KL: the coefficient follows the rollout KL (summed over a response) toward
    this target (Ziegler et al. 2019); None: ``kl_coef`` stays fixed."""
    kl_horizon: int = 10000
    """Adaptive KL's horizon in rollouts: how fast the coefficient moves."""
    whiten_advantages: bool = True
    """Normalise advantages to mean 0, variance 1 over each rollout's response tokens."""
    whiten_rewards: bool = False
    """Scale the per-token rewards to unit variance before GAE (mean kept)."""
    missing_stop_penalty: float | None = None
    """Subtracted from the score of a response cut at ``max_new_tokens`` without a stop id;
    None: no penalty."""

    def __post_init__(self) -> None:
        if self.stop_token_ids is not None:
            object.__setattr__(self, "stop_token_ids", tuple(self.stop_token_ids))
        for name in ("rollout_batch_size", "mini_batch_size", "ppo_epochs", "max_new_tokens"):
            check_range(f"ppo.{name}", getattr(self, name), 1)
        check_range("ppo.kl_horizon", self.kl_horizon, 1)
        check_range("ppo.max_prompt_len", self.max_prompt_len, 1)
        check_range("ppo.top_k", self.top_k, 0)
        check_range("ppo.gamma", self.gamma, 0.0, 1.0)
        check_range("ppo.lam", self.lam, 0.0, 1.0)
        check_range("ppo.kl_coef", self.kl_coef, 0.0)
        for name in ("clip_range", "clip_range_value", "vf_coef", "temperature", "target_kl"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value > 0):
                raise ValueError(f"ppo.{name}={value!r}; valid range: > 0")
        if self.rollout_batch_size % self.mini_batch_size:
            raise ValueError(
                f"ppo.mini_batch_size {self.mini_batch_size} must divide "
                f"ppo.rollout_batch_size {self.rollout_batch_size}"
            )
