"""The model's shape (``model``, with its presets) and its LoRA adapters (``lora``)."""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

__all__ = ["LORA_TARGETS", "MODEL_PRESETS", "ROPE_SCALINGS", "LoRAConfig", "ModelConfig"]


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


LORA_TARGETS = ("qkv", "proj", "up", "down", "lm_head")


@dataclasses.dataclass(frozen=True)
class LoRAConfig:
    """Low-rank adapters (:mod:`trainer.model.lora`); off while ``r`` is 0."""

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
