"""The model and optimizer part of a checkpoint: full state dicts (gathered on rank 0, in
``train_state.pt``) or, with a device mesh, a distributed checkpoint (``model/``, every
rank its shards, keyed by parameter name so that another tp/pp/FSDP split reshards it on
load; the optimizer state is flattened per parameter, since pipeline stages hold different
parameter groups).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_state_dict,
)

from trainer.parallel.distributed import DistEnv

__all__ = ["DCP_DIR", "load_weights", "read_sharded_weights", "sharded_state"]

DCP_DIR = "model"
"""The distributed checkpoint's folder inside a checkpoint (tp or pp above 1)."""


def sharded_state(model: Any, optimizer: Any) -> dict[str, Any]:
    """This rank's model and optimizer state by parameter name (DTensor shards as they
    are), the layout distributed checkpointing saves and reshards on load."""
    options = StateDictOptions(flatten_optimizer_state_dict=True)
    model_state, optim_state = get_state_dict(model, optimizer, options=options)
    return {"model": model_state, "optimizer": optim_state}


def load_weights(folder: Path, state: dict, model: Any, optimizer: Any, env: DistEnv) -> None:
    """Restore model and optimizer from ``state`` (``train_state.pt``: full state dicts)
    or, where it holds none, from the distributed checkpoint ``folder`` (into any mesh).

    Raises:
        ConfigError: a forged or unreadable distributed checkpoint
            (:mod:`trainer.checkpoint.safe_load`).
        ValueError, KeyError, RuntimeError: the saved state does not fit ``model``.
    """
    if "model" not in state:
        from trainer.checkpoint.safe_load import load_dcp

        sharded = sharded_state(model, optimizer)
        load_dcp(sharded, folder)
        options = StateDictOptions(flatten_optimizer_state_dict=True)
        set_state_dict(
            model,
            optimizer,
            model_state_dict=sharded["model"],
            optim_state_dict=sharded["optimizer"],
            options=options,
        )
        return
    model_state, optim_state = state["model"], state["optimizer"]
    if env.pp > 1:  # a stage takes its own layers of the whole model
        names = set(get_model_state_dict(model))
        model_state = {k: v for k, v in model_state.items() if k in names}
        optim_state = _stage_optimizer_state(optim_state, names)
    set_state_dict(
        model,
        optimizer,
        model_state_dict=model_state,
        optim_state_dict=optim_state,
        options=StateDictOptions(full_state_dict=True),
    )


def _stage_optimizer_state(optim_state: dict, names: set[str]) -> dict:
    """The part of a whole model's optimizer state dict (by parameter name) for the
    parameters ``names`` of a pipeline stage."""
    groups = [
        {**group, "params": [p for p in group["params"] if p in names]}
        for group in optim_state["param_groups"]
    ]
    state = {k: v for k, v in optim_state["state"].items() if k in names}
    return {"state": state, "param_groups": groups}


def read_sharded_weights(folder: Path) -> dict[str, torch.Tensor]:
    """The model's full weights from a distributed checkpoint folder (one process).

    Raises:
        ConfigError: a forged or unreadable checkpoint (:mod:`trainer.checkpoint.safe_load`).
        ValueError: its files do not hold what its index declares.
    """
    from trainer.checkpoint.safe_load import load_dcp, read_dcp_metadata

    metadata = read_dcp_metadata(folder).state_dict_metadata
    weights = {
        key[len("model.") :]: torch.empty(tuple(meta.size), dtype=meta.properties.dtype)
        for key, meta in metadata.items()
        if key.startswith("model.") and hasattr(meta, "size")
    }
    load_dcp({"model": weights}, folder)
    return weights
