"""Decoder-only transformer: RoPE, RMSNorm/LayerNorm, SwiGLU/GELU, SDPA attention.

Attention runs one of three ways, decided once per forward (see :func:`attention_layout`):

* plain rows (no ``cu_seqlens``): ``scaled_dot_product_attention(is_causal=True)``, which
  takes the flash kernel on CUDA. Rows are one sequence each, right-padded, so causal
  attention already keeps real tokens from seeing padding.
* packed rows on CUDA: ``torch.nn.attention.varlen.varlen_attn`` (flash varlen) over the
  flattened batch, with sequence boundaries from ``cu_seqlens``.
* packed rows elsewhere (CPU, or no varlen kernel), or a sliding window without varlen:
  SDPA with a boolean block-diagonal causal mask built from ``position_ids`` (a sequence
  starts where the position is 0).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Iterable

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from trainer.config import ModelConfig

__all__ = [
    "AttentionLayout",
    "Transformer",
    "attention_layout",
    "block_inputs",
    "flops_per_token",
    "run_blocks",
]


@functools.cache
def _varlen_kernel():
    """``torch.nn.attention.varlen.varlen_attn`` (torch >= 2.9) or None; imported on first
    CUDA use only, since the import pulls in torch._dynamo (seconds)."""
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    return varlen_attn


@dataclasses.dataclass
class AttentionLayout:
    """How every layer of one forward attends; built once, shared by all blocks."""

    mask: torch.Tensor | None = None
    """(B, 1, T, T) bool, True = may attend; None with ``cu_seqlens`` None: causal rows."""
    cu_seqlens: torch.Tensor | None = None
    """int32 (N+1,) boundaries over the flattened B*T tokens, for the varlen kernel."""
    max_seqlen: int = 0
    window: int | None = None


def _use_varlen(device: torch.device, half_precision: bool) -> bool:
    return device.type == "cuda" and half_precision and _varlen_kernel() is not None


def positions_from_cu_seqlens(cu_seqlens: torch.Tensor, batch: int, seq_len: int) -> torch.Tensor:
    """Position ids (B, T) restarting at 0 at each boundary of flattened ``cu_seqlens``."""
    flat = torch.arange(batch * seq_len, device=cu_seqlens.device)
    starts = cu_seqlens.to(flat.dtype)
    seg = torch.searchsorted(starts[1:], flat, right=True).clamp(max=starts.numel() - 2)
    return (flat - starts[seg]).view(batch, seq_len)


def _segments(position_ids: torch.Tensor) -> torch.Tensor:
    """Segment id per token: a new segment where the position is 0 or a row starts."""
    starts = position_ids == 0
    starts[:, 0] = True
    return starts.flatten().cumsum(0).view_as(position_ids)


def _flat_cu_seqlens(position_ids: torch.Tensor, cu_seqlens: torch.Tensor | None) -> torch.Tensor:
    total = position_ids.numel()
    if cu_seqlens is None:
        starts = position_ids == 0
        starts[:, 0] = True
        bounds = torch.nonzero(starts.flatten()).flatten()
        cu_seqlens = torch.cat([bounds, bounds.new_tensor([total])])
    elif int(cu_seqlens[-1]) < total:  # trailing padding becomes its own (ignored) sequence
        cu_seqlens = torch.cat([cu_seqlens, cu_seqlens.new_tensor([total])])
    return cu_seqlens.to(device=position_ids.device, dtype=torch.int32)


def attention_layout(
    batch: int,
    seq_len: int,
    device: torch.device,
    position_ids: torch.Tensor | None,
    cu_seqlens: torch.Tensor | None,
    window: int | None,
    half_precision: bool = False,
    packed: bool | None = None,
) -> AttentionLayout:
    """Choose the attention path for one forward (see the module docstring).

    ``half_precision``: attention inputs will be bf16/fp16, which the flash varlen kernel
    needs (fp32 runs take the masked path). ``packed`` (None: ``cu_seqlens`` given): rows
    hold sequences that start where ``position_ids`` is 0.
    """
    packed = cu_seqlens is not None if packed is None else packed
    if not packed and window is None:
        return AttentionLayout()
    use_varlen = _use_varlen(device, half_precision)
    if packed and position_ids is None:
        position_ids = positions_from_cu_seqlens(cu_seqlens, batch, seq_len)
    if position_ids is None or not packed:
        position_ids = torch.arange(seq_len, device=device).expand(batch, seq_len)
    if use_varlen:
        cu = _flat_cu_seqlens(position_ids, cu_seqlens if packed else None)
        max_seqlen = int((cu[1:] - cu[:-1]).max())
        return AttentionLayout(cu_seqlens=cu, max_seqlen=max_seqlen, window=window)
    idx = torch.arange(seq_len, device=device)
    allowed = idx[None, :] <= idx[:, None]
    if window is not None:
        allowed = allowed & (idx[:, None] - idx[None, :] < window)
    seg = _segments(position_ids.to(device))
    same = seg[:, :, None] == seg[:, None, :]
    return AttentionLayout(mask=(same & allowed)[:, None], window=window)


def rope_frequencies(config: ModelConfig, device: torch.device | None = None) -> torch.Tensor:
    """RoPE inverse frequencies (head_dim/2,), with Hugging Face's ``linear`` or ``llama3``
    scaling when ``config.rope_scaling`` names one (same formulas as transformers)."""
    half = config.head_dim // 2
    inv_freq = 1.0 / config.rope_theta ** (torch.arange(half, device=device).float() / half)
    scaling = config.rope_scaling or {}
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "linear":
        return inv_freq / scaling["factor"]
    if kind == "llama3":
        factor, low, high = (
            scaling["factor"],
            scaling["low_freq_factor"],
            scaling["high_freq_factor"],
        )
        old_len = scaling["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv_freq
        scaled = torch.where(wavelen > old_len / low, inv_freq / factor, inv_freq)
        smooth = (old_len / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = (wavelen >= old_len / high) & (wavelen <= old_len / low)
        return torch.where(medium, smoothed, scaled)
    return inv_freq


def rope_tables(config: ModelConfig, device: torch.device | None = None) -> torch.Tensor:
    """(max_seq_len, head_dim/2, 2) float32 cos/sin table."""
    inv_freq = rope_frequencies(config, device)
    angles = torch.outer(torch.arange(config.max_seq_len, device=device).float(), inv_freq)
    return torch.stack([angles.cos(), angles.sin()], dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate (B, T, H, D) by per-token angles (B, T, 1, D/2), rotate-half layout."""
    x1, x2 = x.float().chunk(2, dim=-1)
    out = torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)
    return out.type_as(x)


