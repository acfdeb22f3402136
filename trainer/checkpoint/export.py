"""Exported weights: the hand-off to the next stage, to transformers and to inference.

An export directory is a Hugging Face model directory whenever the model has a standard
architecture (:func:`trainer.model.hf_model.unsupported_reason`; every preset has): Llama,
Mistral or Qwen2 tensor names in ``model.safetensors``, ``config.json`` (plus a
``dataforge`` entry: stage, step, tokens seen), ``generation_config.json`` and the
tokenizer. ``transformers.AutoModelForCausalLM.from_pretrained(path)`` loads it. The
tokenizer is the trainer's tokenizer directory converted to remote code (dataforge
tokenizers, ``trust_remote_code=True``; it normalizes raw text as the training data's
``clean`` stage did and follows its ``add_bos``, see :func:`_pipeline_text_settings`) or
copied (Hugging Face tokenizers, or those of the model ``init_from`` imported). Every file
is 0644 and the card names the tokenizer, not a path of this machine. A model outside those architectures (LayerNorm, GELU,
biases) is exported in the trainer's own layout (``model`` config + its tensor names),
which ``init_from`` also reads
(:mod:`trainer.model.pretrained`). A LoRA run's export is the merged model plus ``adapter/``, the
adapters alone in PEFT's layout, whose base is the run's ``init_from``.

The export directory is built in a sibling temporary folder and renamed into place
(:func:`dataforge.io.owned_output.owned_dir`); an existing directory is replaced only if it
is an export (it holds the output marker, or is an export from before markers: a
``config.json`` naming a dataforge stage and step, and no sub-folder), never a user's
folder: that is refused before any weights are read.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

from dataforge.io.owned_output import OutputPathError, check_dir_target, owned_dir
from trainer.checkpoint.model_state import DCP_DIR, read_sharded_weights
from trainer.checkpoint.safe_load import read_meta, read_train_state
from trainer.config import ConfigError, TrainerConfig, to_plain
from trainer.model.hf_model import hf_config, hf_weights, is_hf_model_dir, unsupported_reason
from trainer.model.lora import merge_lora, peft_adapter
from trainer.parallel.distributed import DistEnv, barrier

__all__ = [
    "TOKENIZER_FILES",
    "check_export_dir",
    "export_checkpoint",
    "export_weights",
    "write_export",
]

EXPORT = "dataforge train export"
"""The writer's name in the output marker and in its errors."""

TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "added_tokens.json",
    "chat_template.jinja",
)
"""A Hugging Face tokenizer's files, copied into an export when present."""


def export_weights(
    model: nn.Module, config: TrainerConfig, env: DistEnv, out_dir: Path, info: dict
) -> None:
    """Gather the full weights and write the export (collective; rank 0 writes)."""
    if env.pp > 1:
        weights = _gather_stages(model, env)
    else:
        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        weights = get_model_state_dict(model, options=options)
    if env.is_main:
        write_export(weights, config, out_dir, info)
    barrier(env)


def _gather_stages(model: nn.Module, env: DistEnv) -> dict[str, torch.Tensor]:
    """The whole model's weights on rank 0 from every pipeline stage (each first gathered
    over its tp and dp shards); an empty dict elsewhere."""
    import torch.distributed as dist

    # cpu_offload would keep the gathered weights on global rank 0 only: stage leaders
    # on other ranks need theirs.
    options = StateDictOptions(full_state_dict=True)
    own = {k: v.detach().cpu() for k, v in get_model_state_dict(model, options=options).items()}
    if env.dp_rank or env.tp_rank:
        return {}
    stages: list[Any] = [None] * env.pp if env.is_main else []
    dist.gather_object(
        own, stages if env.is_main else None, dst=0, group=env.mesh["pp"].get_group()
    )
    return {k: v for stage in stages for k, v in stage.items()} if env.is_main else {}


def write_export(
    weights: dict[str, torch.Tensor], config: TrainerConfig, out_dir: Path, info: dict
) -> None:
    """Write ``weights`` of ``config.model`` as an export directory (see the module doc).

    Raises:
        ConfigError: ``out_dir`` exists and is not an export (see :func:`check_export_dir`).
    """
    adapter = None
    if config.lora.enabled and unsupported_reason(config.model) is None:
        adapter = peft_adapter(weights, config.lora, config.init_from)
    weights = merge_lora(weights, config.lora)  # LoRA adapters folded into the weights
    try:
        with owned_dir(out_dir, EXPORT, legacy=_is_unmarked_export) as tmp:
            _write_files(tmp, weights, config, info, out_dir)
            if adapter is not None:
                _write_adapter(tmp / "adapter", *adapter)
            for path in tmp.rglob("*"):
                # safetensors writes 0600: an export is read by other users and servers.
                path.chmod(0o644 if path.is_file() else 0o755)
    except OutputPathError as exc:
        raise ConfigError(str(exc)) from None


