"""Attention with RoPE, and how each forward lays it out.

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

import torch
import torch.nn.functional as F
from torch import nn

from trainer.config import ModelConfig

__all__ = [
    "Attention",
    "AttentionLayout",
    "apply_rope",
    "attention_layout",
    "positions_from_cu_seqlens",
    "rope_tables",
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
