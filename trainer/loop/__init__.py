"""The training loop shared by pretrain, sft and dpo: :func:`train`.

:func:`~trainer.loop.step.train_step` is the whole optimizer step on one screen;
:func:`~trainer.loop.run.train` the loop around it. Losses are sums divided by
the number of targets (LM) or pairs (DPO) in the *global* step, all micro-batches on all
ranks, so the update is the same however the batch is split across ranks and
micro-batches (DDP averages gradients over ranks, hence the ``world_size`` factor).
What is computed per batch belongs to the stage's objective (:mod:`trainer.objectives`);
held-out evaluation to :mod:`trainer.data.evaluate`.
"""

from __future__ import annotations

from trainer.control.optim import build_optimizer, lr_factor
from trainer.loop.run import TrainingError, TrainResult, train
from trainer.loop.step import train_step

__all__ = ["TrainingError", "TrainResult", "build_optimizer", "lr_factor", "train", "train_step"]