class Attention(nn.Module):
    """Self-attention with separate ``q``/``k``/``v`` projections (so tensor parallelism
    can shard each by heads) and the output projection ``proj``.

    Head counts are read from the projections' output widths at run time (``view(..., -1,
    head_dim)``), so a tensor-parallel shard attends over its local ``n_heads / tp`` query
    and ``kv_heads / tp`` key/value heads with the same code.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.n_heads, self.kv_heads, self.head_dim = (
            config.n_heads,
            config.kv_heads,
            config.head_dim,
        )
        bias = config.bias or config.qkv_bias
        d, kv_width = config.hidden_size, self.kv_heads * self.head_dim
        # Created q, k, v in this order: their initial weights are the rows of the fused
        # projection older versions drew (the same seed gives the same model).
        self.q = nn.Linear(d, self.n_heads * self.head_dim, bias=bias)
        self.k = nn.Linear(d, kv_width, bias=bias)
        self.v = nn.Linear(d, kv_width, bias=bias)
        self.proj = nn.Linear(d, d, bias=config.bias)
        self.register_load_state_dict_pre_hook(_split_fused_qkv)

    def forward(self, x: torch.Tensor, rope: tuple, layout: AttentionLayout) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = (z(x).view(b, t, -1, self.head_dim) for z in (self.q, self.k, self.v))
        q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        if layout.cu_seqlens is not None:
            window = (-1, 0) if layout.window is None else (layout.window - 1, 0)
            flat = [z.reshape(b * t, z.shape[2], self.head_dim) for z in (q, k, v)]
            cu, m = layout.cu_seqlens, layout.max_seqlen
            out = _varlen_kernel()(*flat, cu, cu, m, m, window_size=window)
            return self.proj(out.reshape(b, t, -1))
        gqa = q.shape[2] != k.shape[2]
        q, k, v = (z.transpose(1, 2) for z in (q, k, v))
        if layout.mask is None:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=layout.mask, enable_gqa=gqa)
        return self.proj(out.transpose(1, 2).reshape(b, t, -1))


def _split_fused_qkv(module: Attention, state: dict, prefix: str, *args) -> None:
    """Read the fused ``qkv`` tensors of checkpoints and exports from before the split."""
    sizes = [z.weight.shape[0] for z in (module.q, module.k, module.v)]
    for kind in ("weight", "bias"):
        fused = state.pop(f"{prefix}qkv.{kind}", None)
        if fused is not None:
            for name, part in zip("qkv", fused.split(sizes), strict=True):
                state[f"{prefix}{name}.{kind}"] = part


class MLP(nn.Module):
    """SwiGLU (``down(silu(gate(x)) * up(x))``) or GELU (``down(gelu(up(x)))``)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.swiglu = config.mlp == "swiglu"
        d, f = config.hidden_size, config.ffn_size
        # gate before up: together they are the fused gate/up rows of older versions
        self.gate = nn.Linear(d, f, bias=config.bias) if self.swiglu else None
        self.up = nn.Linear(d, f, bias=config.bias)
        self.down = nn.Linear(f, d, bias=config.bias)
        self.register_load_state_dict_pre_hook(_split_fused_gate_up)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.swiglu:
            return self.down(F.silu(self.gate(x)) * self.up(x))
        return self.down(F.gelu(self.up(x), approximate="tanh"))


