"""The training loop shared by pretrain, sft and dpo: :func:`train`.

:func:`train_step` is the whole optimizer step on one screen. Losses are sums divided by
the number of targets (LM) or pairs (DPO) in the *global* step, all micro-batches on all
ranks, so the update is the same however the batch is split across ranks and
micro-batches (DDP averages gradients over ranks, hence the ``world_size`` factor).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import math
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
from torch import nn

from trainer.checkpoint import Checkpointer, export_weights, load_exported
from trainer.config import STAGES, ConfigError, OptimConfig, TrainerConfig, resolve_vocab, to_plain
from trainer.console import Console
from trainer.data import BatchSource, build_batch_source
from trainer.metrics import MetricsWriter, device_peak_flops, memory_stats
from trainer.model import Transformer, flops_per_token
from trainer.objectives import causal_lm_loss_sum, count_targets, dpo_loss, sequence_logps
from trainer.parallel import (
    DTYPES,
    DistEnv,
    all_reduce_sum,
    grad_sync,
    init_distributed,
    parallelize,
)
from trainer.prometheus import live_exporter

__all__ = ["TrainingError", "TrainResult", "build_optimizer", "lr_factor", "train", "train_step"]


class TrainingError(RuntimeError):
    """The run cannot go on (e.g. too many consecutive non-finite steps)."""


@dataclasses.dataclass
class TrainResult:
    steps: int
    losses: list[float]
    """Loss of every applied step of this invocation, in order."""
    skipped_steps: int
    checkpoint: Path | None
    export_dir: Path | None


@dataclasses.dataclass
class Run:
    """What a step needs; built once by :func:`train`."""

    config: TrainerConfig
    stage: str
    env: DistEnv
    model: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    scaler: torch.amp.GradScaler
    reference: nn.Module | None = None

    def autocast(self) -> contextlib.AbstractContextManager:
        precision = self.config.train.precision
        if precision == "fp32":
            return contextlib.nullcontext()
        return torch.autocast(self.env.device.type, dtype=DTYPES[precision])


def lr_factor(optim: OptimConfig, max_steps: int) -> Callable[[int], float]:
    """LambdaLR factor: linear warmup to ``lr``, then cosine down to ``min_lr``."""

    def factor(step: int) -> float:
        if step < optim.warmup_steps:
            return (step + 1) / optim.warmup_steps
        progress = min(1.0, (step - optim.warmup_steps) / max(1, max_steps - optim.warmup_steps))
        lr = optim.min_lr + (optim.lr - optim.min_lr) * 0.5 * (1 + math.cos(math.pi * progress))
        return lr / optim.lr

    return factor


def build_optimizer(
    model: nn.Module, optim: OptimConfig, device: torch.device
) -> torch.optim.AdamW:
    """AdamW; weight decay on matrices only (not norms, biases or embeddings)."""
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
    fused = device.type == "cuda" and all(p.is_cuda for p in decay + no_decay)
    return torch.optim.AdamW(groups, lr=optim.lr, betas=optim.betas, eps=optim.eps, fused=fused)


def _lm_forward(run: Run, model: nn.Module, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
    logits = model(batch["input_ids"], batch.get("position_ids"), batch.get("cu_seqlens"))
    loss = causal_lm_loss_sum(logits, batch["labels"], run.config.train.label_smoothing)
    return loss, torch.zeros(2, dtype=torch.float64)


def _dpo_forward(run: Run, model: nn.Module, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
    # Chosen and rejected rows share a width (loader contract): one forward for both.
    ids = torch.cat([batch["chosen_input_ids"], batch["rejected_input_ids"]])
    pos = torch.cat([batch["chosen_position_ids"], batch["rejected_position_ids"]])
    labels = torch.cat([batch["chosen_labels"], batch["rejected_labels"]])
    policy_chosen, policy_rejected = sequence_logps(model(ids, pos), labels).chunk(2)
    if run.config.dpo.reference == "precomputed":
        ref_chosen, ref_rejected = batch["ref_chosen_logps"], batch["ref_rejected_logps"]
    else:
        with torch.no_grad():
            ref_chosen, ref_rejected = sequence_logps(run.reference(ids, pos), labels).chunk(2)
    stats = dpo_loss(policy_chosen, policy_rejected, ref_chosen, ref_rejected, run.config.dpo.beta)
    extra = torch.stack([stats.correct.sum(), stats.reward_margins.sum()]).double().cpu()
    return stats.losses.sum(), extra


def _weight(stage: str, batch: dict) -> int:
    """What the loss is averaged over: targets (LM) or pairs (DPO)."""
    if stage == "dpo":
        return int(batch["chosen_input_ids"].shape[0])
    return int(count_targets(batch["labels"]))


def _tokens(batch: dict) -> int:
    """Real (unpadded) tokens in a batch, DPO rows included."""
    masks = [v for k, v in batch.items() if k.endswith("attention_mask")]
    if not masks:
        return sum(v.numel() for k, v in batch.items() if k.endswith("input_ids"))
    return int(sum(int(m.sum()) for m in masks))


def _flops(run: Run, batch: dict) -> float:
    """Model FLOPs of one micro-batch: real tokens x per-token FLOPs at the batch's width
    (with a reference model, DPO adds its forward: 2N of the 6N)."""
    prefixes = ("chosen_", "rejected_") if run.stage == "dpo" else ("",)
    total = 0.0
    for prefix in prefixes:
        ids, mask = batch[prefix + "input_ids"], batch.get(prefix + "attention_mask")
        tokens = ids.numel() if mask is None else int(mask.sum())
        total += tokens * flops_per_token(run.config.model, ids.shape[1])
    return total * (4 / 3 if run.reference is not None else 1.0)


def train_step(run: Run, batches: list[dict]) -> dict[str, float]:
    """One optimizer step over ``batches`` (this rank's micro-batches).

    Returns the step's metrics (global over ranks); ``applied`` is 0.0 when the update was
    skipped (non-finite loss or gradients, or an fp16 overflow).
    """
    model, opt, scaler, env = run.model, run.optimizer, run.scaler, run.env
    forward = _dpo_forward if run.stage == "dpo" else _lm_forward
    weights = torch.tensor([sum(_weight(run.stage, b) for b in batches)], dtype=torch.float64)
    total_weight = max(1.0, float(all_reduce_sum(weights.to(env.device), env)))
    # loss sum, DPO correct, DPO margin sum, tokens, model FLOPs; summed on the device
    stats = torch.zeros(5, dtype=torch.float64, device=env.device)
    for i, batch in enumerate(batches):
        stats[3] += _tokens(batch)
        stats[4] += _flops(run, batch)
        batch = {k: v.to(env.device, non_blocking=True) for k, v in batch.items()}
        with grad_sync(model, i == len(batches) - 1), run.autocast():
            loss_sum, extra = forward(run, model, batch)
        scaler.scale(loss_sum * (env.world_size / total_weight)).backward()
        stats[:3] += torch.cat([loss_sum.detach().double().view(1), extra.to(stats)])
    stats = all_reduce_sum(stats, env).tolist()
    scaler.unscale_(opt)
    max_norm = run.config.optim.max_grad_norm or math.inf
    grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm))
    loss = stats[0] / total_weight
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
    out |= {"bad": float(bad), "tokens": stats[3], "flops": stats[4]}
    if fp16:
        out["loss_scale"] = scale
    if run.stage == "dpo":
        out["preference_accuracy"] = stats[1] / total_weight
        out["reward_margin"] = stats[2] / total_weight
    return out


def _endless(source: BatchSource) -> Iterator[dict]:
    """Batches epoch after epoch (the source advances its epoch at each new ``iter``)."""
    while True:
        empty = True
        for batch in source:
            empty = False
            yield batch
        if empty:
            raise TrainingError("the data source yielded no batches")


def _build_model(config: TrainerConfig, env: DistEnv) -> Transformer:
    torch.manual_seed(config.train.seed)  # same initial weights on every rank
    model = Transformer(config.model)
    if config.init_from:
        exported, weights = load_exported(config.init_from)
        if exported != config.model:
            diff = {k: v for k, v in to_plain(exported).items() if to_plain(config.model)[k] != v}
            raise ConfigError(f"init_from {config.init_from!r} has another model shape: {diff}")
        model.load_state_dict(weights)
    return model.to(env.device)


def _setup(config: TrainerConfig, stage: str, env: DistEnv) -> Run:
    model = _build_model(config, env)
    reference = None
    if stage == "dpo" and config.dpo.reference == "model":
        reference = copy.deepcopy(model).eval().requires_grad_(False)
        reference = parallelize(reference, config, env, frozen=True)
    model = parallelize(model, config, env)
    optimizer = build_optimizer(model, config.optim, env.device)
    factor = lr_factor(config.optim, config.train.max_steps)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
    scaler = torch.amp.GradScaler(
        env.device.type,
        init_scale=config.train.init_scale,
        enabled=config.train.precision == "fp16",
    )
    return Run(config, stage, env, model, optimizer, scheduler, scaler, reference)


def train(
    config: TrainerConfig,
    stage: str,
    resume: str = "auto",
    source: BatchSource | None = None,
    stop_after: int | None = None,
) -> TrainResult:
    """Train ``config`` for ``stage`` (pretrain, sft or dpo) to ``train.max_steps``.

    Args:
        resume: ``auto`` continues from the latest checkpoint if any; ``scratch`` moves
            existing checkpoints aside and starts anew.
        source: batches to use instead of ``config.data`` (tests, benchmarks).
        stop_after: return after this many applied steps of this call (simulates a kill).

    Raises:
        ConfigError: invalid stage, resume mode, or config/checkpoint mismatch.
        TrainingError: ``train.max_bad_steps`` consecutive non-finite steps.
    """
    if stage not in STAGES or resume not in ("auto", "scratch"):
        raise ConfigError(f"stage {stage!r}/resume {resume!r}; valid: {STAGES} / auto, scratch")
    if config.train.precision == "fp16" and config.distributed.strategy == "fsdp":
        raise ConfigError("precision fp16 with fsdp is not supported (no sharded scaler); use bf16")
    config = resolve_vocab(config)
    env = init_distributed(config)
    try:
        return _train(config, stage, env, resume, source, stop_after)
    finally:
        if env.owns_group:
            torch.distributed.destroy_process_group()


def _train(config, stage, env, resume, source, stop_after) -> TrainResult:
    run = _setup(config, stage, env)
    if source is None:
        source = build_batch_source(config, stage, env.rank, env.world_size)
    ckpt = Checkpointer(config.checkpoint, env)
    objects = {"model": run.model, "optimizer": run.optimizer, "scheduler": run.scheduler}
    objects["scaler"] = run.scaler
    loop = {"step": 0, "tokens": 0, "skipped": 0, "bad_in_a_row": 0}
    latest = ckpt.latest() if resume == "auto" else None
    if resume == "scratch":
        ckpt.supersede_existing()
    if latest is not None:
        loop = ckpt.load(latest, stage, objects, source)
    console = Console(config, stage, env.is_main)
    console.start(run.model, env.world_size, str(env.device), latest, loop["step"])
    peak = device_peak_flops(env.device, config.train.precision, config.train.peak_tflops)
    metrics = MetricsWriter(config.run_dir, env.is_main, config.train.tensorboard)
    exporter = live_exporter(config.metrics, env)
    batches, losses, saved, start_step = _endless(source), [], None, loop["step"]
    try:
        while loop["step"] < config.train.max_steps:
            if stop_after is not None and loop["step"] - start_step >= stop_after:
                return TrainResult(loop["step"], losses, loop["skipped"], saved, None)
            t0 = time.perf_counter()
            micro = [next(batches) for _ in range(config.train.grad_accum_steps)]
            t_data = time.perf_counter() - t0
            out = train_step(run, micro)
            record = _account(loop, out, config, time.perf_counter() - t0, t_data)
            record["mfu"] = (
                out["flops"] / record["step_time_s"] / (peak * env.world_size) if peak else None
            )
            record |= memory_stats(env.device)
            metrics.write(record)
            console.step(record)
            if exporter is not None:
                exporter.update(record, int(out["tokens"]) if out["applied"] else 0)
            if out["applied"]:
                losses.append(out["loss"])
                done = loop["step"] >= config.train.max_steps
                if loop["step"] % config.checkpoint.interval == 0 or done:
                    objects["loop"], objects["config"] = dict(loop), config.to_json()
                    saved = ckpt.save(loop["step"], stage, objects, source)
                    console.checkpoint(saved, loop["step"])
    finally:
        metrics.close()
        if exporter is not None:
            exporter.close()
        if hasattr(source, "close"):
            source.close()
    export_dir = Path(config.checkpoint.export_dir or Path(config.checkpoint.dir) / "export")
    info = {"stage": stage, "step": loop["step"], "tokens_seen": loop["tokens"]}
    info["tokenizer"] = config.tokenizer
    export_weights(run.model, config.model, env, export_dir, info)
    console.export(export_dir)
    console.finish(loop["step"], loop["tokens"], loop["skipped"])
    return TrainResult(loop["step"], losses, loop["skipped"], saved, export_dir)


def _account(loop: dict, out: dict, config: TrainerConfig, elapsed: float, t_data: float) -> dict:
    """Update the loop counters with one step's outcome; the step's metrics record.

    Raises:
        TrainingError: ``train.max_bad_steps`` non-finite steps in a row.
    """
    loop["skipped"] += 0 if out["applied"] else 1
    loop["bad_in_a_row"] = loop["bad_in_a_row"] + 1 if out["bad"] else 0
    if loop["bad_in_a_row"] >= config.train.max_bad_steps:
        raise TrainingError(
            f"{loop['bad_in_a_row']} consecutive non-finite steps (train.max_bad_steps); "
            f"last loss {out['loss']}, grad norm {out['grad_norm']}"
        )
    if out["applied"]:
        loop["step"] += 1
        loop["tokens"] += int(out["tokens"])
    record = {k: v for k, v in out.items() if k not in ("tokens", "flops")}
    return record | {
        "step": loop["step"],
        "tokens_seen": loop["tokens"],
        "tokens_per_s": out["tokens"] / elapsed,
        "step_time_s": elapsed,
        "data_wait_frac": t_data / elapsed,
        "skipped_steps": loop["skipped"],
    }
