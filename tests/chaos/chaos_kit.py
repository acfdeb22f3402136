"""Checks every chaos test makes: inputs untouched, counts that add up, records once."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

from dataforge.config import load_pipeline
from dataforge.io.mds import iter_samples
from dataforge.runtime.executors.local import LocalExecutor
from dataforge.runtime.pipeline import run_pipeline


def snapshot(root: Path) -> dict[str, tuple[str, int]]:
    """sha256 and mtime of every file under ``root`` (symlinks not followed)."""
    found = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            path = Path(dirpath) / name
            if path.is_file() and not path.is_symlink():
                found[str(path)] = (
                    hashlib.sha256(path.read_bytes()).hexdigest(),
                    path.stat().st_mtime_ns,
                )
    return found


def run_local(pipeline: Path, out: Path, overrides: list[str] | None = None, **kw) -> dict:
    """``dataforge run`` in-process (no Ray)."""
    return run_pipeline(
        load_pipeline(pipeline, overrides), out, LocalExecutor(), log=lambda m: None, **kw
    )


def assert_accounted(manifest: dict) -> None:
    """``input == kept + sum(dropped)`` per source, and the output holds kept + repeated."""
    for source, c in manifest["counts"]["by_source"].items():
        assert c["input"] == c["kept"] + sum(c["dropped"].values()), source
    total = manifest["counts"]["total"]
    assert manifest["output"]["records"] == total["kept"] + total["repeated"]


def output_ids(out: Path) -> list[str]:
    """Ids of the MDS output, asserting none is there twice."""
    ids = [s["id"] for s in iter_samples(out)]
    assert len(ids) == len(set(ids)), "a record appears twice"
    return ids


def write_lines(path: Path, texts: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in texts))
    return path


def mount_tmpfs(where: Path, size: str) -> bool:
    """Mount a tmpfs of ``size`` at ``where`` (a small disk to fill); False if not allowed."""
    where.mkdir(parents=True)
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True
    )
    return proc.returncode == 0
