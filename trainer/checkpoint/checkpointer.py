"""Checkpoints (resume) and exported weights (hand-off to the next stage or inference).

A checkpoint is a directory ``<dir>/step_<N>/``:

* ``train_state.pt`` (rank 0): full model and optimizer state dicts (gathered from DDP or
  FSDP2 shards), scheduler, GradScaler, loop counters, the resolved config;
* ``model/`` instead of the state dicts when ``distributed.tp`` or ``pp`` is above 1: a
  distributed checkpoint (``torch.distributed.checkpoint``, every rank writes its shards,
  parameters and optimizer state by fully qualified name), so a run saved on one
  ``(dp, tp, pp)`` mesh resumes on another (same ``dp``: the data order is per dp rank);
* ``rank_<r>.pt`` (one rank per data-parallel rank ``r``): its RNG states and its data
  source's position;
* ``meta.json``: step, world size, mesh, stage; written last.

It is written under ``.tmp-step_<N>`` and renamed into place by rank 0 after every rank
has written its part, so a crash never leaves a directory that looks complete. The
checkpoint directory must be shared by all ranks (one filesystem across nodes).

Only what the trainer wrote is ever removed: ``checkpoint.dir`` and every checkpoint hold
the output marker of :mod:`dataforge.io.owned_output` (a checkpoint from before markers is
recognised by its files: only ``meta.json`` naming its step, ``train_state.pt`` and one
``rank_<r>.pt`` per rank). A ``checkpoint.dir`` that is a non-empty folder the trainer did
not write, or that holds a ``step_*`` / ``.tmp-step_*`` entry it did not write, is refused
before any work (:func:`check_checkpoint_dir`). A checkpoint is removed by renaming it into
a fresh marked ``.trash-*`` folder first, so a kill while deleting leaves no partial
``step_*``; the next start empties such folders.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

from dataforge.io.owned_output import (
    OUTPUT_MARKER,
    OutputPathError,
    check_dir_target,
    is_owned_dir,
)
from trainer.checkpoint.model_state import DCP_DIR, load_weights, sharded_state
from trainer.checkpoint.safe_load import load_torch_file, read_meta, read_train_state
from trainer.config import CheckpointConfig, ConfigError
from trainer.parallel.distributed import DistEnv, barrier

__all__ = ["Checkpointer", "check_checkpoint_dir", "fsync_dir"]

STEP_PREFIX = "step_"
TMP_PREFIX = ".tmp-step_"
TRASH_PREFIX = ".trash-"
WHAT = "dataforge train"
"""The writer's name in the output markers and in the errors."""
_STEP_NAME = re.compile(r"step_(\d+)")
_STATE_FILE = re.compile(r"meta\.json|train_state\.pt|rank_\d{5}\.pt")
_DCP_FILE = re.compile(r"(__\d+)?\.metadata(\.tmp)?|__\d+_\d+\.distcp")


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


def _mark(folder: Path) -> None:
    marker = json.dumps({"dataforge_output": WHAT}) + "\n"
    (folder / OUTPUT_MARKER).write_text(marker, encoding="utf-8")


def _state_files_only(path: Path) -> set[str] | None:
    """The names in folder ``path`` if it is a real folder holding only regular files a
    save writes (the marker, ``meta.json``, ``train_state.pt``, ``rank_<r>.pt``), else None."""
    if path.is_symlink() or not path.is_dir():
        return None
    names = set()
    for entry in path.iterdir():
        if entry.name == DCP_DIR and _dcp_files_only(entry):
            names.add(entry.name)
            continue
        allowed = entry.name == OUTPUT_MARKER or _STATE_FILE.fullmatch(entry.name)
        if not allowed or entry.is_symlink() or not entry.is_file():
            return None
        names.add(entry.name)
    return names


def _dcp_files_only(path: Path) -> bool:
    """``path`` is a real folder of only the files a distributed checkpoint writes."""
    if path.is_symlink() or not path.is_dir():
        return False
    return all(
        _DCP_FILE.fullmatch(e.name) and e.is_file() and not e.is_symlink() for e in path.iterdir()
    )


def _is_unmarked_checkpoint(path: Path, names: set[str]) -> bool:
    """A complete checkpoint from before markers: ``meta.json`` naming the folder's step,
    ``train_state.pt`` and the rank files of its world size."""
    try:
        meta = json.loads((path / "meta.json").read_text(encoding="utf-8"))
        step, ranks = int(meta["step"]), int(meta["world_size"])
    except (OSError, ValueError, KeyError, TypeError):
        return False
    match = _STEP_NAME.fullmatch(path.name)
    needed = {"meta.json", "train_state.pt"} | {f"rank_{r:05d}.pt" for r in range(ranks)}
    return match is not None and int(match[1]) == step and needed <= names


