"""The objective interface: what a training stage computes from a batch.

An objective is one object with a small surface the loop and the data module use, instead
of ``stage == ...`` branches (torchtitan's loss components play the same role):

* ``loader_mode``: which ``dataforge.loader`` mode feeds it (``LoaderConfig.mode``);
* ``weight(batch)``: what its loss is averaged over (targets, or pairs);
* ``loss(model, batch)``: the summed loss of a micro-batch plus its extra statistics, a
  float64 vector named by ``stat_names`` (summed over micro-batches and ranks by the loop);
* ``metrics(loss_sum, stats, weight)``: the logged numbers of a step or an evaluation.

A new objective is one module with a subclass, one entry in
:data:`trainer.objectives.STAGES`, and its test.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import ClassVar

import torch
from torch import nn

__all__ = ["Objective"]

Batch = dict[str, torch.Tensor]


class Objective(abc.ABC):
    """One training objective (see the module docstring)."""

    loader_mode: ClassVar[str]
    """``LoaderConfig.mode`` of the batches this objective reads."""
    row_prefixes: ClassVar[tuple[str, ...]] = ("",)
    """Key prefixes of the token rows in a batch (DPO: ``chosen_`` and ``rejected_``)."""
    stat_names: ClassVar[tuple[str, ...]] = ()
    """Names of the extra sums :meth:`loss` returns next to the loss."""
    synthetic_data: ClassVar[bool] = False
    """Whether random-token LM batches (``data.source: synthetic``) fit this objective."""
    pipeline_ready: ClassVar[bool] = False
    """Whether :meth:`pipeline_loss` gives this objective's loss from the last pipeline
    stage's logits and the labels alone (``distributed.pp`` > 1 needs it)."""

    def prepare(self, model: nn.Module, wrap: Callable[[nn.Module], nn.Module]) -> None:
        """Called once with the unwrapped starting model, before training wraps it;
        ``wrap`` places a frozen copy like the trained model (DDP/FSDP, device).
        Objectives without frozen state keep nothing."""
        del model, wrap

    @property
    def forward_flops_factor(self) -> float:
        """Model FLOPs per token relative to one training pass (a frozen reference adds a
        forward: 2N of the 6N)."""
        return 1.0

    @abc.abstractmethod
    def weight(self, batch: Batch) -> int:
        """What the loss of ``batch`` is averaged over."""

    @abc.abstractmethod
    def loss(
        self, model: nn.Module, batch: Batch, training: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Summed loss (with gradients when training) and a float64 CPU-or-device vector of
        ``len(stat_names)`` extra sums. ``training=False`` gives the plain evaluation loss
        (no label smoothing)."""

    def pipeline_loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Summed training loss of one micro-batch from its logits (pipeline stages)."""
        raise NotImplementedError(f"{type(self).__name__} does not run in a pipeline")

    @abc.abstractmethod
    def metrics(self, loss_sum: float, stats: list[float], weight: float) -> dict[str, float]:
        """Logged metrics from the sums of one step or one evaluation pass."""
