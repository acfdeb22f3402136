"""A loader's shared memory leaves no resource_tracker warnings at exit: neither when the
two local ranks of a distributed run share (and one removes) streaming's segments, nor when
one process builds and closes several loaders (``dataforge ablate``)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from loader_shards import write_mds

REPO = Path(__file__).resolve().parents[2]
TRACKER_WORDS = ("resource_tracker", "leaked shared_memory", "No such file")


def _tracker_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if any(w in line for w in TRACKER_WORDS)]


def test_three_loaders_in_one_process_leave_no_tracker_warnings(tmp_path, cache_dir):
    write_mds(tmp_path / "mds", np.random.default_rng(0).integers(1, 64, 40).tolist())
    code = textwrap.dedent(f"""
        from dataforge.loader import LoaderConfig, build_dataloader
        cfg = LoaderConfig(streams=[{{"path": {str(tmp_path / "mds")!r}}}], max_tokens=256,
                           max_seq_len=64, cache_dir={cache_dir!r})
        for _ in range(3):
            with build_dataloader(cfg) as loader:
                print(sum(1 for _ in loader))
    """)
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    assert len(set(proc.stdout.split())) == 1 and len(proc.stdout.split()) == 3
    assert _tracker_lines(proc.stderr) == []


@pytest.mark.slow
@pytest.mark.parametrize("creator", ["any", "rank1"])
def test_two_local_ranks_leave_no_tracker_warnings(tmp_path, cache_dir, creator):
    # "rank1": local rank 1 creates streaming's per-dataset segments and the owner (rank 0)
    # unlinks them, the case that made rank 1's resource_tracker warn at exit.
    write_mds(tmp_path / "mds", np.random.default_rng(0).integers(1, 128, 101).tolist())
    import torch.distributed as dist

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    store = dist.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False)
    script = Path(__file__).with_name("loader_rank_main.py")
    args = [str(port), str(tmp_path / "mds"), cache_dir, str(tmp_path)]
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(r), "2", *args],
            cwd=REPO,
            env={**os.environ, "LOADER_TEST_OTHERS_CREATE": "1" if creator == "rank1" else "0"},
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in (0, 1)
    ]
    stderrs = [p.communicate(timeout=600)[1] for p in procs]
    del store  # the ranks' rendezvous store, hosted here for their lifetime
    assert [p.returncode for p in procs] == [0, 0], stderrs
    results = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert sorted(results[0]["seen"] + results[1]["seen"]) == list(range(101))
    assert [_tracker_lines(e) for e in stderrs] == [[], []]


@pytest.mark.parametrize("closed", [True, False], ids=["closed", "dropped"])
def test_loader_after_loader_keeps_the_descriptors_bounded(tmp_path, closed):
    """A process that builds many loaders (an ablation scoring checkpoint after checkpoint)
    gets its shared-memory mappings back from each: closed, or dropped unclosed. In a fresh
    process, so that loaders other tests keep alive do not count."""
    write_mds(tmp_path / "mds", [int(n) for n in np.random.default_rng(0).integers(10, 160, 200)])
    code = textwrap.dedent(f"""
        import os
        from dataforge.loader import LoaderConfig, build_dataloader

        def one(k):
            cfg = LoaderConfig(streams=[{{"path": {str(tmp_path / "mds")!r}}}], max_tokens=512,
                               max_seq_len=128, cache_dir={str(tmp_path)!r} + f"/cache{{k}}")
            loader = build_dataloader(cfg)
            for _ in loader:
                pass
            if {closed!r}:
                loader.close()

        one(0)
        start = len(os.listdir("/proc/self/fd"))
        for k in range(1, 11):
            one(k)
        print(start, len(os.listdir("/proc/self/fd")))
    """)
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    start, end = map(int, proc.stdout.split())
    assert end <= start + 2  # streaming kept 12+ per loader, growing with each
    assert not [p for k in range(11) for p in (tmp_path / f"cache{k}").glob("*-*")]
