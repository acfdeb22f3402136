"""What a run starts from: the model shape and weights of ``init_from`` (a trainer export
or a Hugging Face Llama/Mistral/Qwen2 directory, see :mod:`trainer.model.hf_model`) and the
tokenizer's vocabulary.

With ``init_from`` the checkpoint's ``config.json`` decides the model's shape: a preset or
model keys in the trainer config are overridden, and the start-up notice lists what
changed. A tokenizer with more ids than the model has embeddings is refused before any
step (such ids would fail mid-step with an IndexError).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from dataforge.typed_config import from_mapping
from trainer.config import ConfigError, ModelConfig, TrainerConfig, to_plain
from trainer.model.hf_model import (
    is_hf_model_dir,
    model_config_from_hf,
    read_hf_weights,
    trainer_weights,
)

__all__ = ["load_exported", "pretrained_model_config", "resolve_model", "tokenizer_vocab_size"]


def load_exported(path: str | Path) -> tuple[ModelConfig, dict[str, torch.Tensor]]:
    """Model config and trainer-named float32 weights of an export or of a Hugging Face
    model directory (Llama, Mistral, Qwen2; sharded safetensors included). Only JSON and
    safetensors are read, formats that hold no code (never a pickle such as ``.bin``).

    Raises:
        ConfigError: missing files, an unsupported architecture, missing tensors, or a
            weights file that is not safetensors.
    """
    path = Path(path)
    where = f"init_from {str(path)!r}"
    if is_hf_model_dir(path):
        card = json.loads((path / "config.json").read_text(encoding="utf-8"))
        config = model_config_from_hf(card, where)
        try:
            weights = trainer_weights(read_hf_weights(path), config, where)
        except SafetensorError as exc:
            raise ConfigError(f"{where}: a weights file is not safetensors ({exc})") from None
        return config, {k: v.float() for k, v in weights.items()}
    try:
        card = json.loads((path / "config.json").read_text(encoding="utf-8"))
        weights = load_file(str(path / "model.safetensors"))
    except (OSError, ValueError, SafetensorError) as exc:
        raise ConfigError(f"{where}: not a trainer export or Hugging Face model: {exc}") from exc
    if not isinstance(card, dict) or "model" not in card:
        raise ConfigError(f"{where}: config.json has neither model_type nor a trainer 'model'")
    config = from_mapping(ModelConfig, card["model"], f"{path}/config.json: model")
    if config.tie_embeddings:
        weights["lm_head.weight"] = weights["embed.weight"]
    return config, weights


def pretrained_model_config(path: str | Path) -> ModelConfig:
    """The model config of an export or a Hugging Face model directory (weights unread).

    Raises:
        ConfigError: no readable config.json, or an unsupported architecture.
    """
    path = Path(path)
    where = f"init_from {str(path)!r}"
    try:
        card = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{where}: no readable config.json ({exc})") from exc
    if isinstance(card, dict) and "model_type" in card:
        return model_config_from_hf(card, where)
    if not isinstance(card, dict) or "model" not in card:
        raise ConfigError(f"{where}: config.json has neither model_type nor a trainer 'model'")
    return from_mapping(ModelConfig, card["model"], f"{path}/config.json: model")


def tokenizer_vocab_size(path: str) -> int:
    """Ids of a dataforge tokenizer directory or a Hugging Face tokenizer (``tokenizer.json``).

    Raises:
        ConfigError: neither kind of tokenizer is there.
    """
    from dataforge.tokenization.hf_tokenizer import tokenizer_vocab_size as vocab_size

    try:
        return vocab_size(path)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"tokenizer {path!r}: {exc}") from exc


def resolve_model(config: TrainerConfig) -> TrainerConfig:
    """The model shape the run trains: ``init_from``'s config.json if given (overriding the
    trainer config's model section, with a notice), else the config's own with
    ``vocab_size`` from the tokenizer when null.

    Raises:
        ConfigError: unreadable tokenizer or ``init_from``, or a tokenizer with more ids
            than the model has embeddings.
    """
    model = config.model
    vocab = tokenizer_vocab_size(config.tokenizer) if config.tokenizer else None
    if config.init_from:
        imported = pretrained_model_config(config.init_from)
        ours, theirs = to_plain(model), to_plain(imported)
        changed = [f"{k} {ours[k]}->{theirs[k]}" for k in ours if ours[k] not in (None, theirs[k])]
        if changed:
            print(
                f"[trainer] init_from {config.init_from}: model shape from its config.json "
                f"overrides the config's ({', '.join(changed)})",
                flush=True,
            )
        model = imported
    elif model.vocab_size is None:
        model = dataclasses.replace(model, vocab_size=vocab)
    if vocab is not None and vocab > model.vocab_size:
        raise ConfigError(
            f"tokenizer {config.tokenizer!r} has {vocab} ids but the model only {model.vocab_size} "
            "embeddings (model.vocab_size); token ids past the table would fail mid-step"
        )
    return dataclasses.replace(config, model=model)
