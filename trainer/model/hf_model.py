"""Hugging Face causal-LM checkpoints <-> the trainer's :class:`~trainer.model.transformer.Transformer`.

The trainer's model is the Llama architecture under its own tensor names: ``attn.q``,
``attn.k``, ``attn.v``, ``attn.proj`` and ``mlp.gate``, ``mlp.up``, ``mlp.down`` are
``q_proj``, ``k_proj``, ``v_proj``, ``o_proj`` and ``gate_proj``, ``up_proj``,
``down_proj``, so a round trip is exact. RoPE uses the same rotate-half layout and inverse
frequencies as transformers, so no permutation of q/k rows is needed.

Supported (:data:`ARCHITECTURES`): Llama (GQA, RoPE theta and ``linear``/``llama3``
scaling, tied or untied embeddings), Mistral (adds ``sliding_window``), Qwen2 (adds q/k/v
biases). Which one an export declares follows from the model config: q/k/v biases give
Qwen2, a sliding window gives Mistral, anything else Llama.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from trainer.config import ConfigError, ModelConfig

__all__ = [
    "ARCHITECTURES",
    "hf_config",
    "hf_weights",
    "is_hf_model_dir",
    "model_config_from_hf",
    "read_hf_weights",
    "trainer_weights",
    "unsupported_reason",
]

ARCHITECTURES = {
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
}
"""model_type -> architecture class this module reads and writes."""


def is_hf_model_dir(path: str | Path) -> bool:
    """Does ``path/config.json`` name a ``model_type`` (a Hugging Face model directory)?"""
    try:
        config = json.loads((Path(path) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and "model_type" in config


def _refuse(where: str, message: str) -> ConfigError:
    valid = ", ".join(f"{t} ({a})" for t, a in ARCHITECTURES.items())
    return ConfigError(f"{where}: {message}; supported architectures: {valid}")


def model_config_from_hf(hf: dict[str, Any], where: str) -> ModelConfig:
    """The trainer's ModelConfig for a Hugging Face ``config.json``.

    Raises:
        ConfigError: another architecture, or a feature of it the trainer does not model.
    """
    model_type = hf.get("model_type")
    if model_type not in ARCHITECTURES:
        raise _refuse(where, f"model_type {model_type!r} is not supported")
    if hf.get("hidden_act", "silu") != "silu":
        raise _refuse(where, f"hidden_act {hf['hidden_act']!r} (only silu/SwiGLU)")
    if hf.get("attention_bias") or hf.get("mlp_bias"):
        raise _refuse(where, "attention_bias/mlp_bias on a Llama model is not supported")
    if model_type == "qwen2" and hf.get("use_sliding_window"):
        raise _refuse(where, "Qwen2 use_sliding_window (per-layer windows) is not supported")
    heads, hidden = hf["num_attention_heads"], hf["hidden_size"]
    if hf.get("head_dim") not in (None, hidden // heads):
        raise _refuse(where, f"head_dim {hf['head_dim']} != hidden_size / heads")
    rope_scaling = hf.get("rope_scaling")
    window = hf.get("sliding_window") if model_type == "mistral" else None
    try:
        return ModelConfig(
            vocab_size=hf["vocab_size"],
            hidden_size=hidden,
            n_layers=hf["num_hidden_layers"],
            n_heads=heads,
            n_kv_heads=hf.get("num_key_value_heads") or heads,
            intermediate_size=hf["intermediate_size"],
            max_seq_len=hf.get("max_position_embeddings", 2048),
            norm="rmsnorm",
            norm_eps=hf.get("rms_norm_eps", 1e-6),
            mlp="swiglu",
            rope_theta=float(hf.get("rope_theta", 10000.0)),
            rope_scaling=dict(rope_scaling) if rope_scaling else None,
            sliding_window=window,
            # transformers' default for all three config classes
            tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
            qkv_bias=model_type == "qwen2",
            init_std=hf.get("initializer_range", 0.02),
        )
    except KeyError as exc:
        raise ConfigError(f"{where}: config.json lacks {exc.args[0]!r}") from exc
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from exc


def unsupported_reason(config: ModelConfig) -> str | None:
    """Why ``config`` has no standard Hugging Face architecture, or None if it has one."""
    if config.norm != "rmsnorm" or config.mlp != "swiglu" or config.bias:
        return "only rmsnorm + swiglu models without linear biases map to Llama/Mistral/Qwen2"
    if config.qkv_bias and config.sliding_window is not None:
        return "q/k/v biases (Qwen2) together with a sliding window (Mistral)"
    return None


def hf_config(config: ModelConfig, special: dict[str, int | None]) -> dict[str, Any]:
    """A ``config.json`` for ``config`` (see :func:`unsupported_reason` first)."""
    model_type = "qwen2" if config.qkv_bias else "mistral" if config.sliding_window else "llama"
    out = {
        "architectures": [ARCHITECTURES[model_type]],
        "model_type": model_type,
        "vocab_size": config.vocab_size,
        "hidden_size": config.hidden_size,
        "intermediate_size": config.ffn_size,
        "num_hidden_layers": config.n_layers,
        "num_attention_heads": config.n_heads,
        "num_key_value_heads": config.kv_heads,
        "head_dim": config.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": config.max_seq_len,
        "rms_norm_eps": config.norm_eps,
        "rope_theta": config.rope_theta,
        "rope_scaling": config.rope_scaling,
        "tie_word_embeddings": config.tie_embeddings,
        "initializer_range": config.init_std,
        "attention_dropout": 0.0,
        "use_cache": True,
        "torch_dtype": "float32",
        **{k: v for k, v in special.items() if v is not None},
    }
    if model_type == "mistral":
        out["sliding_window"] = config.sliding_window
    if model_type == "qwen2":
        out |= {"use_sliding_window": False, "sliding_window": None, "max_window_layers": 0}
    if model_type == "llama":
        out |= {"attention_bias": False, "mlp_bias": False, "pretraining_tp": 1}
    return out


def _layer_map(i: int) -> dict[str, str]:
    hf, ours = f"model.layers.{i}.", f"blocks.{i}."
    return {
        ours + "attn.proj.weight": hf + "self_attn.o_proj.weight",
        ours + "mlp.down.weight": hf + "mlp.down_proj.weight",
        ours + "attn_norm.weight": hf + "input_layernorm.weight",
        ours + "mlp_norm.weight": hf + "post_attention_layernorm.weight",
    }


def _projection_map(layer: int, config: ModelConfig) -> dict[str, str]:
    """The trainer's q/k/v and gate/up tensor names -> Hugging Face's, for one layer."""
    ours, attn, mlp = (
        f"blocks.{layer}.",
        f"model.layers.{layer}.self_attn.",
        f"model.layers.{layer}.mlp.",
    )
    out = {f"{ours}attn.{p}.weight": f"{attn}{p}_proj.weight" for p in "qkv"}
    if config.qkv_bias:
        out |= {f"{ours}attn.{p}.bias": f"{attn}{p}_proj.bias" for p in "qkv"}
    return out | {f"{ours}mlp.{p}.weight": f"{mlp}{p}_proj.weight" for p in ("gate", "up")}


def trainer_weights(
    hf: dict[str, torch.Tensor], config: ModelConfig, where: str
) -> dict[str, torch.Tensor]:
    """Hugging Face tensor names -> the trainer's state dict.

    Raises:
        ConfigError: a tensor the config needs is missing.
    """
    try:
        out = {
            "embed.weight": hf["model.embed_tokens.weight"],
            "norm.weight": hf["model.norm.weight"],
        }
        out["lm_head.weight"] = (
            out["embed.weight"] if config.tie_embeddings else hf["lm_head.weight"]
        )
        for i in range(config.n_layers):
            out |= {ours: hf[name] for ours, name in _layer_map(i).items()}
            out |= {ours: hf[name] for ours, name in _projection_map(i, config).items()}
    except KeyError as exc:
        raise ConfigError(f"{where}: the weights lack {exc.args[0]!r}") from exc
    if "score.weight" in hf:  # a reward model's scalar head
        out["score.weight"] = hf["score.weight"]
    return out


def hf_weights(state: dict[str, torch.Tensor], config: ModelConfig) -> dict[str, torch.Tensor]:
    """The trainer's state dict -> Hugging Face tensor names (contiguous copies)."""
    out = {
        "model.embed_tokens.weight": state["embed.weight"],
        "model.norm.weight": state["norm.weight"],
    }
    if not config.tie_embeddings:
        out["lm_head.weight"] = state["lm_head.weight"]
    for i in range(config.n_layers):
        out |= {name: state[ours] for ours, name in _layer_map(i).items()}
        out |= {name: state[ours] for ours, name in _projection_map(i, config).items()}
    if (
        "score.weight" in state
    ):  # a reward model's scalar head (HF's *ForSequenceClassification name)
        out["score.weight"] = state["score.weight"]
    return {k: v.contiguous().clone() for k, v in out.items()}


def read_hf_weights(path: str | Path) -> dict[str, torch.Tensor]:
    """All tensors of ``model.safetensors`` or of the shards its index names (fp32 kept as
    stored; other dtypes too: the trainer casts when it loads them).

    Raises:
        ConfigError: no safetensors weights in ``path`` (``.bin`` files are not read).
    """
    from safetensors.torch import load_file

    path = Path(path)
    index = path / "model.safetensors.index.json"
    if index.is_file():
        weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        files = sorted(set(weight_map.values()))
    elif (path / "model.safetensors").is_file():
        files = ["model.safetensors"]
    else:
        raise ConfigError(
            f"init_from {str(path)!r}: no model.safetensors or model.safetensors.index.json "
            "(PyTorch .bin checkpoints are not read; save with safe_serialization=True)"
        )
    weights: dict[str, torch.Tensor] = {}
    for name in files:
        if not (path / name).is_file():
            raise ConfigError(
                f"init_from {str(path)!r}: shard {name} named by the index is missing"
            )
        weights.update(load_file(str(path / name)))
    return weights
