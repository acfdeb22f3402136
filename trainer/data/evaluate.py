"""Held-out evaluation (the ``eval:`` section): the objective's loss and metrics on held-out
MDS streams, with the model in eval mode and no gradients.

Every evaluation reads the same batches: the source's position is saved when it is built
and restored before each pass, and the loader does not shuffle. Losses are summed over the
batches of all ranks and divided by the total weight (targets, or pairs), as in training,
so the numbers do not depend on how the batches were split. Metric names get a ``val_``
prefix: ``val_loss`` and ``val_perplexity`` for pretraining and SFT, ``val_loss``,
``val_preference_accuracy`` (the reward accuracy) and ``val_reward_margin`` for DPO.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch
from torch import nn

from trainer.config import ConfigError, TrainerConfig
from trainer.data.sources import BatchSource, LoaderBatchSource
from trainer.objectives import Objective
from trainer.parallel.distributed import DistEnv, all_reduce_sum

__all__ = ["Evaluator", "build_eval_source"]


def build_eval_source(config: TrainerConfig, objective: Objective, env: DistEnv) -> BatchSource:
    """The held-out loader: the training loader's settings with ``eval.streams``, no
    shuffling, and ``eval.loader`` on top.

    Raises:
        ConfigError: the streams are missing or do not fit the objective's mode.
    """
    from dataforge.loader import LoaderConfig, build_dataloader
    from dataforge.typed_config import from_mapping

    raw = {k: v for k, v in config.data.loader.items() if k not in ("epoch_size",)}
    raw |= {"streams": list(config.eval.streams), "mode": objective.loader_mode, "shuffle": False}
    raw.setdefault("max_seq_len", config.model.max_seq_len)
    raw.setdefault("vocab_size", config.model.vocab_size)  # ids past the embeddings: one line
    if config.distributed.model_parallel:  # the dp group's tp ranks read the same batches
        raw |= {"rank": env.dp_rank, "world_size": env.dp}
    raw |= dict(config.eval.loader)
    loader_config = from_mapping(LoaderConfig, raw, "eval")
    try:
        return LoaderBatchSource(build_dataloader(loader_config))
    except (FileNotFoundError, ValueError) as exc:
        raise ConfigError(f"eval.streams: {exc}") from exc


class Evaluator:
    """Runs one evaluation pass over ``source`` on demand."""

    def __init__(
        self, source: BatchSource, objective: Objective, env: DistEnv, max_batches: int | None
    ) -> None:
        self.source, self.objective, self.env, self.max_batches = (
            source,
            objective,
            env,
            max_batches,
        )
        self.start = source.state_dict()

    @torch.no_grad()
    def __call__(
        self, model: nn.Module, autocast: Callable[[], contextlib.AbstractContextManager]
    ) -> dict[str, float]:
        """``val_*`` metrics of the held-out batches (a collective call under DDP/FSDP)."""
        self.source.load_state_dict(self.start)
        objective, device = self.objective, self.env.device
        sums = torch.zeros(2 + len(objective.stat_names), dtype=torch.float64, device=device)
        was_training = model.training
        model.eval()
        try:
            for i, batch in enumerate(self.source):
                if self.max_batches is not None and i >= self.max_batches:
                    break
                batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
                with autocast():
                    loss_sum, extra = objective.loss(model, batch, training=False)
                sums[0] += objective.weight(batch)
                sums[1:] += torch.cat([loss_sum.double().view(1), extra.to(sums)])
        finally:
            model.train(was_training)
        sums *= self.env.counts_losses  # one tp rank of each dp group counts its batches
        total = all_reduce_sum(sums, self.env).tolist()
        metrics = objective.metrics(total[1], total[2:], total[0])
        return {f"val_{k}": v for k, v in metrics.items()} | {"val_weight": total[0]}

    def close(self) -> None:
        if hasattr(self.source, "close"):
            self.source.close()
