"""Causal LM objectives: pretraining and completion-only SFT.

Both are next-token cross-entropy over the loader's already-shifted labels; SFT batches
carry -100 on prompt tokens, so the same loss covers completion-only SFT. They differ only
in the loader mode that feeds them.
"""

from __future__ import annotations

import math
from typing import ClassVar

import torch
from torch import nn

from trainer.objectives.base import Batch, Objective
from trainer.objectives.losses import causal_lm_loss_sum, count_targets

__all__ = ["CausalLM", "Pretrain", "SFT"]


class CausalLM(Objective):
    """Mean next-token cross-entropy over the targets of a step."""

    loader_mode: ClassVar[str] = "pretrain"
    pipeline_ready: ClassVar[bool] = True

    def __init__(self, label_smoothing: float = 0.0) -> None:
        self.label_smoothing = label_smoothing

    def weight(self, batch: Batch) -> int:
        return int(count_targets(batch["labels"]))

    def loss(
        self, model: nn.Module, batch: Batch, training: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor]:
        logits = model(batch["input_ids"], batch.get("position_ids"), batch.get("cu_seqlens"))
        smoothing = self.label_smoothing if training else 0.0
        loss = causal_lm_loss_sum(logits, batch["labels"], smoothing)
        return loss, torch.zeros(0, dtype=torch.float64)

    def pipeline_loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return causal_lm_loss_sum(logits, labels, self.label_smoothing)

    def metrics(self, loss_sum: float, stats: list[float], weight: float) -> dict[str, float]:
        loss = loss_sum / max(weight, 1.0)
        # exp overflows past ~709; such a loss is a diverged run, report inf.
        return {"loss": loss, "perplexity": math.exp(loss) if loss < 700 else math.inf}


class Pretrain(CausalLM):
    """Every token of every document is a target (``LoaderConfig(mode="pretrain")``)."""

    loader_mode = "pretrain"
    synthetic_data = True


class SFT(CausalLM):
    """Only completion tokens are targets (``LoaderConfig(mode="sft")``, ``loss_mask``)."""

    loader_mode = "sft"
