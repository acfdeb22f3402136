"""Every rank checks ``checkpoint.dir`` as it was before the main rank marks or cleans it.

Two threads play two ranks; ``barrier`` is a real two-party barrier. The other rank
checks late, so without the barrier it would see the main rank's marker and emptied trash.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import torch

import trainer.checkpoint.checkpointer as checkpoint
from dataforge.io.owned_output import OUTPUT_MARKER
from trainer.config import CheckpointConfig
from trainer.parallel.distributed import DistEnv


def _listing(root: Path) -> list[str] | None:
    return sorted(p.name for p in root.iterdir()) if root.is_dir() else None


def _start_two_ranks(root: Path, monkeypatch: pytest.MonkeyPatch) -> dict[int, list[str] | None]:
    """Start a Checkpointer on rank 0 and rank 1 at once; returns what each rank's check saw."""
    parties = threading.Barrier(2, timeout=30)
    seen: dict[int, list[str] | None] = {}
    check = checkpoint.check_checkpoint_dir

    def late_check(folder: Path) -> None:
        rank = int(threading.current_thread().name)
        if rank == 1:
            time.sleep(0.3)  # long enough for an unsynchronised main rank to mark and clean
        seen[rank] = _listing(folder)
        check(folder)

    monkeypatch.setattr(checkpoint, "check_checkpoint_dir", late_check)
    monkeypatch.setattr(checkpoint, "barrier", lambda env: parties.wait())
    errors: list[BaseException] = []

    def rank(r: int) -> None:
        env = DistEnv(rank=r, world_size=2, local_rank=r, device=torch.device("cpu"))
        try:
            checkpoint.Checkpointer(CheckpointConfig(dir=str(root)), env)
        except BaseException as exc:  # reported below, with the rank
            errors.append(exc)
            parties.abort()

    threads = [threading.Thread(target=rank, args=(r,), name=str(r)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    return seen


def test_both_ranks_check_the_folder_before_it_is_made(tmp_path, monkeypatch):
    root = tmp_path / "ck"
    seen = _start_two_ranks(root, monkeypatch)
    assert seen == {0: None, 1: None}
    assert _listing(root) == [OUTPUT_MARKER]


def test_both_ranks_check_the_trash_before_it_is_emptied(tmp_path, monkeypatch):
    root = tmp_path / "ck"
    trash = root / ".trash-abc"
    trash.mkdir(parents=True)
    for folder in (root, trash):
        (folder / OUTPUT_MARKER).write_text('{"dataforge_output": "dataforge train"}\n')
    (trash / "step_4").mkdir()  # a removal a kill cut short
    seen = _start_two_ranks(root, monkeypatch)
    assert seen == {0: [OUTPUT_MARKER, ".trash-abc"], 1: [OUTPUT_MARKER, ".trash-abc"]}
    assert _listing(root) == [OUTPUT_MARKER]
