"""Two CPU processes (gloo) give the same training as one process with the same global
batch, also across a kill and resume: DDP, and FSDP2 (``fully_shard``)."""

from __future__ import annotations

import json
import math
import os
import socket
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp
from safetensors.torch import load_file

from trainer.config import config_from_mapping
from trainer.data.sources import ListBatchSource
from trainer.loop import train

STEPS = 4


def _config(out: str, grad_accum: int, strategy: str):
    return config_from_mapping(
        {
            "model": {"preset": "tiny", "vocab_size": 64},
            "train": {
                "max_steps": STEPS,
                "grad_accum_steps": grad_accum,
                "precision": "fp32",
                "device": "cpu",
                "tensorboard": False,
            },
            "optim": {"lr": 3e-3, "min_lr": 3e-4, "warmup_steps": 1},
            "distributed": {"strategy": strategy, "timeout_s": 120},
            "checkpoint": {"dir": f"{out}/ckpt", "interval": 2},
            "run_dir": f"{out}/run",
        }
    )


def _batches() -> list[dict]:
    """Eight micro-batches whose padding differs, so ranks hold different target counts."""
    out = []
    for i in range(2 * STEPS):
        gen = torch.Generator().manual_seed(i)
        ids = torch.randint(1, 64, (3, 24), generator=gen)
        mask = torch.ones_like(ids)
        mask[:, 24 - 3 * (i % 4) :] = 0
        ids = ids * mask
        labels = torch.full_like(ids, -100)
        labels[:, :-1] = torch.where(mask[:, 1:].bool(), ids[:, 1:], -100)
        pos = (torch.arange(24).expand(3, 24) * mask).contiguous()
        out.append(
            {"input_ids": ids, "labels": labels, "attention_mask": mask, "position_ids": pos}
        )
    return out


def _worker(rank: int, world: int, port: int, out: str, strategy: str, stop_after) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world),
        # Every rank is a client of the store the test process hosts (as under torchrun,
        # whose agent hosts it): with rank 0 hosting it, rank 0 could exit while rank 1
        # still tore its group down and rank 1 aborted (SIGABRT, seen in CI).
        TORCHELASTIC_USE_AGENT_STORE="True",
    )
    torch.set_num_threads(1)
    mine = _batches()[rank::world]  # step k: rank 0 has micro-batch 2k, rank 1 has 2k+1
    config = _config(out, 1, strategy)
    result = train(config, "pretrain", source=ListBatchSource(mine), stop_after=stop_after)
    with open(f"{out}/losses_rank{rank}.json", "w") as f:
        json.dump(result.losses, f)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spawn(out: str, strategy: str, stop_after) -> None:
    """Two ranks of ``_worker``, their rendezvous store hosted here for their lifetime."""
    port = _free_port()
    store = torch.distributed.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False)
    try:
        mp.spawn(_worker, args=(2, port, out, strategy, stop_after), nprocs=2, join=True)
    finally:
        del store


# ~7 s each on 2 cores (mostly the process starts of two spawns): slow.
@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_two_processes_equal_one_with_same_global_batch(tmp_path, strategy, monkeypatch):
    # Spawned children import this module by its pytest name (tests.trainer....).
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2]))
    single = train(
        _config(str(tmp_path / "single"), 2, strategy),
        "pretrain",
        source=ListBatchSource(_batches()),
    )
    out = tmp_path / "dist"
    out.mkdir()
    # Killed after 3 steps (checkpoint at 2), then resumed: steps 3 and 4 are redone.
    _spawn(str(out), strategy, 3)
    for rank in range(2):
        losses = json.loads((out / f"losses_rank{rank}.json").read_text())
        np.testing.assert_allclose(losses, single.losses[:3], rtol=0, atol=1e-5)
    _spawn(str(out), strategy, None)
    for rank in range(2):
        losses = json.loads((out / f"losses_rank{rank}.json").read_text())
        np.testing.assert_allclose(losses, single.losses[2:], rtol=0, atol=1e-5)
    one = load_file(tmp_path / "single" / "ckpt" / "export" / "model.safetensors")
    two = load_file(out / "ckpt" / "export" / "model.safetensors")
    assert one.keys() == two.keys()
    for key in one:
        torch.testing.assert_close(two[key], one[key], rtol=0, atol=1e-5)
    _check_all_reduce_time(tmp_path / "single" / "run", out / "run", strategy)
    assert sorted(p.name for p in (out / "ckpt" / "step_00000004").iterdir()) == [
        ".dataforge-output",
        "meta.json",
        "rank_00000.pt",
        "rank_00001.pt",
        "train_state.pt",
    ]


def _check_all_reduce_time(single_run: Path, dist_run: Path, strategy: str) -> None:
    """DDP's gradient all-reduce is timed per step (gloo here, under the seed's NCCL name)
    into metrics.jsonl and the report; one process and FSDP2 have no value at all."""
    from dataforge.report.training import training_sections

    def steps(run_dir: Path) -> list[dict]:
        lines = (run_dir / "metrics.jsonl").read_text().splitlines()
        return [r for r in map(json.loads, lines) if "applied" in r]

    assert all("nccl_all_reduce_time" not in r for r in steps(single_run))
    records = steps(dist_run)
    assert [r["step"] for r in records] == list(range(1, STEPS + 1))
    times = [r.get("nccl_all_reduce_time") for r in records]
    if strategy == "fsdp":
        assert times == [None] * STEPS
        return
    assert all(t is not None and math.isfinite(t) and 0 < t < 60 for t in times), times
    plots = {p.name for section in training_sections(dist_run)[2] for p in section.plots}
    assert "nccl_all_reduce_time" in plots
