"""The training loop shared by the batch stages: :func:`train` builds a :class:`Run`, then
steps (:func:`trainer.loop.step.train_step`), evaluates, checkpoints and exports until
``train.max_steps`` or a stop request."""

from __future__ import annotations

import dataclasses
import gc
import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from trainer.checkpoint.checkpointer import Checkpointer, check_checkpoint_dir
from trainer.checkpoint.export import check_export_dir, export_weights
from trainer.config import ConfigError, TrainerConfig
from trainer.control.optim import build_optimizer, lr_factor
from trainer.control.stopping import Interrupted, StopRequest
from trainer.data.evaluate import Evaluator, build_eval_source
from trainer.data.sources import BatchSource, TokenCoverage, build_batch_source
from trainer.loop.step import Run, train_step
from trainer.model.lora import apply_lora
from trainer.model.pretrained import load_exported, resolve_model
from trainer.model.transformer import Transformer
from trainer.objectives import Objective, batch_stages, build_objective
from trainer.parallel.comm_timing import time_gradient_all_reduce
from trainer.parallel.distributed import (
    DistEnv,
    all_reduce_sum,
    init_distributed,
    parallelize,
)
from trainer.parallel.pipeline import build_pipeline
from trainer.telemetry.console import Console
from trainer.telemetry.metrics import (
    MetricsWriter,
    device_peak_flops,
    memory_stats,
    startup_summary,
)
from trainer.telemetry.prometheus import live_exporter

__all__ = ["TrainResult", "TrainingError", "resolve_steps", "train"]


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
    if config.init_from:  # resolve_model already took the shape from it
        _, weights = load_exported(config.init_from)
        if "score.weight" in weights:  # a reward model's export
            model.add_score_head()
        model.load_state_dict(weights)
    if config.lora.enabled:
        try:
            apply_lora(model, config.lora)
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc
    return model.to(env.device)


def _setup(config: TrainerConfig, stage: str, env: DistEnv, objective: Objective) -> Run:
    model = _build_model(config, env)
    objective.prepare(model, lambda frozen: parallelize(frozen, config, env, frozen=True))
    summary = startup_summary(config, model, stage, env.dp)
    pipeline = None
    if env.pp > 1:
        model, pipeline = build_pipeline(model, config, env, objective)
    else:
        model = parallelize(model, config, env)
    # foreach kernels cannot mix DTensors of the tp mesh with whole tensors
    optimizer = build_optimizer(model, config.optim, env.device, None if env.tp == 1 else False)
    factor = lr_factor(config.optim, config.train.max_steps)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
    scaler = torch.amp.GradScaler(
        env.device.type,
        init_scale=config.train.init_scale,
        enabled=config.train.precision == "fp16",
    )
    timer = time_gradient_all_reduce(model)
    run = Run(config, stage, objective, env, model, optimizer, scheduler, scaler, timer)
    return dataclasses.replace(run, pipeline=pipeline, summary=summary)