def is_checkpoint(path: Path) -> bool:
    """``path`` is a checkpoint folder a save wrote (marked, or from before markers)."""
    if path.is_symlink() or not path.is_dir() or not _STEP_NAME.fullmatch(path.name):
        return False
    if is_owned_dir(path):
        return True
    names = _state_files_only(path)
    return names is not None and _is_unmarked_checkpoint(path, names)


def _holds_checkpoints(root: Path) -> bool:
    """A ``checkpoint.dir`` from before markers: it holds a checkpoint or an export (marked),
    directly, or a checkpoint in a ``superseded-*`` folder."""
    for entry in root.iterdir():
        if is_checkpoint(entry) or (is_owned_dir(entry) and not entry.is_symlink()):
            return True
        if entry.name.startswith("superseded-") and entry.is_dir() and not entry.is_symlink():
            if any(is_checkpoint(p) for p in entry.iterdir()):
                return True
    return False


def check_checkpoint_dir(root: Path) -> None:
    """Refuse a ``checkpoint.dir`` the trainer did not write, before any work (a symlink
    to a folder is checked at its target).

    Raises:
        ConfigError: ``root`` is a file or device, a non-empty folder without the output
            marker and without checkpoints, or holds a ``step_*`` or ``.tmp-step_*`` entry
            that is not a checkpoint the trainer wrote.
    """
    folder = root.resolve() if root.is_symlink() else root
    try:
        check_dir_target(folder, WHAT, legacy=_holds_checkpoints)
    except OutputPathError as exc:
        if folder.is_dir() and not folder.is_symlink():
            raise ConfigError(
                f"checkpoint.dir {folder}: a non-empty folder dataforge train did not write (no "
                f"{OUTPUT_MARKER}, no checkpoints); choose another checkpoint.dir"
            ) from None
        raise ConfigError(f"checkpoint.dir {exc}") from None
    for entry in folder.iterdir() if folder.is_dir() else ():
        if entry.name.startswith(STEP_PREFIX) and not is_checkpoint(entry):
            why = "is not a checkpoint dataforge train wrote"
        elif entry.name.startswith(TMP_PREFIX) and _state_files_only(entry) is None:
            why = "is not a partial checkpoint dataforge train wrote"
        else:
            continue
        raise ConfigError(
            f"checkpoint.dir {entry}: {why}; move it out of {folder} or choose another "
            "checkpoint.dir"
        )


def _empty_trash(trash: Path) -> None:
    """Remove a ``.trash-*`` folder: its contents first, the marker that proves it ours last."""
    for entry in trash.iterdir():
        if entry.name != OUTPUT_MARKER:
            shutil.rmtree(entry)  # ours: moved into our marked trash by _discard
    (trash / OUTPUT_MARKER).unlink(missing_ok=True)  # ours: written by _discard
    trash.rmdir()  # ours: made by mkdtemp in _discard, empty now


