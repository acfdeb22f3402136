"""LoRA: low-rank adapters on chosen linear layers, the rest of the model frozen.

``lora: {r, alpha, dropout, targets}`` replaces each targeted ``nn.Linear`` (by the last
part of its name: ``qkv`` names ``q``, ``k`` and ``v``; ``up`` names SwiGLU's ``gate`` and
``up``; ``proj``, ``down``, ``lm_head`` name themselves) with
:class:`LoRALinear`: ``y = x W^T + b + (alpha / r) * dropout(x) A^T B^T``, ``A`` random,
``B`` zero (so training starts from the base model exactly). Only ``A`` and ``B`` train.
The layer keeps ``weight``/``bias`` under their names, so checkpoints and exports keep the
base layout plus ``<layer>.lora_a``/``lora_b``; :func:`merge_lora` folds the adapters into
the weights (exports are plain merged models) and :func:`peft_adapter` gives the same
update in PEFT's layout (an export's ``adapter/``, for ``PeftModel.from_pretrained`` on the
``init_from`` model). :func:`adapters_disabled` runs the base model: DPO's reference, with
no second copy of the weights.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

import torch
from torch import nn

from trainer.config import LoRAConfig

__all__ = ["LoRALinear", "adapters_disabled", "apply_lora", "merge_lora", "peft_adapter"]

TARGET_LAYERS = {"qkv": ("q", "k", "v"), "up": ("gate", "up")}
"""``lora.targets`` names that stand for more than one layer."""


class LoRALinear(nn.Module):
    """A frozen linear layer plus a trainable rank-``r`` update."""

    def __init__(self, base: nn.Linear, config: LoRAConfig) -> None:
        super().__init__()
        self.weight = nn.Parameter(base.weight.detach(), requires_grad=False)
        self.bias = None
        if base.bias is not None:
            self.bias = nn.Parameter(base.bias.detach(), requires_grad=False)
        out_features, in_features = base.weight.shape
        kwargs = {"device": base.weight.device, "dtype": base.weight.dtype}
        self.lora_a = nn.Parameter(torch.empty(config.r, in_features, **kwargs))
        self.lora_b = nn.Parameter(torch.zeros(out_features, config.r, **kwargs))
        nn.init.kaiming_uniform_(self.lora_a, a=math.sqrt(5))
        self.scale = config.alpha / config.r
        self.dropout = nn.Dropout(config.dropout) if config.dropout else nn.Identity()
        self.enabled = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = nn.functional.linear(x, self.weight, self.bias)
        if not self.enabled:
            return out
        return out + (self.dropout(x) @ self.lora_a.t() @ self.lora_b.t()) * self.scale


def apply_lora(model: nn.Module, config: LoRAConfig) -> list[str]:
    """Freeze ``model`` and put adapters on the targeted linear layers; returns their
    names.

    Raises:
        ValueError: no linear layer matches ``config.targets``.
    """
    model.requires_grad_(False)
    layers = {layer for t in config.targets for layer in TARGET_LAYERS.get(t, (t,))}
    names = [
        name
        for name, module in model.named_modules()
        if isinstance(module, nn.Linear) and name.rsplit(".", 1)[-1] in layers
    ]
    if not names:
        raise ValueError(f"lora.targets {list(config.targets)} match no linear layer")
    for name in names:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, LoRALinear(getattr(parent, child), config))
    return names


@contextlib.contextmanager
def adapters_disabled(model: nn.Module) -> Iterator[None]:
    """Run ``model`` (wrapped or not) as its base model inside the block."""
    layers = [m for m in model.modules() if isinstance(m, LoRALinear)]
    for layer in layers:
        layer.enabled = False
    try:
        yield
    finally:
        for layer in layers:
            layer.enabled = True


def merge_lora(weights: dict[str, torch.Tensor], config: LoRAConfig) -> dict[str, torch.Tensor]:
    """A state dict with every ``<layer>.lora_a``/``lora_b`` folded into
    ``<layer>.weight`` (W + alpha / r * B A); unchanged without adapters."""
    adapted = [k[: -len(".lora_a")] for k in weights if k.endswith(".lora_a")]
    if not adapted:
        return weights
    out = {k: v for k, v in weights.items() if not k.endswith((".lora_a", ".lora_b"))}
    scale = config.alpha / config.r
    for layer in adapted:
        a, b = weights[f"{layer}.lora_a"], weights[f"{layer}.lora_b"]
        base = weights[f"{layer}.weight"]
        delta = (b.double() @ a.double()) * scale
        out[f"{layer}.weight"] = (base.double() + delta).to(base.dtype)
    return out


_HF_NAMES = {"attn": ("self_attn", {"q": "q_proj", "k": "k_proj", "v": "v_proj",
                                      "proj": "o_proj"}),
             "mlp": ("mlp", {"gate": "gate_proj", "up": "up_proj", "down": "down_proj"})}  # fmt: skip


def _hf_module(layer: str) -> str:
    """The Hugging Face module name of one of our adapted layers."""
    if layer == "lm_head":
        return "lm_head"
    _, i, part, name = layer.split(".")  # blocks.<i>.attn|mlp.<name>
    parent, names = _HF_NAMES[part]
    return f"model.layers.{i}.{parent}.{names[name]}"


def peft_adapter(
    weights: dict[str, torch.Tensor], config: LoRAConfig, base: str | None
) -> tuple[dict[str, torch.Tensor], dict]:
    """The adapters of ``weights`` as PEFT saves them (``adapter_model.safetensors``
    tensors, ``adapter_config.json``) for the transformers model whose base is ``base``."""
    tensors: dict[str, torch.Tensor] = {}
    for key in sorted(k for k in weights if k.endswith(".lora_a")):
        layer = key[: -len(".lora_a")]
        name = f"base_model.model.{_hf_module(layer)}"
        tensors[f"{name}.lora_A.weight"] = weights[key].contiguous().clone()
        tensors[f"{name}.lora_B.weight"] = weights[f"{layer}.lora_b"].contiguous().clone()
    targets = sorted({k.split(".")[-3] for k in tensors})
    card = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": base,
        "r": config.r,
        "lora_alpha": config.alpha,
        "lora_dropout": config.dropout,
        "target_modules": targets,
        "bias": "none",
        "fan_in_fan_out": False,
        "inference_mode": True,
        "use_rslora": False,
        "modules_to_save": None,
    }
    return tensors, card
