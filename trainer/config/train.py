"""How a run trains and what it writes: ``optim``, ``train``, ``data``, ``checkpoint``,
``eval`` and ``metrics``."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Literal

from dataforge.typed_config import check_range

__all__ = [
    "CheckpointConfig",
    "DataConfig",
    "EvalConfig",
    "MetricsConfig",
    "OptimConfig",
    "TrainConfig",
]


@dataclasses.dataclass(frozen=True)
class OptimConfig:
    """AdamW with linear warmup then cosine decay to ``min_lr``."""

    lr: float = 3e-4
    """Peak learning rate, reached at the end of warmup."""
    min_lr: float = 3e-5
    """Learning rate at the last step (end of the cosine decay)."""
    weight_decay: float = 0.1
    """Applied to matrices only: norms, biases and embeddings get none."""
    betas: tuple[float, float] = (0.9, 0.95)
    """AdamW's moment decay rates."""
    eps: float = 1e-8
    """AdamW's epsilon."""
    warmup_steps: int = 100
    """Steps of linear warmup from ``lr / warmup_steps`` to ``lr``."""
    max_grad_norm: float = 1.0
    """Clip the global gradient norm to this; 0 disables clipping (norm still logged)."""

    def __post_init__(self) -> None:
        # lr 0 is valid (a step that must not move the weights); NaN fails every check.
        for name in ("lr", "min_lr", "weight_decay", "eps"):
            if not math.isfinite(getattr(self, name)):
                raise ValueError(f"optim.{name}={getattr(self, name)!r}; valid: a finite number")
        check_range("optim.lr", self.lr, 0.0)
        if not 0 <= self.min_lr <= self.lr:
            raise ValueError(f"need 0 <= min_lr <= lr, got min_lr={self.min_lr} lr={self.lr}")
        check_range("optim.weight_decay", self.weight_decay, 0.0)
        check_range("optim.warmup_steps", self.warmup_steps, 0)
        if not self.eps > 0:
            raise ValueError(f"optim.eps={self.eps!r}; valid range: > 0")
        if not self.max_grad_norm >= 0:  # 0 and inf: no clipping
            raise ValueError(f"optim.max_grad_norm={self.max_grad_norm!r}; valid: >= 0 (0: off)")
        if len(self.betas) != 2 or not all(0 <= b < 1 for b in self.betas):
            raise ValueError(f"betas must be two numbers in [0, 1), got {self.betas}")


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """The loop: how many steps, how big, in which precision."""

    max_steps: int | None = None
    """Optimizer steps to train; None: from ``epochs``, else 1000."""
    epochs: float | None = None
    """Passes over the training data instead of ``max_steps``: steps = ceil(epochs x the
    first epoch's batches per rank / grad_accum_steps)."""
    grad_accum_steps: int = 1
    """Micro-batches per optimizer step on each rank."""
    precision: Literal["bf16", "fp16", "fp32"] = "bf16"
    """bf16/fp16: autocast; fp16 also scales the loss with a dynamic GradScaler."""
    init_scale: float = 16384.0
    """GradScaler's first scale (fp16 only)."""
    label_smoothing: float = 0.0
    """Label smoothing of the LM cross-entropy, in [0, 1)."""
    max_bad_steps: int = 10
    """Stop after this many consecutive steps with a non-finite loss or gradient norm."""
    activation_checkpointing: bool = False
    """Recompute each block's activations in the backward pass (less memory, ~1/3 more compute)."""
    compile: bool = False
    """torch.compile each transformer block."""
    seed: int = 0
    """Seed of the initial weights and of the synthetic source."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """``auto``: CUDA when available (rank r uses GPU ``LOCAL_RANK``), else CPU."""
    log_interval: int = 10
    """Print a line every this many steps (JSONL gets every step)."""
    tensorboard: bool = True
    """Write TensorBoard events to ``run_dir`` besides ``metrics.jsonl``."""
    peak_tflops: float | None = None
    """Dense peak of one device for MFU; None: looked up from the device name."""

    def __post_init__(self) -> None:
        if self.max_steps is not None and self.epochs is not None:
            raise ValueError("give train.max_steps or train.epochs, not both")
        if self.epochs is not None and self.epochs <= 0:
            raise ValueError(f"train.epochs must be > 0, got {self.epochs}")
        if self.max_steps is None and self.epochs is None:
            object.__setattr__(self, "max_steps", 1000)
        if (self.max_steps or 1) < 1 or self.grad_accum_steps < 1 or self.log_interval < 1:
            raise ValueError("max_steps, grad_accum_steps and log_interval must be >= 1")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1), got {self.label_smoothing}")
        if self.init_scale <= 0 or self.max_bad_steps < 1:
            raise ValueError("init_scale must be > 0 and max_bad_steps >= 1")


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """Where batches come from."""

    source: Literal["loader", "synthetic"] = "loader"
    """``loader``: ``dataforge.loader.build_dataloader``; ``synthetic``: random tokens
    (benchmarks and smoke runs only)."""
    loader: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Fields of ``dataforge.loader.LoaderConfig``, checked by that class."""
    batch_size: int = 8
    """Synthetic source: sequences per micro-batch."""
    seq_len: int = 128
    """Synthetic source: tokens per sequence."""

    def __post_init__(self) -> None:
        if self.batch_size < 1 or self.seq_len < 2:
            raise ValueError("batch_size must be >= 1 and seq_len >= 2")


