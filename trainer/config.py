"""Trainer YAML -> typed, frozen dataclasses.

Loading follows the shared typed-config rules (:mod:`dataforge.typed_config`): safe YAML
with YAML 1.2 numbers (``lr: 3e-4`` is a float),
unknown keys are errors listing the valid ones, and each dataclass checks its own
cross-field rules in ``__post_init__``. A ``model.preset`` name expands to a size from
:data:`MODEL_PRESETS`; keys given next to it override the preset. Relative paths in the
file resolve against its directory, those of ``--set`` overrides against the working
directory (:mod:`trainer.config_paths`).
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any, Literal

from dataforge.typed_config import (
    ConfigError,
    apply_overrides,
    check_range,
    from_mapping,
    read_yaml_file,
    to_plain,
)

__all__ = [
    "MODEL_PRESETS",
    "CheckpointConfig",
    "ConfigError",
    "DataConfig",
    "DistributedConfig",
    "DPOConfig",
    "EvalConfig",
    "PPOConfig",
    "LoRAConfig",
    "MetricsConfig",
    "ModelConfig",
    "OptimConfig",
    "TrainConfig",
    "TrainerConfig",
    "config_from_mapping",
    "load_config",
    "to_plain",
]

ROPE_SCALINGS = ("default", "linear", "llama3")

MODEL_PRESETS: dict[str, dict[str, Any]] = {
    # Named by their parameter count with a 32,000-id vocabulary and untied embeddings (the
    # start-up line prints the real count for the tokenizer in use). "1.7b" is the seed's
    # shape (hidden 2048, 24 layers, 32 heads, SwiGLU 8192); "3b" is Llama 3.2 3B's body.
    "tiny": dict(hidden_size=64, n_layers=2, n_heads=4, intermediate_size=176, max_seq_len=256),
    "134m": dict(
        hidden_size=768, n_layers=12, n_heads=12, intermediate_size=2048, max_seq_len=2048
    ),
    "374m": dict(
        hidden_size=1024, n_layers=24, n_heads=16, intermediate_size=2816, max_seq_len=2048
    ),
    "1b": dict(hidden_size=2048, n_layers=18, n_heads=16, intermediate_size=5504, max_seq_len=2048),
    "1.7b": dict(
        hidden_size=2048, n_layers=24, n_heads=32, intermediate_size=8192, max_seq_len=2048
    ),
    "3b": dict(
        hidden_size=3072,
        n_layers=28,
        n_heads=24,
        n_kv_heads=8,
        intermediate_size=8192,
        max_seq_len=2048,
    ),
}


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Decoder-only transformer shape."""

    vocab_size: int | None = None
    """None: read from the tokenizer directory (``TrainerConfig.tokenizer``)."""
    hidden_size: int = 256
    """Width of the residual stream (embedding size)."""
    n_layers: int = 4
    """Transformer blocks."""
    n_heads: int = 4
    """Attention (query) heads; ``hidden_size / n_heads`` must be even."""
    n_kv_heads: int | None = None
    """Key/value heads (grouped-query attention); None: ``n_heads`` (multi-head)."""
    intermediate_size: int | None = None
    """MLP width; None: 4 * hidden for GELU, 8/3 * hidden rounded up to 64 for SwiGLU."""
    max_seq_len: int = 2048
    """Longest position RoPE tables are built for."""
    norm: Literal["rmsnorm", "layernorm"] = "rmsnorm"
    """Normalization before attention, MLP and the output layer."""
    norm_eps: float = 1e-5
    """Epsilon added inside the normalization."""
    mlp: Literal["swiglu", "gelu"] = "swiglu"
    """MLP kind: gated SiLU (three matrices) or GELU (two)."""
    rope_theta: float = 10000.0
    """RoPE base frequency."""
    rope_scaling: dict[str, Any] | None = None
    """Hugging Face ``rope_scaling`` of an imported model: ``{"rope_type": "linear",
    "factor": f}`` or Llama 3's ``{"rope_type": "llama3", "factor", "low_freq_factor",
    "high_freq_factor", "original_max_position_embeddings"}``; None: plain RoPE."""
    sliding_window: int | None = None
    """Each token attends to at most this many positions (itself included); None: all."""
    tie_embeddings: bool = False
    """Share the input embedding with the output layer."""
    bias: bool = False
    """Biases in linear layers (and LayerNorm)."""
    qkv_bias: bool = False
    """Biases on the query/key/value projections only (Qwen2)."""
    init_std: float = 0.02
    """Standard deviation of the normal initialization of matrices."""

    def __post_init__(self) -> None:
        if self.vocab_size is not None and self.vocab_size < 2:
            raise ValueError(f"vocab_size must be >= 2, got {self.vocab_size}")
        for name in ("hidden_size", "n_layers", "n_heads", "max_seq_len"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.hidden_size % self.n_heads or (self.hidden_size // self.n_heads) % 2:
            raise ValueError(
                f"hidden_size {self.hidden_size} must split into {self.n_heads} heads of even size"
            )
        if (
            self.n_kv_heads is None
        ):  # one spelling of multi-head attention: equal configs compare equal
            object.__setattr__(self, "n_kv_heads", self.n_heads)
        kv_heads = self.kv_heads
        if kv_heads < 1 or self.n_heads % kv_heads:
            raise ValueError(f"n_kv_heads {kv_heads} must divide n_heads {self.n_heads}")
        if self.rope_scaling is not None:
            kind = self.rope_scaling.get("rope_type", self.rope_scaling.get("type"))
            if kind not in ROPE_SCALINGS:
                raise ValueError(
                    f"rope_scaling type {kind!r} is not supported; valid: {', '.join(ROPE_SCALINGS)}"
                )
        if self.sliding_window is not None and self.sliding_window < 1:
            raise ValueError(f"sliding_window must be >= 1 or null, got {self.sliding_window}")

    @property
    def kv_heads(self) -> int:
        return self.n_kv_heads or self.n_heads

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.n_heads

    @property
    def ffn_size(self) -> int:
        if self.intermediate_size is not None:
            return self.intermediate_size
        if self.mlp == "gelu":
            return 4 * self.hidden_size
        return -(-(8 * self.hidden_size // 3) // 64) * 64


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
class DistributedConfig:
    """How ranks share the model (ignored on one process)."""

    strategy: Literal["ddp", "fsdp"] = "ddp"
    """``fsdp`` is FSDP2 (``torch.distributed.fsdp.fully_shard``), one unit per block."""
    fsdp_cpu_offload: bool = False
    """FSDP2: keep sharded parameters, gradients and optimizer state in host memory."""
    fsdp_reshard_after_forward: bool = True
    """FSDP2: free gathered parameters after the forward (less memory, one more all-gather)."""
    timeout_s: int = 1800
    """Process-group timeout (collectives hung longer than this fail the job)."""
    backend: Literal["auto", "nccl", "gloo"] = "auto"
    """Process-group backend; ``auto``: NCCL on GPUs, gloo on CPU."""
    dp: int | None = None
    """Data-parallel ranks (DDP or FSDP2 over them; FSDP2 when tp or pp is above 1); None:
    world size / (tp x pp)."""
    tp: int = 1
    """Tensor-parallel ranks (DTensor): q/k/v and gate/up split by columns, attention
    output and down projections by rows; must divide ``model.n_heads`` and
    ``model.n_kv_heads``. Keep it within a node."""
    pp: int = 1
    """Pipeline ranks (``torch.distributed.pipelining``), ``pp_stages_per_rank`` stages
    each, cut by layer count: the embedding on the first stage, the final norm and output
    layer on the last; each step's ``train.grad_accum_steps`` micro-batches flow through
    them."""
    sequence_parallel: bool = False
    """With tp: split the residual stream (norms, the blocks' inputs and outputs) along
    the sequence across the tp ranks instead of repeating it (less activation memory)."""
    pp_schedule: Literal["1f1b", "gpipe", "interleaved_1f1b"] = "1f1b"
    """Pipeline schedule: one-forward-one-backward (less activation memory), GPipe, or
    interleaved 1F1B (``pp_stages_per_rank`` model chunks per rank, a smaller bubble)."""
    pp_stages_per_rank: int | None = None
    """Pipeline stages (model chunks) each rank holds; rank r holds stages r, r + pp, ...
    of ``pp x pp_stages_per_rank`` stages cut by layer count. Above 1 only with
    ``interleaved_1f1b``; None: 2 with ``interleaved_1f1b``, else 1."""

    def __post_init__(self) -> None:
        if self.timeout_s < 1:
            raise ValueError(f"timeout_s must be >= 1, got {self.timeout_s}")
        for name in ("dp", "tp", "pp", "pp_stages_per_rank"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"distributed.{name}={value}; valid: an integer >= 1")

    def mesh_shape(self, world_size: int) -> tuple[int, int, int]:
        """(pp, dp, tp) for ``world_size`` ranks, outermost first (tp ranks are
        neighbours, so a node holds whole tp groups).

        Raises:
            ConfigError: the ranks do not split into ``dp x tp x pp``.
        """
        split = self.tp * self.pp
        if world_size % split:
            raise ConfigError(
                f"distributed.tp x distributed.pp = {self.tp} x {self.pp} does not divide the "
                f"world size {world_size}; valid: tp x pp a divisor of the number of ranks"
            )
        dp = world_size // split
        if self.dp is not None and self.dp != dp:
            raise ConfigError(
                f"distributed.dp={self.dp} but {world_size} ranks / (tp {self.tp} x pp "
                f"{self.pp}) = {dp}; valid: {dp}, or null to derive it"
            )
        return self.pp, dp, self.tp

    @property
    def stages_per_rank(self) -> int:
        """``pp_stages_per_rank`` with its default resolved."""
        if self.pp_stages_per_rank is not None:
            return self.pp_stages_per_rank
        return 2 if self.pp_schedule == "interleaved_1f1b" else 1

    @property
    def model_parallel(self) -> bool:
        """Tensor or pipeline parallelism is on (the model is split, not only the batch)."""
        return self.tp > 1 or self.pp > 1


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
class DPOConfig:
    beta: float = 0.1
    """DPO temperature: how far the policy may move from the reference."""
    reference: Literal["model", "precomputed"] = "model"
    """``model``: a frozen copy of the starting weights; ``precomputed``: batches carry
    ``ref_chosen_logps``/``ref_rejected_logps``."""

    def __post_init__(self) -> None:
        if self.beta <= 0:
            raise ValueError(f"dpo.beta must be > 0, got {self.beta}")


@dataclasses.dataclass(frozen=True)
class PPOConfig:
    """RLHF with PPO (``dataforge train ppo``): the policy starts from ``init_from`` (an SFT
    export), a frozen copy of it is the KL reference, a frozen reward model scores each
    response (see :mod:`trainer.ppo`)."""

    reward_model: str | None = None
    """Export of ``dataforge train reward`` (its ``score.weight`` head scores a response at
    its last token); required by the ppo stage."""
    value_init: Literal["policy", "reward"] = "policy"
    """Value model start: the policy's weights with a zero scalar head, or the reward model's
    weights and head."""
    prompts: str | None = None
    """JSONL file of prompts (``prompt_tokens``: ids ending with the assistant marker, or
    ``prompt``: text rendered with the tokenizer's chat layout); None: ``data.loader`` MDS
    shards (SFT or DPO format: the tokens before the first learned one)."""
    rollout_batch_size: int = 16
    """Prompts per PPO step (one rollout)."""
    mini_batch_size: int = 8
    """Rollouts per optimizer update; must divide ``rollout_batch_size``."""
    ppo_epochs: int = 4
    """Passes over each rollout batch (shuffled mini-batches)."""
    max_new_tokens: int = 32
    """Longest response generated."""
    max_prompt_len: int | None = None
    """Longer prompts are dropped (counted); None: ``model.max_seq_len - max_new_tokens``."""
    temperature: float = 1.0
    """Sampling temperature; the log-probs the losses and KL use are of the same tempered
    distribution."""
    top_k: int = 0
    """Sample among the k most likely tokens; 0: the whole vocabulary."""
    stop_token_ids: tuple[int, ...] | None = None
    """Generation ends at any of these ids (kept in the response); None: the
    ``eos_token_id`` of ``init_from``'s ``generation_config.json`` (``<eos>`` and the
    end-of-turn id for dataforge chat tokenizers)."""
    gamma: float = 1.0
    """Discount of GAE."""
    lam: float = 0.95
    """GAE's lambda (bias/variance trade-off of the advantages)."""
    clip_range: float = 0.2
    """Policy ratio clip: ratios outside [1 - c, 1 + c] give no gradient."""
    clip_range_value: float = 0.2
    """Value clip: new values more than this from the rollout's give no gradient."""
    vf_coef: float = 0.1
    """Weight of the value loss in the summed loss."""
    kl_coef: float = 0.05
    """Per-token KL reward ``-kl_coef * (log p - log p_ref)``; the initial coefficient
    when ``target_kl`` is set."""
    target_kl: float | None = None
    """Adaptive KL: the coefficient follows the rollout KL (summed over a response) toward
    this target (Ziegler et al. 2019); None: ``kl_coef`` stays fixed."""
    kl_horizon: int = 10000
    """Adaptive KL's horizon in rollouts: how fast the coefficient moves."""
    whiten_advantages: bool = True
    """Normalise advantages to mean 0, variance 1 over each rollout's response tokens."""
    whiten_rewards: bool = False
    """Scale the per-token rewards to unit variance before GAE (mean kept)."""
    missing_stop_penalty: float | None = None
    """Subtracted from the score of a response cut at ``max_new_tokens`` without a stop id;
    None: no penalty."""

    def __post_init__(self) -> None:
        if self.stop_token_ids is not None:
            object.__setattr__(self, "stop_token_ids", tuple(self.stop_token_ids))
        for name in ("rollout_batch_size", "mini_batch_size", "ppo_epochs", "max_new_tokens"):
            check_range(f"ppo.{name}", getattr(self, name), 1)
        check_range("ppo.kl_horizon", self.kl_horizon, 1)
        check_range("ppo.max_prompt_len", self.max_prompt_len, 1)
        check_range("ppo.top_k", self.top_k, 0)
        check_range("ppo.gamma", self.gamma, 0.0, 1.0)
        check_range("ppo.lam", self.lam, 0.0, 1.0)
        check_range("ppo.kl_coef", self.kl_coef, 0.0)
        for name in ("clip_range", "clip_range_value", "vf_coef", "temperature", "target_kl"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value > 0):
                raise ValueError(f"ppo.{name}={value!r}; valid range: > 0")
        if self.rollout_batch_size % self.mini_batch_size:
            raise ValueError(
                f"ppo.mini_batch_size {self.mini_batch_size} must divide "
                f"ppo.rollout_batch_size {self.rollout_batch_size}"
            )


LORA_TARGETS = ("qkv", "proj", "up", "down", "lm_head")


@dataclasses.dataclass(frozen=True)
class LoRAConfig:
    """Low-rank adapters (:mod:`trainer.lora`); off while ``r`` is 0."""

    r: int = 0
    """Rank of each adapter; 0: no LoRA, every weight trains."""
    alpha: float = 16.0
    """The update is scaled by ``alpha / r``."""
    dropout: float = 0.0
    """Dropout on the adapters' input while training."""
    targets: tuple[str, ...] = ("qkv", "proj", "up", "down")
    """Linear layers that get adapters, by name: attention ``qkv``/``proj``, MLP
    ``up``/``down``, output ``lm_head``."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "targets", tuple(self.targets))
        if self.r < 0 or self.alpha <= 0 or not 0.0 <= self.dropout < 1.0:
            raise ValueError("lora needs r >= 0, alpha > 0 and dropout in [0, 1)")
        unknown = sorted(set(self.targets) - set(LORA_TARGETS))
        if unknown or not self.targets:
            raise ValueError(
                f"lora.targets {list(self.targets)}: valid names are {', '.join(LORA_TARGETS)}"
            )

    @property
    def enabled(self) -> bool:
        return self.r > 0


@dataclasses.dataclass(frozen=True)
class MetricsConfig:
    """Live metrics besides ``metrics.jsonl`` (see :mod:`trainer.prometheus`)."""

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


@dataclasses.dataclass(frozen=True)
class TrainerConfig:
    model: ModelConfig = ModelConfig()
    optim: OptimConfig = OptimConfig()
    train: TrainConfig = TrainConfig()
    data: DataConfig = DataConfig()
    checkpoint: CheckpointConfig = CheckpointConfig()
    distributed: DistributedConfig = DistributedConfig()
    dpo: DPOConfig = DPOConfig()
    ppo: PPOConfig = PPOConfig()
    eval: EvalConfig = EvalConfig()
    metrics: MetricsConfig = MetricsConfig()
    lora: LoRAConfig = LoRAConfig()
    tokenizer: str | None = None
    """Tokenizer directory; gives ``model.vocab_size`` when that is null."""
    init_from: str | None = None
    """Exported weights directory (safetensors + config.json) to start from, e.g. SFT from
    a pretrained model, DPO from an SFT model. Ignored when resuming a checkpoint."""
    run_dir: str = "runs/default"
    """metrics.jsonl and TensorBoard events go here."""

    def __post_init__(self) -> None:
        if self.model.vocab_size is None and self.tokenizer is None:
            raise ValueError("set model.vocab_size or tokenizer (a directory to read it from)")
        if self.lora.enabled and "lm_head" in self.lora.targets and self.model.tie_embeddings:
            raise ValueError("lora.targets lm_head with model.tie_embeddings: untie, or drop it")
        if self.data.source == "synthetic" and self.model.vocab_size is None:
            raise ValueError("data.source synthetic needs an explicit model.vocab_size")
        _check_mesh(self)
        if self.train.max_steps is not None and self.optim.warmup_steps > self.train.max_steps:
            raise ValueError(
                f"optim.warmup_steps {self.optim.warmup_steps} > train.max_steps "
                f"{self.train.max_steps}"
            )

    def to_json(self) -> str:
        return json.dumps(to_plain(self), sort_keys=True)


def _check_mesh(config: TrainerConfig) -> None:
    """The model shapes and features a ``distributed.tp``/``pp`` split cannot serve."""
    dist, model = config.distributed, config.model
    tp, pp = dist.tp, dist.pp
    if model.n_heads % tp or model.kv_heads % tp:
        divisors = [d for d in range(1, model.kv_heads + 1) if not model.kv_heads % d]
        raise ValueError(
            f"distributed.tp={tp} does not divide model.n_heads {model.n_heads} and "
            f"model.n_kv_heads {model.kv_heads}; valid: {', '.join(map(str, divisors))}"
        )
    if dist.sequence_parallel and tp == 1:
        raise ValueError("distributed.sequence_parallel needs distributed.tp > 1; valid: false")
    if pp > model.n_layers:
        raise ValueError(
            f"distributed.pp={pp} > model.n_layers {model.n_layers}; valid: 1 to {model.n_layers}"
        )
    if pp > 1:
        _check_pipeline(config)
    if not dist.model_parallel:
        return
    refused = {
        "train.precision fp16 (no sharded GradScaler)": config.train.precision == "fp16",
        "lora (adapters are not split)": tp > 1 and config.lora.enabled,
        "model.tie_embeddings (first and last stage would share a tensor)": (
            pp > 1 and model.tie_embeddings
        ),
        "eval.streams (held-out passes do not run through the pipeline)": (
            pp > 1 and config.eval.enabled
        ),
        "train.compile": config.train.compile,
    }
    for what, hit in refused.items():
        if hit:
            raise ValueError(f"distributed.tp={tp}/pp={pp} cannot be used with {what}; use 1")


def _check_pipeline(config: TrainerConfig) -> None:
    """The stage counts and micro-batch counts a pipeline schedule cannot run."""
    dist, n_layers, accum = config.distributed, config.model.n_layers, config.train.grad_accum_steps
    pp, per_rank, schedule = dist.pp, dist.stages_per_rank, dist.pp_schedule
    if schedule != "interleaved_1f1b" and per_rank != 1:
        raise ValueError(
            f"distributed.pp_stages_per_rank={per_rank} needs distributed.pp_schedule "
            f"interleaved_1f1b, got {schedule}; valid with {schedule}: null or 1"
        )
    if pp * per_rank > n_layers:
        raise ValueError(
            f"distributed.pp x pp_stages_per_rank = {pp} x {per_rank} stages > model.n_layers "
            f"{n_layers}; valid: at most {n_layers} stages"
        )
    if schedule == "1f1b" and accum < pp:
        raise ValueError(
            f"distributed.pp_schedule 1f1b needs train.grad_accum_steps >= distributed.pp "
            f"{pp}, got {accum}; raise it or use gpipe"
        )
    if schedule == "interleaved_1f1b" and accum % pp:
        raise ValueError(
            f"distributed.pp_schedule interleaved_1f1b needs train.grad_accum_steps a multiple "
            f"of distributed.pp {pp}, got {accum}; valid: {pp}, {2 * pp}, {3 * pp}, ..."
        )


_TOP_KEYS = {f.name for f in dataclasses.fields(TrainerConfig)}


def config_from_mapping(raw: dict[str, Any], where: str = "<config>") -> TrainerConfig:
    """Build a TrainerConfig from a parsed mapping (expanding ``model.preset``).

    Raises:
        ConfigError: unknown keys or preset, wrong types, or a failed cross-field rule.
    """
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: the top level must be a mapping with keys {sorted(_TOP_KEYS)}")
    raw = dict(raw)
    model = dict(raw.get("model") or {})
    preset = model.pop("preset", None)
    if preset is not None:
        if preset not in MODEL_PRESETS:
            raise ConfigError(
                f"{where}: model.preset {preset!r} is not valid; valid: {', '.join(MODEL_PRESETS)}"
            )
        model = {**MODEL_PRESETS[preset], **model}
    raw["model"] = model
    return from_mapping(TrainerConfig, raw, where)


def load_config(path: str | Path, overrides: list[str] | None = None) -> TrainerConfig:
    """Read a trainer YAML file plus ``key.path=value`` overrides.

    Raises:
        ConfigError: unreadable file, invalid YAML, or an invalid config (see
            :func:`config_from_mapping`); the message names the file and key.
    """
    from trainer.config_paths import resolve_paths, with_default_dirs

    path = Path(path)
    raw = read_yaml_file(path, "trainer config")
    if isinstance(raw, dict):
        defaults = (TrainerConfig.run_dir, CheckpointConfig.dir)
        raw = resolve_paths(with_default_dirs(raw, *defaults), path.absolute().parent)
    raw = apply_overrides(raw if isinstance(raw, dict) else {}, overrides or [], str(path))
    return config_from_mapping(resolve_paths(raw, Path.cwd()), str(path))
