"""The loader's process-level behaviour: shm/dir cleanup after a crash, and real
torch.distributed ranks (gloo) sharing a node."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from loader_shards import write_mds

from dataforge.loader import LoaderConfig, build_dataloader
from dataforge.loader.collate import dpo_truncation
from dataforge.loader.source import cleanup_dead_runs

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_a_killed_job_leaves_nothing_after_the_next_start(tmp_path, cache_dir):
    """A whole job killed at once (process group: Python's resource tracker dies too, as
    under scancel or the OOM killer) leaves its shm and run dir; the next start removes them."""
    write_mds(tmp_path / "mds", [30] * 50)
    script = textwrap.dedent(
        f"""
        import time
        from dataforge.loader import LoaderConfig, build_dataloader
        loader = build_dataloader(LoaderConfig(streams=[{{"path": {str(tmp_path / "mds")!r}}}],
                                  max_tokens=256, max_seq_len=64, cache_dir={cache_dir!r}))
        next(iter(loader))
        print(loader.source.run_dir, flush=True)
        time.sleep(600)
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        run_dir = Path(proc.stdout.readline().strip())
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    prefix = json.loads((run_dir / "owner.json").read_text())["shm_prefix"]
    locals_shm = Path(f"/dev/shm/{prefix:06}_locals")
    assert run_dir.is_dir() and locals_shm.exists()  # what the crash left behind
    assert cleanup_dead_runs(Path(cache_dir)) == 1
    assert not run_dir.exists()
    assert not list(Path("/dev/shm").glob(f"{prefix:06}_*")) or not _owned_by(locals_shm, run_dir)
    config = LoaderConfig(
        streams=[{"path": str(tmp_path / "mds")}],
        max_tokens=256,
        max_seq_len=64,
        cache_dir=cache_dir,
    )
    with build_dataloader(config) as loader:
        assert sum(b["input_ids"].shape[0] for b in loader) == 50


def _owned_by(locals_shm: Path, run_dir: Path) -> bool:
    try:
        return str(run_dir) in locals_shm.read_bytes().decode("utf-8", "replace")
    except FileNotFoundError:
        return False


def test_close_removes_the_run_dir_and_its_shm(tmp_path, cache_dir):
    write_mds(tmp_path / "mds", [30] * 10)
    loader = build_dataloader(
        LoaderConfig(
            streams=[{"path": str(tmp_path / "mds")}],
            max_tokens=256,
            max_seq_len=64,
            cache_dir=cache_dir,
        )
    )
    run_dir = loader.source.run_dir
    prefix = json.loads((run_dir / "owner.json").read_text())["shm_prefix"]
    loader.close()
    assert not run_dir.exists()
    assert not _owned_by(Path(f"/dev/shm/{prefix:06}_locals"), run_dir)


@pytest.mark.slow
def test_torch_distributed_ranks_share_the_epoch_exactly_once(tmp_path, cache_dir):
    write_mds(tmp_path / "mds", np.random.default_rng(0).integers(1, 128, 101).tolist())
    import torch.distributed as dist

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    store = dist.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False)
    script = Path(__file__).with_name("loader_rank_main.py")
    args = [str(port), str(tmp_path / "mds"), cache_dir, str(tmp_path)]
    procs = [
        subprocess.Popen([sys.executable, str(script), str(r), "2", *args], cwd=REPO)
        for r in (0, 1)
    ]
    assert [p.wait(timeout=600) for p in procs] == [0, 0]
    del store  # the ranks' rendezvous store, hosted here for their lifetime
    results = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert results[0]["batches"] == results[1]["batches"] > 0
    assert (
        results[0]["run_dir"] == results[1]["run_dir"]
    )  # local ranks share streaming's local dirs
    assert sorted(results[0]["seen"] + results[1]["seen"]) == list(range(101))
    assert not Path(results[0]["run_dir"]).exists()


@given(st.integers(0, 500), st.integers(1, 500), st.integers(1, 500), st.integers(2, 300))
def test_dpo_truncation_fills_rows_exactly(prompt, chosen, rejected, max_len):
    keep_prompt, keep_response = dpo_truncation(prompt, chosen, rejected, max_len)
    assert keep_prompt <= prompt and keep_response <= max(chosen, rejected)
    assert keep_prompt + keep_response == min(prompt + max(chosen, rejected), max_len)
