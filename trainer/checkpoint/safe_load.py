"""Checkpoint files read as data: whoever wrote a checkpoint, loading it runs none of its code.

Checkpoints travel (downloaded, copied between clusters), and two of their file kinds are
pickles, which can name any function to call while they load:

* ``train_state.pt`` and ``rank_<r>.pt`` (``torch.save``): :func:`load_torch_file` reads them
  with ``torch.load(weights_only=True)``, torch's allow-list of tensors and plain containers;
* a distributed checkpoint (``model/``): ``torch.distributed.checkpoint`` reads its
  ``.metadata`` with a plain ``pickle.load`` and the non-tensor values of its ``.distcp``
  files (the optimizer's lr, betas, flags) with torch's unrestricted unpickler. This
  module is the one place that wraps its public reader and planner to close both, saying why:
  :func:`read_dcp_metadata` unpickles ``.metadata`` through an allow-list of the classes torch
  writes there (checked against a real save in tests/trainer/test_checkpoint_safety.py) and
  checks every entry, and :func:`load_dcp` hands ``dcp.load`` that checked metadata and a
  planner that reads the values with ``weights_only=True``. The few private torch names a
  real ``.metadata`` holds appear here only as allow-list strings, resolved by pickle.

:func:`read_meta` and :func:`read_train_state` read a checkpoint's ``meta.json`` and
``train_state.pt`` for resume and export. A file refused is a
:class:`~trainer.config.ConfigError` naming it (one line, exit 2).
"""

from __future__ import annotations

import io
import json
import pickle
import re
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.metadata import (
    BytesStorageMetadata,
    Metadata,
    TensorStorageMetadata,
)

from trainer.config import ConfigError

__all__ = [
    "METADATA_FILE",
    "load_dcp",
    "load_torch_file",
    "read_dcp_metadata",
    "read_meta",
    "read_train_state",
]

METADATA_FILE = ".metadata"
"""The distributed checkpoint's index (``FileSystemWriter`` writes it on the coordinator)."""
_DATA_FILE = re.compile(r"__\d+_\d+\.distcp")
"""The data files ``FileSystemWriter`` writes: the only files an index may point at."""
_DCP = "torch.distributed.checkpoint"
_METADATA_GLOBALS = frozenset(
    {(f"{_DCP}.metadata", name) for name in ("Metadata", "MetadataIndex", "StorageMeta")}
    | {(f"{_DCP}.metadata", name) for name in ("TensorStorageMetadata", "BytesStorageMetadata")}
    | {(f"{_DCP}.metadata", name) for name in ("ChunkStorageMetadata", "TensorProperties")}
    | {
        (f"{_DCP}.metadata", "_MEM_FORMAT_ENCODING"),  # an Enum: TensorProperties' memory format
        (f"{_DCP}.filesystem", "_StorageInfo"),  # where an entry's bytes lie: file, offset, length
        ("torch", "Size"),
        ("torch.serialization", "_get_layout"),  # how torch pickles a layout: a lookup by name
        ("pathlib", "PosixPath"),  # StorageMeta.checkpoint_id: the folder it was saved to
        ("pathlib._local", "PosixPath"),  # the same class, as Python 3.13 names it
    }
)
"""Every global a ``.metadata`` that ``dcp.save`` writes names (besides torch dtypes)."""