def check_export_dir(out_dir: Path) -> None:
    """Refuse ``out_dir`` before any work if an export may not be written there.

    Raises:
        ConfigError: ``out_dir`` is a file, a symlink, a device, or a non-empty folder that
            is not an export.
    """
    try:
        check_dir_target(out_dir, EXPORT, legacy=_is_unmarked_export)
    except OutputPathError as exc:
        raise ConfigError(str(exc)) from None


def _is_unmarked_export(path: Path) -> bool:
    """An export written before output markers: a ``config.json`` holding a dataforge
    stage and step (the transformers layout's ``dataforge`` entry, or the trainer
    layout's top level), and only regular files."""
    try:
        card = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    info = card.get("dataforge", card) if isinstance(card, dict) else None
    if not (isinstance(info, dict) and "stage" in info and "step" in info):
        return False
    return all(p.is_file() and not p.is_symlink() for p in path.iterdir())


def _write_files(
    tmp: Path, weights: dict[str, torch.Tensor], config: TrainerConfig, info: dict, out_dir: Path
) -> None:
    model = config.model
    reason = unsupported_reason(model)
    info = _portable(info)
    if reason is None:
        special = _write_tokenizer(tmp, config)
        _save_weights(hf_weights(weights, model), tmp / "model.safetensors", out_dir)
        end_of_turn = special.pop("end_of_turn_token_id", None)
        card = hf_config(model, special) | {"dataforge": info}
        _write_json(tmp / "config.json", card)
        _write_generation_config(tmp, config.init_from, special, end_of_turn)
    else:
        print(f"[trainer] export: trainer layout, not transformers ({reason})", flush=True)
        if model.tie_embeddings:
            weights = {k: v for k, v in weights.items() if k != "lm_head.weight"}
        weights = {k: v.contiguous() for k, v in weights.items()}
        _save_weights(weights, tmp / "model.safetensors", out_dir)
        _write_json(tmp / "config.json", {"model": to_plain(model), **info})


def _portable(info: dict) -> dict:
    """``info`` with the tokenizer named by its directory's name: a local path of the
    machine that exported means nothing where the export is used."""
    tokenizer = info.get("tokenizer")
    if not tokenizer:
        return info
    return info | {"tokenizer": str(tokenizer).rstrip("/").rsplit("/", 1)[-1]}


def _write_adapter(out: Path, tensors: dict[str, torch.Tensor], card: dict) -> None:
    """``adapter/``: the LoRA update alone, in PEFT's layout (``init_from`` is its base)."""
    out.mkdir()
    save_file(tensors, str(out / "adapter_model.safetensors"), metadata={"format": "pt"})
    _write_json(out / "adapter_config.json", card)


def _save_weights(weights: dict[str, torch.Tensor], path: Path, shown: Path) -> None:
    """``save_file`` with a line before (size) and after (time): large exports take a while."""
    size = sum(t.numel() * t.element_size() for t in weights.values())
    print(
        f"[trainer] export: writing {len(weights)} tensors ({size / 2**20:,.1f} MiB) -> {shown}",
        flush=True,
    )
    t0 = time.perf_counter()
    save_file(weights, str(path), metadata={"format": "pt"})
    print(f"[trainer] export: weights written in {time.perf_counter() - t0:.1f} s", flush=True)


def _write_generation_config(
    out: Path, init_from: str | None, special: dict[str, Any], end_of_turn: int | None
) -> None:
    """``generation_config.json``: an imported model's own, else the special ids; with a
    chat tokenizer ``eos_token_id`` lists ``<eos>`` and ``<|end|>``, so ``generate()``
    stops at the end of an assistant turn."""
    source = Path(init_from or "") / "generation_config.json"
    if init_from and source.is_file() and end_of_turn is None:
        shutil.copyfile(source, out / "generation_config.json")
        return
    generation = {k: v for k, v in special.items() if v is not None}
    if end_of_turn is not None:
        generation["eos_token_id"] = [special["eos_token_id"], end_of_turn]
    _write_json(out / "generation_config.json", generation)


def _write_json(path: Path, value: Any) -> None:
    path.write_text(json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False), "utf-8")


def _write_tokenizer(out: Path, config: TrainerConfig) -> dict[str, Any]:
    """Put the tokenizer next to the weights; returns its special ids for config.json."""
    tokenizer, init_from = config.tokenizer, config.init_from
    if tokenizer:
        from dataforge.tokenization.hf_tokenizer import local_tokenizer_dir

        tokenizer = str(local_tokenizer_dir(tokenizer))  # a URI: the node's cached copy
    if tokenizer and (Path(tokenizer) / "spm.model").is_file():
        from dataforge.tokenization.hf_export import end_of_turn_id, write_hf_tokenizer

        clean, add_bos = _pipeline_text_settings(config)
        special = write_hf_tokenizer(
            tokenizer, out, clean=clean, add_bos=add_bos, max_seq_len=config.model.max_seq_len
        )
        return special | {"end_of_turn_token_id": end_of_turn_id(tokenizer)}
    source = tokenizer if tokenizer and Path(tokenizer).is_dir() else init_from
    if source is None:
        return {}
    for name in TOKENIZER_FILES:
        if (Path(source) / name).is_file():
            shutil.copyfile(Path(source) / name, out / name)
    if init_from and is_hf_model_dir(init_from):
        card = json.loads((Path(init_from) / "config.json").read_text(encoding="utf-8"))
        return {k: card.get(k) for k in ("bos_token_id", "eos_token_id", "pad_token_id")}
    return {}


