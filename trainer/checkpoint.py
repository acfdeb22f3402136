"""Checkpoints (resume) and exported weights (hand-off to the next stage or inference).

A checkpoint is a directory ``<dir>/step_<N>/``:

* ``train_state.pt`` (rank 0): full model and optimizer state dicts (gathered from DDP or
  FSDP2 shards), scheduler, GradScaler, loop counters, the resolved config;
* ``rank_<r>.pt`` (every rank): its RNG states and its data source's position;
* ``meta.json``: step, world size, stage; written last.

It is written under ``.tmp-step_<N>`` and renamed into place by rank 0 after every rank
has written its part, so a crash never leaves a directory that looks complete. The
checkpoint directory must be shared by all ranks (one filesystem across nodes).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import time
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_state_dict,
    set_state_dict,
)

from trainer.config import CheckpointConfig, ConfigError
from trainer.parallel import DistEnv, barrier

__all__ = ["Checkpointer", "fsync_dir"]

STEP_PREFIX = "step_"


def _rng_state(device: torch.device) -> dict[str, Any]:
    state = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def _set_rng_state(state: dict[str, Any], device: torch.device) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


class Checkpointer:
    """Saves, finds and restores checkpoints under ``config.dir``."""

    def __init__(self, config: CheckpointConfig, env: DistEnv) -> None:
        self.config, self.env = config, env
        self.root = Path(config.dir)

    def checkpoints(self) -> list[Path]:
        """Complete checkpoints, oldest first."""
        if not self.root.is_dir():
            return []
        found = [
            p
            for p in self.root.iterdir()
            if p.name.startswith(STEP_PREFIX) and (p / "meta.json").is_file()
        ]
        return sorted(found, key=lambda p: int(p.name[len(STEP_PREFIX) :]))

    def latest(self) -> Path | None:
        found = self.checkpoints()
        return found[-1] if found else None

    def supersede_existing(self) -> Path | None:
        """``--from-scratch``: move existing checkpoints aside (never deleted) so that a
        later ``--resume auto`` cannot pick them up. Returns where they went."""
        found = self.checkpoints()
        stamp, n = time.strftime("%Y%m%dT%H%M%S"), 0
        target = self.root / f"superseded-{stamp}"
        while target.exists():
            n += 1
            target = self.root / f"superseded-{stamp}-{n}"
        if self.env.is_main and found:
            target.mkdir(parents=True)
            for path in found:
                path.rename(target / path.name)
        barrier(self.env)
        return target if found else None

    def save(self, step: int, stage: str, objects: dict[str, Any], source: Any) -> Path:
        """Write checkpoint ``step`` atomically; a collective call (every rank)."""
        model, optimizer = objects["model"], objects["optimizer"]
        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        model_state, optim_state = get_state_dict(model, optimizer, options=options)
        final = self.root / f"{STEP_PREFIX}{step:08d}"
        tmp = self.root / f".tmp-{final.name}"
        if self.env.is_main:
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
        barrier(self.env)
        rank_state = {"rng": _rng_state(self.env.device), "data": source.state_dict()}
        torch.save(rank_state, tmp / f"rank_{self.env.rank:05d}.pt")
        if self.env.is_main:
            train_state = {
                "model": model_state,
                "optimizer": optim_state,
                "scheduler": objects["scheduler"].state_dict(),
                "scaler": objects["scaler"].state_dict(),
                "loop": objects["loop"],
                "config": objects["config"],
            }
            torch.save(train_state, tmp / "train_state.pt")
        barrier(self.env)
        if self.env.is_main:
            meta = {"step": step, "stage": stage, "world_size": self.env.world_size}
            (tmp / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
            fsync_dir(tmp)
            if final.exists():  # an earlier run's step of the same number (--from-scratch)
                shutil.rmtree(final)
            os.replace(tmp, final)
            fsync_dir(self.root)
            for old in self.checkpoints()[: -self.config.keep_last]:
                shutil.rmtree(old)
        barrier(self.env)
        return final

    def load(
        self, path: Path, stage: str, objects: dict[str, Any], source: Any, config_json: str
    ) -> dict[str, Any]:
        """Restore everything from ``path``; returns the saved loop counters.

        Raises:
            ConfigError: the checkpoint belongs to another stage or world size, or cannot
                be resumed with the current config (``config_json``): a changed
                ``train.max_steps`` (the schedule is laid out over it), a model or data
                loader that no longer fits the saved state (the message names the keys
                that changed).
        """
        meta = json.loads((path / "meta.json").read_text(encoding="utf-8"))
        if meta["stage"] != stage:
            raise ConfigError(f"{path} is a {meta['stage']!r} checkpoint, not {stage!r}")
        if meta["world_size"] != self.env.world_size:
            raise ConfigError(
                f"{path} was written by {meta['world_size']} ranks; resuming with "
                f"{self.env.world_size} would change the per-rank data order and RNG streams "
                "(use the same world size, or --from-scratch with init_from)"
            )
        # mmap: ranks on one node share the page cache instead of each holding a copy.
        state = torch.load(path / "train_state.pt", mmap=True, weights_only=True)
        saved, current = json.loads(state["config"]), json.loads(config_json)
        _check_max_steps(path, saved, current)
        try:
            set_state_dict(
                objects["model"],
                objects["optimizer"],
                model_state_dict=state["model"],
                optim_state_dict=state["optimizer"],
                options=StateDictOptions(full_state_dict=True),
            )
        except (RuntimeError, KeyError, ValueError) as exc:
            raise _mismatch(path, "the model", saved, current, ("model",)) from exc
        objects["scheduler"].load_state_dict(state["scheduler"])
        objects["scaler"].load_state_dict(state["scaler"])
        rank_state = torch.load(path / f"rank_{self.env.rank:05d}.pt", weights_only=True)
        _set_rng_state(rank_state["rng"], self.env.device)
        try:
            source.load_state_dict(rank_state["data"])
        except ValueError as exc:
            raise _mismatch(path, "the data loader", saved, current, ("data",)) from exc
        return state["loop"]


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out |= _flat(item, f"{prefix}{key}.")
        return out
    return {prefix[:-1]: value}


def changed_keys(saved: dict, current: dict, sections: tuple[str, ...] = ()) -> list[str]:
    """``key: old -> new`` for every dotted config key (under ``sections``, all when empty)
    whose value differs between two plain configs."""
    old, new = _flat(saved), _flat(current)
    keys = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
    keys = [k for k in keys if not sections or k.split(".")[0] in sections]
    return [f"{k}: {json.dumps(old.get(k))} -> {json.dumps(new.get(k))}" for k in keys]


def _mismatch(path: Path, what: str, saved: dict, current: dict, sections: tuple) -> ConfigError:
    changed = changed_keys(saved, current, sections) or changed_keys(saved, current)
    shown = "; ".join(changed) if changed else "no config key, so its input files"
    return ConfigError(
        f"{path}: cannot resume, {what} no longer fits this checkpoint (changed since it "
        f"was saved: {shown}); restore the old values, or start anew with --from-scratch"
    )


def _check_max_steps(path: Path, saved: dict, current: dict) -> None:
    old, new = saved["train"]["max_steps"], current["train"]["max_steps"]
    if old != new:
        raise ConfigError(
            f"{path}: train.max_steps is {new} but the run was saved with {old}, and its "
            f"learning-rate schedule (warmup, cosine to optim.min_lr) spans {old} steps; "
            f"keep max_steps {old}, or start a new run with --from-scratch (init_from "
            "an export to continue from its weights)"
        )


def fsync_dir(path: Path) -> None:
    """Make a rename inside ``path`` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
