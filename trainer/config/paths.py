"""Relative paths of a trainer YAML resolve against the file's directory (as a pipeline's
do); ``--set`` overrides, typed at a shell, against the working directory.

Path keys: ``tokenizer``, ``init_from``, ``run_dir``, ``checkpoint.dir``,
``checkpoint.export_dir``, ``data.loader.cache_dir``, ``eval.loader.cache_dir``,
``ppo.reward_model``, ``ppo.prompts`` and the ``path`` of every stream in ``data.loader.streams`` and ``eval.streams``. URIs
(``s3://...``) stay as they are. ``run_dir`` and ``checkpoint.dir`` default to
``runs/default`` and ``checkpoints`` next to the file. The config holds absolute paths
afterwards, so every message shows the resolved path.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

__all__ = ["PATH_KEYS", "STREAM_KEYS", "resolve_paths", "with_default_dirs"]

PATH_KEYS = (
    ("tokenizer",),
    ("init_from",),
    ("run_dir",),
    ("checkpoint", "dir"),
    ("checkpoint", "export_dir"),
    ("data", "loader", "cache_dir"),
    ("eval", "loader", "cache_dir"),
    ("ppo", "reward_model"),
    ("ppo", "prompts"),
)
STREAM_KEYS = (("data", "loader", "streams"), ("eval", "streams"))


def _resolve(value: Any, base: Path) -> Any:
    if not isinstance(value, str) or not value or "://" in value:
        return value
    return os.path.abspath(base / Path(value).expanduser())  # symlinks kept, ".." folded


def _parent(raw: dict, keys: tuple[str, ...]) -> dict | None:
    node: Any = raw
    for key in keys[:-1]:
        node = node.get(key) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else None


def resolve_paths(raw: dict, base: Path) -> dict:
    """A copy of ``raw`` with its relative paths joined to ``base`` (see the module doc)."""
    raw = copy.deepcopy(raw)
    for keys in PATH_KEYS:
        parent = _parent(raw, keys)
        if parent is not None and keys[-1] in parent:
            parent[keys[-1]] = _resolve(parent[keys[-1]], base)
    for keys in STREAM_KEYS:
        parent = _parent(raw, keys)
        streams = parent.get(keys[-1]) if parent is not None else None
        if isinstance(streams, (str, dict)):
            streams = [streams]
        if isinstance(streams, list):
            parent[keys[-1]] = [
                _resolve(s, base)
                if isinstance(s, str)
                else {**s, "path": _resolve(s.get("path"), base)}
                if isinstance(s, dict)
                else s
                for s in streams
            ]
    return raw


def with_default_dirs(raw: dict, run_dir: str, checkpoint_dir: str) -> dict:
    """``raw`` with ``run_dir`` and ``checkpoint.dir`` set to the defaults where absent."""
    raw = dict(raw)
    raw.setdefault("run_dir", run_dir)
    checkpoint = raw.get("checkpoint")
    if checkpoint is None or isinstance(checkpoint, dict):
        raw["checkpoint"] = {"dir": checkpoint_dir, **(checkpoint or {})}
    return raw