def train(
    config: TrainerConfig,
    stage: str,
    resume: str = "auto",
    source: BatchSource | None = None,
    stop_after: int | None = None,
    eval_source: BatchSource | None = None,
) -> TrainResult:
    """Train ``config`` for ``stage`` (pretrain, sft or dpo) to ``train.max_steps``.

    Args:
        resume: ``auto`` continues from the latest checkpoint if any; ``scratch`` moves
            existing checkpoints aside and starts anew.
        source: batches to use instead of ``config.data`` (tests, benchmarks).
        stop_after: return after this many applied steps of this call (simulates a kill).
        eval_source: held-out batches to use instead of ``config.eval.streams``.

    Raises:
        ConfigError: invalid stage, resume mode, or config/checkpoint/data mismatch.
        TrainingError: ``train.max_bad_steps`` consecutive non-finite steps.
    """
    if stage not in batch_stages() or resume not in ("auto", "scratch"):
        raise ConfigError(
            f"stage {stage!r}/resume {resume!r}; valid: {', '.join(batch_stages())} / auto, scratch"
        )
    if config.train.precision == "fp16" and config.distributed.strategy == "fsdp":
        raise ConfigError("precision fp16 with fsdp is not supported (no sharded scaler); use bf16")
    config = resolve_model(config)
    check_checkpoint_dir(Path(config.checkpoint.dir))
    check_export_dir(Path(config.checkpoint.export_dir or Path(config.checkpoint.dir) / "export"))
    if config.distributed.pp > 1 and not build_objective(stage, config).pipeline_ready:
        raise ConfigError(
            f"distributed.pp={config.distributed.pp}: the {stage} stage does not run in a "
            "pipeline; valid stages with pp > 1: pretrain, sft"
        )
    env = init_distributed(config)
    run: Run | None = None
    try:
        objective = build_objective(stage, config)
        if source is None:
            source = build_batch_source(config, objective, env.dp_rank, env.dp)
        evaluator = None
        if eval_source is not None or config.eval.enabled:
            held_out = eval_source or build_eval_source(config, objective, env)
            evaluator = Evaluator(held_out, objective, env, config.eval.max_batches)
        config = resolve_steps(config, source, env)
        run = _setup(config, stage, env, objective)
        result = _train(run, source, evaluator, resume, stop_after)
        if env.owns_group:
            # No rank tears the group down while another still talks to it: rank 0 hosts
            # the TCP store, and a rank that loses it mid-call aborts (SIGABRT at exit).
            torch.distributed.barrier()
        return result
    finally:
        if env.owns_group:
            # Free the model and optimizer (DDP's reducer, FSDP's state: cycles that hold
            # the group and gloo's finished work) while the interpreter is alive: freed at
            # interpreter exit, gloo's threads take the GIL of a finalizing interpreter and
            # the process aborts ("terminate called without an active exception", seen in
            # CI after a completed run).
            run = None
            gc.collect()
            torch.distributed.destroy_process_group()
            gc.collect()


def resolve_steps(config: TrainerConfig, source: BatchSource, env: DistEnv) -> TrainerConfig:
    """``train.max_steps`` from ``train.epochs`` and the source's batches per epoch (the
    mean over ranks, so every rank stops at the same step).

    Raises:
        ConfigError: ``epochs`` with a source of unknown length, or warmup past the end.
    """
    train_config = config.train
    if train_config.epochs is not None:
        if not hasattr(source, "__len__"):
            raise ConfigError("train.epochs needs a data source with a known length (the loader)")
        batches = all_reduce_sum(torch.tensor([float(len(source))], device=env.device), env)
        per_rank = float(batches) / env.world_size
        steps = max(1, math.ceil(train_config.epochs * per_rank / train_config.grad_accum_steps))
        train_config = dataclasses.replace(train_config, max_steps=steps, epochs=None)
        if env.is_main:
            print(f"[trainer] train.epochs {config.train.epochs}: {steps} steps", flush=True)
    if config.optim.warmup_steps > train_config.max_steps:
        raise ConfigError(
            f"optim.warmup_steps {config.optim.warmup_steps} > train.max_steps "
            f"{train_config.max_steps}"
        )
    return dataclasses.replace(config, train=train_config)