@dataclasses.dataclass(frozen=True)
class CheckpointConfig:
    dir: str = "checkpoints"
    """Checkpoint directory (``step_N/`` inside); shared by all ranks."""
    interval: int = 1000
    """Save every this many optimizer steps (and always at the end)."""
    keep_last: int = 3
    """Checkpoints kept; older ones are deleted after each save."""
    export_dir: str | None = None
    """Where final weights go as safetensors + config.json; None: ``<dir>/export``."""

    def __post_init__(self) -> None:
        if self.interval < 1 or self.keep_last < 1:
            raise ValueError("checkpoint interval and keep_last must be >= 1")


@dataclasses.dataclass(frozen=True)
class EvalConfig:
    """Held-out evaluation; off while ``streams`` is empty."""

    streams: tuple[Any, ...] = ()
    """Held-out MDS streams (``data.loader.streams`` syntax), read in order, unshuffled."""
    interval: int = 0
    """Evaluate every this many optimizer steps; 0: only after the last step."""
    max_batches: int | None = None
    """Batches per evaluation (per rank); None: the whole held-out set."""
    keep_best: bool = False
    """Export the weights with the lowest ``val_loss`` to ``<checkpoint.dir>/best``."""
    loader: dict[str, Any] = dataclasses.field(default_factory=dict)
    """``LoaderConfig`` fields that differ from ``data.loader`` for evaluation."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "streams", tuple(self.streams))
        if self.interval < 0 or (self.max_batches is not None and self.max_batches < 1):
            raise ValueError("eval.interval must be >= 0 and eval.max_batches >= 1 or null")

    @property
    def enabled(self) -> bool:
        return bool(self.streams)


@dataclasses.dataclass(frozen=True)
class MetricsConfig:
    """Live metrics besides ``metrics.jsonl`` (see :mod:`trainer.telemetry.prometheus`)."""

    prometheus_port: int | None = None
    """Serve Prometheus text on this port (rank 0; 0 picks a free port); None: off."""
    prometheus_host: str = "127.0.0.1"
    """Address to bind; ``0.0.0.0`` lets a Prometheus on another machine scrape."""
    ema_beta: float = 0.9
    """Smoothing of the printed tokens/s and step time (exponential moving average)."""

    def __post_init__(self) -> None:
        if self.prometheus_port is not None and not 0 <= self.prometheus_port < 65536:
            raise ValueError(
                f"metrics.prometheus_port must be in [0, 65535], got {self.prometheus_port}"
            )
        if not 0.0 <= self.ema_beta < 1.0:
            raise ValueError(f"metrics.ema_beta must be in [0, 1), got {self.ema_beta}")