def _split_fused_gate_up(module: MLP, state: dict, prefix: str, *args) -> None:
    """Read the fused SwiGLU ``up`` (gate rows above up rows) of older checkpoints."""
    if not module.swiglu:
        return
    for kind in ("weight", "bias"):
        fused = state.get(f"{prefix}up.{kind}")
        if fused is not None and fused.shape[0] == 2 * module.up.weight.shape[0]:
            state[f"{prefix}gate.{kind}"], state[f"{prefix}up.{kind}"] = fused.chunk(2)


def make_norm(config: ModelConfig) -> nn.Module:
    if config.norm == "rmsnorm":
        return nn.RMSNorm(config.hidden_size, eps=config.norm_eps)
    return nn.LayerNorm(config.hidden_size, eps=config.norm_eps, bias=config.bias)


class Block(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.attn_norm, self.attn = make_norm(config), Attention(config)
        self.mlp_norm, self.mlp = make_norm(config), MLP(config)

    def forward(self, x: torch.Tensor, rope: tuple, layout: AttentionLayout) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), rope, layout)
        return x + self.mlp(self.mlp_norm(x))


def block_inputs(
    config: ModelConfig,
    rope_table: torch.Tensor,
    input_ids: torch.Tensor,
    weight_dtype: torch.dtype,
    position_ids: torch.Tensor | None,
    cu_seqlens: torch.Tensor | None,
    packed: bool | None = None,
) -> tuple[tuple[torch.Tensor, torch.Tensor], AttentionLayout]:
    """What every block of one forward takes besides the hidden states: the RoPE cos/sin
    of each token and the attention layout. ``input_ids`` (B, T) gives the shape and
    device; ``packed`` (None: ``cu_seqlens`` given) says rows hold several sequences told
    apart by ``position_ids`` restarting at 0 (the pipeline stages pass positions only).

    Raises:
        ValueError: the rows are longer than ``config.max_seq_len``.
    """
    b, t = input_ids.shape
    device = input_ids.device
    if t > config.max_seq_len:
        raise ValueError(f"sequence length {t} > model.max_seq_len {config.max_seq_len}")
    half = weight_dtype in (torch.bfloat16, torch.float16) or (
        torch.is_autocast_enabled(device.type)
        and torch.get_autocast_dtype(device.type) in (torch.bfloat16, torch.float16)
    )
    layout = attention_layout(
        b, t, device, position_ids, cu_seqlens, config.sliding_window, half, packed
    )
    if position_ids is None:
        if cu_seqlens is not None:
            position_ids = positions_from_cu_seqlens(cu_seqlens, b, t)
        else:
            position_ids = torch.arange(t, device=device).expand(b, t)
    table = rope_table[position_ids][:, :, None]  # (B, T, 1, D/2, 2)
    return (table[..., 0], table[..., 1]), layout