def _train(
    run: Run,
    source: BatchSource,
    evaluator: Evaluator | None,
    resume: str,
    stop_after: int | None,
) -> TrainResult:
    config, env, stage = run.config, run.env, run.stage
    ckpt = Checkpointer(config.checkpoint, env)
    objects = {"model": run.model, "optimizer": run.optimizer, "scheduler": run.scheduler}
    objects["scaler"] = run.scaler
    loop = {"step": 0, "tokens": 0, "skipped": 0, "bad_in_a_row": 0, "best_val_loss": math.inf}
    latest = ckpt.latest() if resume == "auto" else None
    if resume == "scratch":
        ckpt.supersede_existing()
    if latest is not None:
        loop |= ckpt.load(latest, stage, objects, source, config.to_json())
    console = Console(config, stage, env.is_main)
    console.start(run.summary, env.world_size, str(env.device), latest, loop["step"])
    coverage = TokenCoverage.of(source) if env.is_main else None
    for line in coverage.start_lines() if coverage else ():
        print(f"[trainer] {line}", flush=True)
    peak = device_peak_flops(env.device, config.train.precision, config.train.peak_tflops)
    # Records past the resumed step were written by the run that died after it; they are
    # recomputed now, so they go (a fresh start keeps none).
    metrics = MetricsWriter(config.run_dir, env.is_main, config.train.tensorboard, loop["step"])
    exporter = live_exporter(config.metrics, env)
    batches, losses, saved, start_step = _endless(source), [], None, loop["step"]
    stop = StopRequest().install()
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
            signame = stop.requested(env)
            if signame is not None:
                _stop(run, ckpt, objects, source, loop, signame)
            if not out["applied"]:
                continue
            losses.append(out["loss"])
            done = loop["step"] >= config.train.max_steps
            if evaluator is not None and _eval_due(config, loop["step"], done):
                _evaluate(run, evaluator, loop, metrics)
            if loop["step"] % config.checkpoint.interval == 0 or done:
                objects["loop"], objects["config"] = dict(loop), config.to_json()
                saved = ckpt.save(loop["step"], stage, objects, source)
                console.checkpoint(saved, loop["step"])
    finally:
        stop.restore()
        metrics.close()
        if exporter is not None:
            exporter.close()
        for closable in (source, evaluator):
            if hasattr(closable, "close"):
                closable.close()
    export_dir = Path(config.checkpoint.export_dir or Path(config.checkpoint.dir) / "export")
    export_weights(run.model, config, env, export_dir, _export_info(run, loop))
    console.export(export_dir)
    console.finish(loop["step"], loop["tokens"], loop["skipped"])
    if coverage:
        print(f"[trainer] {coverage.end_line(loop['tokens'])}", flush=True)
    return TrainResult(loop["step"], losses, loop["skipped"], saved, export_dir)


def _stop(
    run: Run, ckpt: Checkpointer, objects: dict, source: BatchSource, loop: dict, signame: str
) -> None:
    """A signal arrived during the step just finished: checkpoint it and stop.

    Raises:
        Interrupted: always, once the checkpoint is written.
    """
    objects["loop"], objects["config"] = dict(loop), run.config.to_json()
    saved = ckpt.save(loop["step"], run.stage, objects, source)
    stopped = Interrupted(signame, loop["step"], saved)
    if run.env.is_main:
        print(f"[trainer] {stopped}", flush=True)
    raise stopped


def _export_info(run: Run, loop: dict) -> dict[str, Any]:
    info = {"stage": run.stage, "step": loop["step"], "tokens_seen": loop["tokens"]}
    return info | {"tokenizer": run.config.tokenizer}


def _eval_due(config: TrainerConfig, step: int, done: bool) -> bool:
    return done or (config.eval.interval > 0 and step % config.eval.interval == 0)


def _evaluate(run: Run, evaluator: Evaluator, loop: dict, metrics: MetricsWriter) -> None:
    """One held-out pass: logged like a training step; the best weights kept if asked."""
    record = {"step": loop["step"], **evaluator(run.model, run.autocast)}
    metrics.write(record)
    if run.env.is_main:
        shown = " ".join(
            f"{k} {v:.4f}" for k, v in record.items() if k not in ("step", "val_weight")
        )
        print(f"eval {loop['step']:>6} {shown}", flush=True)
    if run.config.eval.keep_best and record["val_loss"] < loop["best_val_loss"]:
        loop["best_val_loss"] = record["val_loss"]
        best = Path(run.config.checkpoint.dir) / "best"
        info = _export_info(run, loop) | {"val_loss": record["val_loss"]}
        export_weights(run.model, run.config, run.env, best, info)


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
