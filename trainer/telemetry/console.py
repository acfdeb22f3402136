"""What the trainer prints (rank 0): a start-up summary, a line every ``log_interval``
steps, checkpoint and export lines, and a closing summary.

Tokens/s and step time are smoothed with an exponential moving average (``metrics.ema_beta``,
bias-corrected as Adam does) because single steps vary several-fold with the token budget
of each batch and the data wait; the ETA is the remaining steps times the smoothed step time.
DPO runs add preference accuracy and reward margin to each line; DDP runs the step's
gradient all-reduce time (``nccl_all_reduce_time``, :mod:`trainer.parallel.comm_timing`).
"""

from __future__ import annotations

import time
from typing import Any

from trainer.config import TrainerConfig

__all__ = ["Console", "Smoothed", "format_duration"]


def format_duration(seconds: float) -> str:
    seconds = int(round(seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s" if m else f"{s}s"


class Smoothed:
    """Bias-corrected exponential moving average."""

    def __init__(self, beta: float) -> None:
        self.beta = beta
        self.raw = 0.0
        self.n = 0

    def update(self, value: float) -> float:
        self.n += 1
        self.raw = self.beta * self.raw + (1 - self.beta) * value
        return self.value

    @property
    def value(self) -> float:
        return self.raw / (1 - self.beta**self.n) if self.n else 0.0


def _memory(record: dict[str, Any]) -> str:
    if "mem_allocated_gib" in record:
        return f"mem {record['mem_allocated_gib']:.1f}/{record['mem_reserved_gib']:.1f} GiB"
    return f"rss {record.get('max_rss_gib', 0.0):.2f} GiB"


class Console:
    """The trainer's console output; silent on ranks other than 0."""

    def __init__(self, config: TrainerConfig, stage: str, enabled: bool) -> None:
        self.config = config
        self.stage = stage
        self.enabled = enabled
        self.tokens_per_s = Smoothed(config.metrics.ema_beta)
        self.step_time = Smoothed(config.metrics.ema_beta)
        self.started = time.monotonic()
        self.start_step = 0
        self.last: dict[str, Any] = {}

    def _print(self, text: str) -> None:
        if self.enabled:
            print(f"[trainer] {text}", flush=True)

    def start(self, summary: str, world_size: int, device: str, resumed: Any, step: int) -> None:
        """The start-up summary: ``summary`` (parameters, tokens per step, steps), then
        precision, parallelism, checkpoints and the resume point."""
        self.start_step = step
        self.started = time.monotonic()
        c = self.config
        if self.enabled:
            print(summary, flush=True)
        strategy = c.distributed.strategy if world_size > 1 else "single process"
        self._print(
            f"precision {c.train.precision}, parallelism {strategy} on {world_size} x {device}, "
            f"checkpoints every {c.checkpoint.interval} steps to {c.checkpoint.dir}"
        )
        weights = (
            f"the weights of init_from {c.init_from}"
            if c.init_from
            else f"new weights (train.seed {c.train.seed})"
        )
        self._print(
            f"resuming from {resumed} at step {step} (the run began from {weights})"
            if resumed
            else f"starting from step 0 with {weights}"
        )

    def step(self, record: dict[str, Any]) -> None:
        """Every step updates the averages; every ``log_interval`` steps prints a line."""
        self.last = record
        if not record.get("applied"):
            return
        self.tokens_per_s.update(record["tokens_per_s"])
        step_time = self.step_time.update(record["step_time_s"])
        step, max_steps = record["step"], self.config.train.max_steps
        if step % self.config.train.log_interval and step != max_steps:
            return
        mfu = f" mfu {record['mfu']:.1%}" if record.get("mfu") is not None else ""
        dpo = ""
        if "preference_accuracy" in record:
            dpo = f" acc {record['preference_accuracy']:.3f} margin {record['reward_margin']:.3f}"
        if "clip_fraction" in record:  # ppo
            dpo = (
                f" reward {record['reward']:.3f} kl {record['kl']:.3f} entropy "
                f"{record['entropy']:.2f} vloss {record['value_loss']:.3f} clip "
                f"{record['clip_fraction']:.3f}"
            )
        eta = format_duration(step_time * (max_steps - step))
        comm = record.get("nccl_all_reduce_time")
        comm = f" allreduce {comm * 1e3:.1f} ms" if comm is not None else ""
        self._print(
            f"step {step:>6}/{max_steps} loss {record['loss']:.4f}{dpo} lr {record['lr']:.2e} "
            f"gnorm {record['grad_norm']:.3f} tok/s {self.tokens_per_s.value:,.0f}{mfu} "
            f"data {record['data_wait_frac']:.1%}{comm} {_memory(record)} ETA {eta}"
        )

    def checkpoint(self, path: Any, step: int) -> None:
        self._print(f"checkpoint step {step} -> {path}")

    def export(self, path: Any) -> None:
        self._print(f"exported weights -> {path}")

    def finish(self, step: int, tokens: int, skipped: int) -> None:
        """The closing summary."""
        elapsed = time.monotonic() - self.started
        loss = self.last.get("loss")
        steps = step - self.start_step
        self._print(
            f"done: {steps} steps ({self.start_step} -> {step}) in {format_duration(elapsed)}, "
            f"{tokens:,} tokens seen, final loss {loss:.4f}, smoothed tok/s "
            f"{self.tokens_per_s.value:,.0f}, {skipped} skipped steps"
            if loss is not None
            else f"done: no step run (step {step})"
        )
