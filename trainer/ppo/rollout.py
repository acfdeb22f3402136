"""Rollouts: sample responses with the policy, then score them with every model.

Rows are left-padded prompts followed by the response (and padding after a row's stop
id), so every response starts at the same column ``prompt_width``. A row's positions
count from its first prompt token and each left pad is a segment of its own, so the real
tokens attend only to each other: the models see each sequence as the reward and SFT
stages did, from position 0, whatever the padding.

Column ``c``'s logits predict token ``c + 1``: the log-prob of response token ``i`` and
the value of the state before it are read at column ``prompt_width - 1 + i``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import torch
from torch import nn

from trainer.ppo.losses import entropy_from_logits, logprobs_from_logits

__all__ = ["PolicyAndValue", "Rollout", "generate", "score_rollout", "sequence_layout"]

Autocast = Callable[[], object]


class PolicyAndValue(nn.Module):
    """The trained pair in one module (one optimizer, one state dict: ``policy.*`` and
    ``value.*``); ``forward`` gives the policy's logits and the value head's outputs."""

    def __init__(self, policy: nn.Module, value: nn.Module) -> None:
        super().__init__()
        self.policy, self.value = policy, value

    def forward(
        self, ids: torch.Tensor, positions: torch.Tensor, cu_seqlens: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.policy(ids, positions, cu_seqlens)
        return logits, self.value(ids, positions, cu_seqlens, head="score")


def sequence_layout(pad_lens: torch.Tensor, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Position ids (B, width) and ``cu_seqlens`` of left-padded rows: each pad is its own
    segment at position 0; the real tokens count from 0."""
    rows = len(pad_lens)
    cols = torch.arange(width, device=pad_lens.device)
    positions = (cols[None, :] - pad_lens[:, None]).clamp(min=0)
    starts = positions == 0
    bounds = torch.nonzero(starts.flatten()).flatten()
    total = bounds.new_tensor([rows * width])
    return positions, torch.cat([bounds, total]).to(torch.int32)


@dataclasses.dataclass
class Rollout:
    """One batch of sampled responses and what the frozen and trained models make of it."""

    sequences: torch.Tensor
    """(B, P + R) left-padded prompts, then responses."""
    pad_lens: torch.Tensor
    """(B,) left pads of each row."""
    prompt_width: int
    mask: torch.Tensor
    """(B, R) float: 1 on each response's tokens (its stop id included)."""
    stopped: torch.Tensor
    """(B,) bool: the response ended with a stop id (not cut at ``max_new_tokens``)."""
    logprobs: torch.Tensor | None = None
    ref_logprobs: torch.Tensor | None = None
    values: torch.Tensor | None = None
    scores: torch.Tensor | None = None
    entropy: torch.Tensor | None = None

    @property
    def responses(self) -> torch.Tensor:
        return self.sequences[:, self.prompt_width :]

    def layout(self, rows: torch.Tensor | slice = slice(None)) -> tuple[torch.Tensor, ...]:
        """(ids, positions, cu_seqlens) of the chosen rows."""
        ids = self.sequences[rows]
        return (ids, *sequence_layout(self.pad_lens[rows], ids.shape[1]))


def _sample(
    logits: torch.Tensor, temperature: float, top_k: int, generator: torch.Generator | None
) -> torch.Tensor:
    logits = logits.float() / temperature
    if 0 < top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(1)


@torch.no_grad()
def generate(
    policy: nn.Module,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int,
    stop_ids: Sequence[int],
    temperature: float = 1.0,
    top_k: int = 0,
    pad_id: int = 0,
    autocast: Autocast | None = None,
    generator: torch.Generator | None = None,
) -> Rollout:
    """Sample a response to each prompt (from ``generator``, else the global torch RNG)
    until a stop id or ``max_new_tokens``; the columns after a row's stop hold ``pad_id``."""
    device = next(policy.parameters()).device
    width = max(len(p) for p in prompts)
    pad_lens = torch.tensor([width - len(p) for p in prompts], device=device)
    rows = [[pad_id] * (width - len(p)) + list(p) for p in prompts]
    sequences = torch.tensor(rows, dtype=torch.long, device=device)
    stops = torch.tensor(list(stop_ids), dtype=torch.long, device=device)
    done = torch.zeros(len(prompts), dtype=torch.bool, device=device)
    for _ in range(max_new_tokens):
        positions, cu = sequence_layout(pad_lens, sequences.shape[1])
        with autocast() if autocast else torch.autocast("cpu", enabled=False):
            logits = policy(sequences, positions, cu)[:, -1]
        token = torch.where(done, pad_id, _sample(logits, temperature, top_k, generator))
        sequences = torch.cat([sequences, token[:, None]], dim=1)
        done = done | (torch.isin(token, stops) & ~done)
        if bool(done.all()):
            break
    responses = sequences[:, width:]
    is_stop = torch.isin(responses, stops)
    after_stop = (is_stop.long().cumsum(1) - is_stop.long()) > 0
    return Rollout(sequences, pad_lens, width, (~after_stop).float(), done)


def response_logits(out: torch.Tensor, prompt_width: int) -> torch.Tensor:
    """The columns of a full-row output that score the response tokens."""
    return out[:, prompt_width - 1 : -1]


@torch.no_grad()
def score_rollout(
    rollout: Rollout,
    policy: nn.Module,
    reference: nn.Module,
    value: nn.Module,
    reward: nn.Module,
    temperature: float,
    autocast: Autocast,
) -> Rollout:
    """Fill in the rollout's log-probs (policy, reference), values, entropy and scores
    (the reward model's head at each row's last response token)."""
    ids, positions, cu = rollout.layout()
    width, responses, mask = rollout.prompt_width, rollout.responses, rollout.mask
    with autocast():
        logits = response_logits(policy(ids, positions, cu), width).float() / temperature
        ref_logits = response_logits(reference(ids, positions, cu), width).float() / temperature
        values = response_logits(value(ids, positions, cu, head="score"), width).float()
        scores = reward(ids, positions, cu, head="score").float()
    rollout.logprobs = logprobs_from_logits(logits, responses) * mask
    rollout.ref_logprobs = logprobs_from_logits(ref_logits, responses) * mask
    rollout.entropy = entropy_from_logits(logits) * mask
    rollout.values = values * mask
    last = width + mask.sum(1).long() - 1
    rollout.scores = scores.gather(1, last[:, None]).squeeze(1)
    return rollout