def run_blocks(
    blocks: Iterable[nn.Module],
    x: torch.Tensor,
    rope: tuple,
    layout: AttentionLayout,
    checkpointing: bool,
) -> torch.Tensor:
    """The hidden states after ``blocks`` in order (recomputed in backward if
    ``checkpointing``)."""
    for block in blocks:
        if checkpointing:
            x = checkpoint(block, x, rope, layout, use_reentrant=False)
        else:
            x = block(x, rope, layout)
    return x


class Transformer(nn.Module):
    """Token ids (B, T) -> logits (B, T, vocab)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        if config.vocab_size is None:
            raise ValueError("ModelConfig.vocab_size must be set (resolve it from the tokenizer)")
        self.config = config
        self.activation_checkpointing = False
        self.embed = nn.Embedding(config.vocab_size, config.hidden_size)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self.norm = make_norm(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_embeddings:
            self.lm_head.weight = self.embed.weight
        self.register_buffer("rope", rope_tables(config), persistent=False)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """GPT-2 init: N(0, std) everywhere, residual projections scaled by 1/sqrt(2L)."""
        std = self.config.init_std
        for name, module in self.named_modules():
            if isinstance(module, nn.Linear):
                scale = 1 / math.sqrt(2 * self.config.n_layers)
                is_residual = name.endswith(("attn.proj", "mlp.down"))
                nn.init.normal_(module.weight, 0.0, std * scale if is_residual else std)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, (nn.RMSNorm, nn.LayerNorm)):
                module.reset_parameters()
        nn.init.normal_(self.embed.weight, 0.0, std)
        self.rope = rope_tables(self.config, self.embed.weight.device)

    def forward(
        self,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor | None = None,
        cu_seqlens: torch.Tensor | None = None,
        head: str = "lm",
    ) -> torch.Tensor:
        """Logits (B, T, vocab); ``head="score"``: the scalar head's value at every
        position (B, T) (see :meth:`add_score_head`)."""
        b, t = input_ids.shape
        rope, layout = block_inputs(
            self.config, self.rope, input_ids, self.embed.weight.dtype, position_ids, cu_seqlens
        )
        x = run_blocks(self.blocks, self.embed(input_ids), rope, layout, self.checkpointing)
        if head == "score":
            return self.score(self.norm(x)).squeeze(-1)
        return self.lm_head(self.norm(x))

    @property
    def checkpointing(self) -> bool:
        """Recompute block activations in the backward pass (training only)."""
        return self.activation_checkpointing and self.training

    def add_score_head(self) -> None:
        """Add ``score``: hidden -> one scalar (a reward model's head, Hugging Face's
        ``score.weight`` of ``*ForSequenceClassification``), zero-initialised so every
        sequence starts at the same score. It is part of the state dict from then on."""
        weight = self.embed.weight
        self.score = nn.Linear(self.config.hidden_size, 1, bias=False)
        self.score.to(device=weight.device, dtype=weight.dtype)
        nn.init.zeros_(self.score.weight)

    def num_params(self, exclude_embedding: bool = False) -> int:
        """Parameter count (shared tensors once); optionally without the input embedding."""
        total = sum(p.numel() for p in {id(p): p for p in self.parameters()}.values())
        if exclude_embedding and not self.config.tie_embeddings:
            total -= self.embed.weight.numel()
        return total


def flops_per_token(config: ModelConfig, seq_len: int) -> float:
    """Training FLOPs per token: 6N for the matmuls plus attention scores and values.

    N counts every matmul weight (blocks and the output head; the input embedding is a
    lookup), and attention adds 6 * 2 * layers * hidden * context per token, the PaLM /
    llm-foundry convention (no discount for causality; the context is capped by the
    sliding window).
    """
    d, f, layers, vocab = config.hidden_size, config.ffn_size, config.n_layers, config.vocab_size
    mlp = d * f * (3 if config.mlp == "swiglu" else 2)
    attn = 2 * d * d + 2 * d * config.kv_heads * config.head_dim
    matmul_params = layers * (attn + mlp) + d * vocab
    context = min(seq_len, config.sliding_window or seq_len)
    return 6.0 * matmul_params + 12.0 * layers * d * context
