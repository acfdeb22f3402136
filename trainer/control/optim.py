"""The optimizer and learning-rate schedule: AdamW, linear warmup, cosine to ``min_lr``."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from trainer.config import OptimConfig

__all__ = ["build_optimizer", "lr_factor"]


def lr_factor(optim: OptimConfig, max_steps: int) -> Callable[[int], float]:
    """LambdaLR factor: linear warmup to ``lr``, then cosine down to ``min_lr``."""

    def factor(step: int) -> float:
        if optim.lr == 0:  # lr and min_lr are 0: every step's lr is 0 (weights stay put)
            return 1.0
        if step < optim.warmup_steps:
            return (step + 1) / optim.warmup_steps
        progress = min(1.0, (step - optim.warmup_steps) / max(1, max_steps - optim.warmup_steps))
        lr = optim.min_lr + (optim.lr - optim.min_lr) * 0.5 * (1 + math.cos(math.pi * progress))
        return lr / optim.lr

    return factor


def build_optimizer(
    model: nn.Module, optim: OptimConfig, device: torch.device, foreach: bool | None = None
) -> torch.optim.AdamW:
    """AdamW; weight decay on matrices only (not norms, biases or embeddings).
    ``foreach``: AdamW's own (None: its default)."""
    decay, no_decay = [], []
    for name, param in model.named_parameters():  # tied weights appear once
        if not param.requires_grad:
            continue
        is_matrix = param.dim() >= 2 and "embed" not in name
        (decay if is_matrix else no_decay).append(param)
    groups = [
        {"params": decay, "weight_decay": optim.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    fused = foreach is None and device.type == "cuda" and all(p.is_cuda for p in decay + no_decay)
    return torch.optim.AdamW(
        groups, lr=optim.lr, betas=optim.betas, eps=optim.eps, fused=fused, foreach=foreach
    )
