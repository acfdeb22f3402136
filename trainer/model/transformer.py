"""Decoder-only transformer: RoPE, RMSNorm/LayerNorm, SwiGLU/GELU, SDPA attention
(:mod:`trainer.model.attention`)."""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from trainer.config import ModelConfig
from trainer.model.attention import (
    Attention,
    AttentionLayout,
    attention_layout,
    positions_from_cu_seqlens,
    rope_tables,
)

__all__ = [
    "AttentionLayout",
    "Transformer",
    "attention_layout",
    "block_inputs",
    "flops_per_token",
    "positions_from_cu_seqlens",
    "run_blocks",
]


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