class Checkpointer:
    """Saves, finds and restores checkpoints under ``config.dir``.

    Raises:
        ConfigError: ``config.dir`` may not hold checkpoints (:func:`check_checkpoint_dir`).
    """

    def __init__(self, config: CheckpointConfig, env: DistEnv) -> None:
        self.config, self.env = config, env
        self.root = Path(config.dir)
        check_checkpoint_dir(self.root)
        barrier(env)  # every rank has checked before the main rank marks or cleans it
        if env.is_main:
            self.root.mkdir(parents=True, exist_ok=True)
            if not is_owned_dir(self.root):
                _mark(self.root)
            for trash in self.root.glob(f"{TRASH_PREFIX}*"):
                if is_owned_dir(trash) and not trash.is_symlink():
                    _empty_trash(trash)  # a removal a kill cut short

    def _discard(self, path: Path) -> None:
        """Remove checkpoint ``path`` (proved ours by the caller) so that a kill midway
        leaves no partial ``step_*``: renamed into a fresh marked folder, then removed."""
        trash = Path(tempfile.mkdtemp(prefix=TRASH_PREFIX, dir=self.root))
        _mark(trash)
        os.rename(path, trash / path.name)  # ours: a checkpoint, proved by the caller
        _empty_trash(trash)

    def checkpoints(self) -> list[Path]:
        """Complete checkpoints this trainer wrote, oldest first."""
        if not self.root.is_dir():
            return []
        found = [p for p in self.root.iterdir() if is_checkpoint(p) and (p / "meta.json").is_file()]
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
                path.rename(target / path.name)  # ours: a checkpoint (is_checkpoint); moved
        barrier(self.env)
        return target if found else None

    def save(self, step: int, stage: str, objects: dict[str, Any], source: Any) -> Path:
        """Write checkpoint ``step`` atomically; a collective call (every rank)."""
        model, optimizer, env = objects["model"], objects["optimizer"], self.env
        sharded = env.mesh is not None
        if not sharded:
            options = StateDictOptions(full_state_dict=True, cpu_offload=True)
            model_state, optim_state = get_state_dict(model, optimizer, options=options)
        final = self.root / f"{STEP_PREFIX}{step:08d}"
        tmp = self.root / f".tmp-{final.name}"
        if env.is_main:
            self._clear_tmp(tmp)
            tmp.mkdir(parents=True)  # exclusive: fails if anything is there
            _mark(tmp)
        barrier(env)
        if sharded:
            import torch.distributed.checkpoint as dcp

            dcp.save(sharded_state(model, optimizer), checkpoint_id=tmp / DCP_DIR)
        if env.counts_batches:  # one rank per dp rank: the others read the same batches
            rank_state = {"rng": _rng_state(env.device), "data": source.state_dict()}
            torch.save(rank_state, tmp / f"rank_{env.dp_rank:05d}.pt")
        if env.is_main:
            train_state = {} if sharded else {"model": model_state, "optimizer": optim_state}
            train_state |= {
                "scheduler": objects["scheduler"].state_dict(),
                "scaler": objects["scaler"].state_dict(),
                "loop": objects["loop"],
                "config": objects["config"],
            }
            torch.save(train_state, tmp / "train_state.pt")
        barrier(env)
        if env.is_main:
            meta = {"step": step, "stage": stage, "world_size": env.world_size}
            meta |= {"dp": env.dp, "tp": env.tp, "pp": env.pp}
            (tmp / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
            fsync_dir(tmp)
            if final.exists() or final.is_symlink():  # an earlier run's step of this number
                if not is_checkpoint(final):
                    raise ConfigError(f"{final}: not a checkpoint dataforge train wrote; move it")
                self._discard(final)
            os.replace(tmp, final)  # ours: tmp made above; final absent now
            fsync_dir(self.root)
            for old in self.checkpoints()[: -self.config.keep_last]:
                self._discard(old)  # ours: checkpoints() lists only is_checkpoint folders
        barrier(env)
        return final

    def _clear_tmp(self, tmp: Path) -> None:
        """Remove a killed save's ``tmp`` if it holds only what a save writes."""
        if not (tmp.exists() or tmp.is_symlink()):
            return
        if _state_files_only(tmp) is None:
            raise ConfigError(f"{tmp}: not a partial checkpoint dataforge train wrote; move it")
        shutil.rmtree(tmp)  # ours: only the marker and state files a save writes

    def load(
        self, path: Path, stage: str, objects: dict[str, Any], source: Any, config_json: str
    ) -> dict[str, Any]:
        """Restore everything from ``path``; returns the saved loop counters.

        Raises:
            ConfigError: the checkpoint belongs to another stage or world size, or cannot
                be resumed with the current config (``config_json``): a changed
                ``train.max_steps`` (the schedule is laid out over it), a model or data
                loader that no longer fits the saved state (the message names the keys
                that changed); a file in it that is unreadable or forged (read as data
                only, :mod:`trainer.checkpoint.safe_load`).
        """
        meta = read_meta(path)
        if meta["stage"] != stage:
            raise ConfigError(f"{path} is a {meta['stage']!r} checkpoint, not {stage!r}")
        saved_dp = meta.get("dp", meta["world_size"])
        if saved_dp != self.env.dp:
            raise ConfigError(
                f"{path} was written by {saved_dp} data-parallel ranks; resuming with "
                f"{self.env.dp} would change the per-rank data order and RNG streams "
                "(keep distributed.dp, changing tp or pp freely, or --from-scratch with "
                "init_from)"
            )
        state, saved = read_train_state(path)
        current = json.loads(config_json)
        _check_max_steps(path, saved, current)
        try:
            load_weights(path / DCP_DIR, state, objects["model"], objects["optimizer"], self.env)
        except ConfigError:
            raise  # a forged or unreadable file: not a changed config
        except (RuntimeError, KeyError, ValueError) as exc:
            raise _mismatch(path, "the model", saved, current, ("model",)) from exc
        objects["scheduler"].load_state_dict(state["scheduler"])
        objects["scaler"].load_state_dict(state["scaler"])
        rank_state = load_torch_file(path / f"rank_{self.env.dp_rank:05d}.pt", ("rng", "data"))
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
