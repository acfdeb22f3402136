"""One optimizer step on one screen: :func:`train_step` over a :class:`Run`.

Losses are sums divided by the number of targets (LM) or pairs (DPO) in the *global* step,
all micro-batches on all ranks, so the update is the same however the batch is split across
ranks and micro-batches (DDP averages gradients over ranks, hence the ``world_size`` factor).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math

import torch
from torch import nn

from trainer.config import TrainerConfig
from trainer.model.transformer import flops_per_token
from trainer.objectives import Objective
from trainer.parallel.comm_timing import AllReduceTimer
from trainer.parallel.distributed import (
    DTYPES,
    DistEnv,
    all_reduce_sum,
    clip_grad_norm,
    grad_sync,
)
from trainer.parallel.pipeline import Pipeline

__all__ = ["Run", "batch_tokens", "train_step"]


@dataclasses.dataclass
class Run:
    """What a step needs; built once by :func:`train`."""

    config: TrainerConfig
    stage: str
    objective: Objective
    env: DistEnv
    model: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    scaler: torch.amp.GradScaler
    comm_timer: AllReduceTimer | None = None
    """Times DDP's gradient all-reduce (:mod:`trainer.parallel.comm_timing`); None otherwise."""
    pipeline: Pipeline | None = None
    """Runs forward and backward through this rank's stage when ``distributed.pp`` > 1."""
    summary: str = ""
    """The start-up line (of the whole model, before any split)."""

    def autocast(self) -> contextlib.AbstractContextManager:
        precision = self.config.train.precision
        if precision == "fp32":
            return contextlib.nullcontext()
        return torch.autocast(self.env.device.type, dtype=DTYPES[precision])


def batch_tokens(batch: dict) -> int:
    """Real (unpadded) tokens in a batch, DPO rows included."""
    masks = [v for k, v in batch.items() if k.endswith("attention_mask")]
    if not masks:
        return sum(v.numel() for k, v in batch.items() if k.endswith("input_ids"))
    return int(sum(int(m.sum()) for m in masks))


def _flops(run: Run, batch: dict) -> float:
    """Model FLOPs of one micro-batch: real tokens x per-token FLOPs at the batch's width
    (with a reference model, DPO adds its forward: 2N of the 6N)."""
    total = 0.0
    for prefix in run.objective.row_prefixes:
        ids, mask = batch[prefix + "input_ids"], batch.get(prefix + "attention_mask")
        tokens = ids.numel() if mask is None else int(mask.sum())
        total += tokens * flops_per_token(run.config.model, ids.shape[1])
    return total * run.objective.forward_flops_factor


def train_step(run: Run, batches: list[dict]) -> dict[str, float]:
    """One optimizer step over ``batches`` (this rank's micro-batches).

    Returns the step's metrics (global over ranks); ``applied`` is 0.0 when the update was
    skipped (non-finite loss or gradients, or an fp16 overflow).
    """
    model, opt, scaler, env, objective = (
        run.model,
        run.optimizer,
        run.scaler,
        run.env,
        run.objective,
    )
    # The ranks of a dp group (its tp ranks and pipeline stages) hold the same batches:
    # one of them counts them, one holds the loss.
    weight = sum(objective.weight(b) for b in batches) if env.counts_batches else 0
    weights = torch.tensor([weight], dtype=torch.float64)
    total_weight = max(1.0, float(all_reduce_sum(weights.to(env.device), env)))
    scale = env.dp / total_weight  # DDP and FSDP average the gradients over the dp ranks
    # tokens, model FLOPs, loss sum, then the objective's own sums; summed on the device
    stats = torch.zeros(3 + len(objective.stat_names), dtype=torch.float64, device=env.device)
    on_device = [{k: v.to(env.device, non_blocking=True) for k, v in b.items()} for b in batches]
    for i, batch in enumerate(batches):
        stats[0] += batch_tokens(batch)
        stats[1] += _flops(run, batch)
        if run.pipeline is not None:
            continue
        with grad_sync(model, i == len(batches) - 1), run.autocast():
            loss_sum, extra = objective.loss(model, on_device[i])
        scaler.scale(loss_sum * scale).backward()
        stats[2:] += torch.cat([loss_sum.detach().double().view(1), extra.to(stats)])
    if run.pipeline is not None:
        stats[2] += run.pipeline.step(on_device, scale, run.autocast)
    stats[:2] *= env.counts_batches
    stats[2:] *= env.counts_losses
    stats = all_reduce_sum(stats, env).tolist()
    metrics = objective.metrics(stats[2], stats[3:], total_weight)
    scaler.unscale_(opt)
    max_norm = run.config.optim.max_grad_norm or math.inf
    grad_norm = clip_grad_norm(model, max_norm, env)
    loss = metrics.pop("loss")
    fp16 = run.config.train.precision == "fp16"
    bad = not math.isfinite(loss) or (not fp16 and not math.isfinite(grad_norm))
    scale = scaler.get_scale()
    if not bad:
        scaler.step(opt)  # with fp16, skips the update by itself if gradients overflowed
    scaler.update()
    applied = not bad and (not fp16 or scaler.get_scale() >= scale)
    opt.zero_grad(set_to_none=True)
    lr = opt.param_groups[0]["lr"]
    if applied:
        run.scheduler.step()
    out = {"loss": loss, "lr": lr, "grad_norm": grad_norm, "applied": float(applied)}
    out |= {"bad": float(bad), "tokens": stats[0], "flops": stats[1]}
    if fp16:
        out["loss_scale"] = scale
    if run.comm_timer is not None:
        out["nccl_all_reduce_time"] = run.comm_timer.take()
    return out | metrics