def _pipeline_text_settings(config: TrainerConfig) -> tuple[Any, bool]:
    """How the pipeline runs that wrote the training streams prepared text, from their
    ``manifest.json`` (next to a local ``mds/``): the ``clean`` stage's settings (True
    where no run says: those of the tokenizer's own training text) and whether sequences
    began with ``<bos>`` (a tokenizing op's ``add_bos``; True where no run says). With
    several runs the first that says wins."""
    from dataforge.text.clean import CleanConfig

    clean_fields = {f.name for f in dataclasses.fields(CleanConfig)}
    found: dict[str, list] = {"clean": [], "add_bos": []}
    for stage in _pipeline_stages(config):
        if stage.get("op") == "clean":
            found["clean"].append({k: v for k, v in stage.items() if k in clean_fields})
        elif stage.get("op") in ("tokenize", "format_sft", "format_dpo") and "add_bos" in stage:
            found["add_bos"].append(bool(stage["add_bos"]))
    for key, values in found.items():
        if len({json.dumps(v, sort_keys=True) for v in values}) > 1:
            print(f"[trainer] export: the data's pipelines differ in {key}; using the first")
    clean = CleanConfig(**found["clean"][0]) if found["clean"] else True
    return clean, found["add_bos"][0] if found["add_bos"] else True


def _pipeline_stages(config: TrainerConfig) -> list[dict]:
    """The stages of every pipeline run whose manifest lies next to a local data stream."""
    streams = config.data.loader.get("streams") or []
    stages = []
    for stream in streams if isinstance(streams, list) else [streams]:
        path = stream.get("path") if isinstance(stream, dict) else stream
        if not isinstance(path, str) or "://" in path:
            continue
        try:
            manifest = json.loads((Path(path).parent / "manifest.json").read_text("utf-8"))
            run_stages = manifest["config"]["stages"]
        except (OSError, ValueError, KeyError, TypeError):
            continue  # no run of ours, or unreadable: nothing recorded to follow
        stages.extend(s for s in run_stages if isinstance(s, dict))
    return stages


def export_checkpoint(checkpoint: str | Path, out_dir: str | Path) -> Path:
    """``dataforge train export CKPT``: the export of a checkpoint's weights.

    Raises:
        ConfigError: ``checkpoint`` is not a complete checkpoint directory, or ``out_dir``
            may not be written (:func:`check_export_dir`).
    """
    from trainer.config import config_from_mapping

    checkpoint, out_dir = Path(checkpoint), Path(out_dir)
    check_export_dir(out_dir)
    meta_path = checkpoint / "meta.json"
    state_path = checkpoint / "train_state.pt"
    if not meta_path.is_file() or not state_path.is_file():
        raise ConfigError(
            f"{checkpoint}: not a complete checkpoint (needs meta.json and train_state.pt; "
            "give a <checkpoint.dir>/step_N directory)"
        )
    meta = read_meta(checkpoint)
    state, saved = read_train_state(checkpoint)
    config = config_from_mapping(saved, f"{checkpoint}/train_state.pt")
    loop = state["loop"]
    info = {"stage": meta["stage"], "step": meta["step"], "tokens_seen": loop.get("tokens", 0)}
    weights = _checkpoint_weights(checkpoint, state)
    try:
        write_export(weights, config, out_dir, info | {"tokenizer": config.tokenizer})
    except KeyError as exc:
        raise ConfigError(f"{checkpoint}: no weight {exc} in it, which its model has") from None
    return out_dir


def _checkpoint_weights(checkpoint: Path, state: dict[str, Any]) -> dict[str, torch.Tensor]:
    """The model weights of a checkpoint, read as data
    (:mod:`trainer.checkpoint.safe_load`): the full state dict in ``train_state.pt``, or
    else its distributed checkpoint.

    Raises:
        ConfigError: the weights are not tensors by name, or the distributed checkpoint is
            forged or does not hold what its index declares.
    """
    if "model" not in state:
        try:
            return read_sharded_weights(checkpoint / DCP_DIR)
        except ConfigError:
            raise
        except ValueError as exc:
            raise ConfigError(f"{checkpoint}: its weights do not load ({exc})") from None
    weights = state["model"]
    if not isinstance(weights, dict) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in weights.items()
    ):
        raise ConfigError(f"{checkpoint}/train_state.pt: its 'model' is not tensors by name")
    return weights
