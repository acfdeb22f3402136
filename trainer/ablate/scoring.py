"""Held-out loss of a checkpoint, batch by batch, and bootstrap intervals over the batches.

The trainer's own pieces do the work: the model class, the pretraining objective's loss,
and the trainer's held-out loader (``build_eval_source``: no shuffling, so every model of
an ablation sees the same batches in the same order). Keeping the per-batch sums, not only
their total, is what allows an interval: the batches are resampled with replacement, and
because they are the same batches for every variant, a difference between two variants is
resampled pairwise.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import torch

from trainer.config import TrainerConfig, config_from_mapping
from trainer.data.evaluate import build_eval_source
from trainer.model.transformer import Transformer
from trainer.objectives import build_objective
from trainer.parallel.distributed import DistEnv

__all__ = [
    "BatchLosses",
    "bootstrap_difference",
    "bootstrap_interval",
    "checkpoint_config",
    "perplexity",
    "score_checkpoint",
]


@dataclasses.dataclass
class BatchLosses:
    """Summed token losses (nats) and target counts of each evaluation batch."""

    sums: list[float]
    weights: list[int]

    @property
    def loss(self) -> float:
        return sum(self.sums) / max(sum(self.weights), 1)

    def to_plain(self) -> dict[str, list]:
        return {"sums": self.sums, "weights": self.weights}


def checkpoint_config(checkpoint: Path) -> TrainerConfig:
    """The resolved trainer config a checkpoint was written with."""
    state = torch.load(checkpoint / "train_state.pt", mmap=True, weights_only=True)
    return config_from_mapping(json.loads(state["config"]), f"{checkpoint}/train_state.pt")


@torch.no_grad()
def score_checkpoint(checkpoint: Path, streams: str, max_batches: int | None) -> BatchLosses:
    """Per-batch held-out losses of the model saved in ``checkpoint`` on the MDS folder
    ``streams``, read with the checkpoint's own loader settings."""
    state = torch.load(checkpoint / "train_state.pt", mmap=True, weights_only=True)
    config = config_from_mapping(json.loads(state["config"]), f"{checkpoint}/train_state.pt")
    config = dataclasses.replace(
        config, eval=dataclasses.replace(config.eval, streams=({"path": streams},))
    )
    model = Transformer(config.model)
    model.load_state_dict(state["model"])
    model.eval()
    objective = build_objective("pretrain", config)
    env = DistEnv(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"))
    source = build_eval_source(config, objective, env)
    sums, weights = [], []
    try:
        for i, batch in enumerate(source):
            if max_batches is not None and i >= max_batches:
                break
            loss_sum, _ = objective.loss(model, batch, training=False)
            sums.append(float(loss_sum))
            weights.append(int(objective.weight(batch)))
    finally:
        if hasattr(source, "close"):
            source.close()
    if not sums:
        raise ValueError(f"{streams}: the evaluation set gave no batches")
    return BatchLosses(sums, weights)


def _mean_over_seeds(runs: list[BatchLosses]) -> tuple[np.ndarray, np.ndarray]:
    """Batch sums averaged over seeds (every seed saw the same batches) and the weights."""
    sums = np.mean([np.asarray(r.sums, np.float64) for r in runs], axis=0)
    return sums, np.asarray(runs[0].weights, np.float64)


def _resampled_losses(runs: list[BatchLosses], picks: np.ndarray) -> np.ndarray:
    sums, weights = _mean_over_seeds(runs)
    return sums[picks].sum(axis=1) / np.maximum(weights[picks].sum(axis=1), 1.0)


def _picks(n_batches: int, resamples: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, n_batches, size=(resamples, n_batches))


def bootstrap_interval(runs: list[BatchLosses], resamples: int, seed: int = 0) -> list[float]:
    """95% percentile interval of the loss (mean over seeds) over resampled batches."""
    picks = _picks(len(runs[0].sums), resamples, seed)
    lo, hi = np.percentile(_resampled_losses(runs, picks), [2.5, 97.5])
    return [float(lo), float(hi)]


def bootstrap_difference(
    a: list[BatchLosses], b: list[BatchLosses], resamples: int, seed: int = 0
) -> list[float]:
    """95% interval of loss(a) - loss(b), the same batches resampled for both."""
    if len(a[0].sums) != len(b[0].sums):
        raise ValueError("the two variants were scored on different numbers of batches")
    picks = _picks(len(a[0].sums), resamples, seed)
    diff = _resampled_losses(a, picks) - _resampled_losses(b, picks)
    lo, hi = np.percentile(diff, [2.5, 97.5])
    return [float(lo), float(hi)]


def perplexity(loss: float) -> float:
    """exp(loss); inf for a diverged loss (exp overflows past ~709)."""
    return math.exp(loss) if loss < 700 else math.inf