class _MetadataUnpickler(pickle.Unpickler):
    """Resolves only the metadata classes and torch dtypes: any other global (a function to
    call while loading, such as ``os.system``) stops the load."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _METADATA_GLOBALS:
            return super().find_class(module, name)
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        raise pickle.UnpicklingError(f"refused global {module}.{name} (not checkpoint metadata)")


def read_dcp_metadata(folder: Path) -> Metadata:
    """The index of the distributed checkpoint ``folder``, read as data and checked.

    Raises:
        ConfigError: no readable ``.metadata``, one naming anything but the metadata classes,
            or entries that point outside the folder's data files or declare more tensor
            bytes than those files hold.
    """
    path = Path(folder) / METADATA_FILE
    try:
        with path.open("rb") as file:
            metadata = _MetadataUnpickler(file).load()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the checkpoint's index ({exc})") from None
    except Exception as exc:  # noqa: BLE001 - whatever a malformed pickle raises, it is refused
        raise ConfigError(
            f"{path}: not a distributed checkpoint index dataforge train wrote, not loaded "
            f"({type(exc).__name__}: {exc})"
        ) from None
    problem = _metadata_problem(metadata, Path(folder))
    if problem:
        raise ConfigError(
            f"{path}: not a distributed checkpoint index dataforge train wrote: {problem}"
        )
    return metadata


def _metadata_problem(metadata: Any, folder: Path) -> str | None:
    """What makes unpickled ``metadata`` unusable (None if nothing)."""
    if not isinstance(metadata, Metadata) or not isinstance(metadata.state_dict_metadata, dict):
        return f"holds a {type(metadata).__name__}, not a Metadata"
    if not isinstance(metadata.storage_data, dict):
        return "no storage_data table"
    tensor_bytes = 0
    for key, entry in metadata.state_dict_metadata.items():
        if isinstance(entry, BytesStorageMetadata):
            continue
        if not isinstance(entry, TensorStorageMetadata) or not isinstance(entry.size, torch.Size):
            return f"entry {key!r} is a {type(entry).__name__}, not tensor or bytes metadata"
        dtype = getattr(entry.properties, "dtype", None)
        if not isinstance(dtype, torch.dtype):
            return f"entry {key!r} has dtype {dtype!r}"
        tensor_bytes += entry.size.numel() * dtype.itemsize
    for info in metadata.storage_data.values():
        name = getattr(info, "relative_path", None)
        if not isinstance(name, str) or not _DATA_FILE.fullmatch(name):
            return f"an entry points at {name!r}, not a __<rank>_<n>.distcp file of the folder"
        if getattr(info, "transform_descriptors", None):
            return f"an entry in {name} is stored through {info.transform_descriptors!r}"
    # A forged index could otherwise make a reader allocate any size before reading a byte.
    held = sum(p.stat().st_size for p in folder.iterdir() if _DATA_FILE.fullmatch(p.name))
    if tensor_bytes > held:
        return f"declares {tensor_bytes} bytes of tensors but its data files hold {held}"
    return None


class _CheckedReader(dcp.FileSystemReader):
    """``FileSystemReader`` whose ``read_metadata`` returns the index read by
    :func:`read_dcp_metadata` rather than ``pickle.load`` it again (any rank, any call)."""

    def __init__(self, folder: Path, metadata: Metadata) -> None:
        super().__init__(str(folder))
        self.checked_metadata = metadata

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:  # safe: unpickles nothing
        return self.checked_metadata


class _DataOnlyPlanner(dcp.DefaultLoadPlanner):
    """``DefaultLoadPlanner`` whose non-tensor values are read with ``weights_only=True``."""

    def load_bytes(self, read_item: Any, value: io.BytesIO) -> None:
        # The parent unpickles ``value`` with weights_only=False; it gets the bytes of what
        # the allow-listed load read instead, so where the value goes stays torch's logic.
        clean = io.BytesIO()
        torch.save(torch.load(value, weights_only=True), clean)
        clean.seek(0)
        super().load_bytes(read_item, clean)


def load_dcp(state: dict[str, Any], folder: Path) -> None:
    """``dcp.load(state, checkpoint_id=folder)`` reading the checkpoint as data only; a
    collective call where a process group is up, as ``dcp.load`` is.

    Raises:
        ConfigError: a forged or unreadable ``.metadata`` (every rank, before any collective),
            or a data file that holds anything but tensors and plain values.
        ValueError: the checkpoint does not fit ``state`` (other keys or shapes).
    """
    metadata = read_dcp_metadata(folder)
    try:
        dcp.load(state, storage_reader=_CheckedReader(folder, metadata), planner=_DataOnlyPlanner())
    except dcp.CheckpointException as exc:  # dcp gathers each rank's failure into this
        causes = [failure[0] for failure in exc.failures.values()]
        first = causes[0] if causes else exc
        if any(isinstance(cause, pickle.UnpicklingError) for cause in causes):
            raise ConfigError(
                f"{folder}: a data file holds objects other than tensors and plain values, "
                f"not loaded ({_first_line(first)})"
            ) from None
        raise ValueError(f"{folder}: {type(first).__name__}: {_first_line(first)}") from None


def load_torch_file(path: Path, required: tuple[str, ...], mmap: bool = False) -> dict[str, Any]:
    """The dict ``torch.save`` wrote to ``path``, read with ``weights_only=True`` (tensors and
    plain containers only: a pickle naming any other function is refused, never called).

    Raises:
        ConfigError: ``path`` is unreadable, not a ``torch.save`` file, holds other objects, or
            is not a dict with the keys ``required``.
    """
    try:
        state = torch.load(path, mmap=mmap, weights_only=True)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the checkpoint file ({exc})") from None
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError) as exc:
        raise ConfigError(
            f"{path}: not a checkpoint file dataforge train wrote, not loaded ({_first_line(exc)})"
        ) from None
    missing = [key for key in required if not isinstance(state, dict) or key not in state]
    if missing:
        raise ConfigError(
            f"{path}: not a checkpoint file dataforge train wrote (no {', '.join(missing)})"
        )
    return state


def read_meta(path: Path) -> dict[str, Any]:
    """``meta.json`` of checkpoint ``path`` (step, stage and world size checked).

    Raises:
        ConfigError: it is missing, not JSON, or lacks one of those.
    """
    file = path / "meta.json"
    try:
        meta = json.loads(file.read_text(encoding="utf-8"))
        types = (type(meta["step"]), type(meta["stage"]), type(meta["world_size"]))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"{file}: not a checkpoint's meta.json ({exc!r})") from None
    if types != (int, str, int):
        raise ConfigError(f"{file}: step, stage and world_size must be int, str and int")
    return meta


def read_train_state(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """``train_state.pt`` of checkpoint ``path`` (:func:`load_torch_file`) and the run's
    config saved in it, as a plain mapping.

    Raises:
        ConfigError: the file is unreadable, forged, or lacks a key a save writes.
    """
    file = path / "train_state.pt"
    # mmap: ranks on one node share the page cache instead of each holding a copy.
    state = load_torch_file(file, ("scheduler", "scaler", "loop", "config"), mmap=True)
    try:
        saved = json.loads(state["config"])
        max_steps = saved["train"]["max_steps"]
    except (TypeError, ValueError, KeyError) as exc:
        raise ConfigError(f"{file}: its config is not a trainer config ({exc!r})") from None
    if not isinstance(state["loop"], dict) or not isinstance(max_steps, int):
        raise ConfigError(f"{file}: loop counters or train.max_steps of the wrong type")
    return state, saved


def _first_line(exc: BaseException) -> str:
    """The line of torch's (often many-line) message that says what was refused."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    telling = [line for line in lines if "GLOBAL" in line or "Unsupported" in line]
    return (telling or lines or [type(exc).__name__])[0]
