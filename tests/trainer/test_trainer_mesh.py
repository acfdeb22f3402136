"""Tensor and pipeline parallelism on one device mesh (4 CPU processes, gloo): every step's
loss equals one process's with the same global batch, a checkpoint saved on one mesh
resumes on another, and shapes the mesh cannot split are refused in one line."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp
from safetensors.torch import load_file

from trainer.checkpoint.export import export_checkpoint
from trainer.checkpoint.model_state import read_sharded_weights
from trainer.config import ConfigError, config_from_mapping
from trainer.data.sources import ListBatchSource
from trainer.loop import train
from trainer.model.transformer import Transformer
from trainer.parallel.distributed import DistEnv, init_distributed
from trainer.parallel.pipeline import RankStages, split_stages, stage_layers

ROOT = Path(__file__).resolve().parents[2]
STEPS = 10
MICRO = 4  # micro-batches per optimizer step, over all data-parallel ranks
# Small enough that four processes on two cores take seconds: 2 layers (one per stage at
# pp=2), 4 query and 2 key/value heads (tp=2 splits both), SwiGLU 64 wide.
MODEL = {
    "vocab_size": 64,
    "hidden_size": 32,
    "n_layers": 2,
    "n_heads": 4,
    "n_kv_heads": 2,
    "intermediate_size": 64,
    "max_seq_len": 32,
}
DEEP = MODEL | {"n_layers": 4}


def _config(out: str, grad_accum: int, mesh: dict, model: dict = MODEL, **train):
    return config_from_mapping(
        {
            "model": model,
            "train": {
                "max_steps": STEPS,
                "grad_accum_steps": grad_accum,
                "precision": "fp32",
                "device": "cpu",
                "tensorboard": False,
                **train,
            },
            "optim": {"lr": 1e-2, "min_lr": 1e-3, "warmup_steps": 1},
            "distributed": {"strategy": "fsdp", "timeout_s": 120, **mesh},
            "checkpoint": {"dir": f"{out}/ckpt", "interval": 5},
            "eval": {"interval": 5},
            "run_dir": f"{out}/run",
        }
    )


def _batches() -> list[dict]:
    """``STEPS x MICRO`` micro-batches of 4 rows whose padding differs (ranks hold
    different target counts)."""
    out = []
    for i in range(STEPS * MICRO):
        gen = torch.Generator().manual_seed(i)
        ids = torch.randint(1, 64, (4, 16), generator=gen)
        mask = torch.ones_like(ids)
        mask[:, 16 - 2 * (i % 5) :] = 0
        ids = ids * mask
        labels = torch.full_like(ids, -100)
        labels[:, :-1] = torch.where(mask[:, 1:].bool(), ids[:, 1:], -100)
        pos = (torch.arange(16).expand(4, 16) * mask).contiguous()
        out.append(
            {"input_ids": ids, "labels": labels, "attention_mask": mask, "position_ids": pos}
        )
    return out


def _worker(
    rank: int,
    world: int,
    port: int,
    out: str,
    mesh: dict,
    stop_after,
    train_keys: dict,
    model: dict,
) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world),
        TORCHELASTIC_USE_AGENT_STORE="True",  # the test process hosts the store
    )
    torch.set_num_threads(1)
    dp = world // (mesh.get("tp", 1) * mesh.get("pp", 1))
    dp_rank = rank // mesh.get("tp", 1) % dp
    mine = _batches()[dp_rank::dp]  # step k: micro-batches MICRO*k .. MICRO*k+MICRO-1
    config = _config(out, MICRO // dp, mesh, model, **train_keys)
    # held-out passes run on the unpipelined meshes (tp: the logits are gathered)
    held_out = ListBatchSource(_batches()[:4][dp_rank::dp]) if mesh.get("pp", 1) == 1 else None
    result = train(
        config,
        "pretrain",
        source=ListBatchSource(mine),
        stop_after=stop_after,
        eval_source=held_out,
    )
    with open(f"{out}/losses_rank{rank}.json", "w") as f:
        json.dump(result.losses, f)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spawn(
    out: Path, mesh: dict, stop_after=None, model: dict = MODEL, **train_keys
) -> list[list[float]]:
    """Four ranks of ``_worker`` on ``mesh``; every rank's losses."""
    port = _free_port()
    store = torch.distributed.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False)
    try:
        args = (4, port, str(out), mesh, stop_after, train_keys, model)
        mp.spawn(_worker, args=args, nprocs=4, join=True)
    finally:
        del store
    return [json.loads((out / f"losses_rank{r}.json").read_text()) for r in range(4)]


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    out = tmp_path_factory.mktemp("single")
    config = _config(str(out), MICRO, {})
    held_out = ListBatchSource(_batches()[:4])
    result = train(config, "pretrain", source=ListBatchSource(_batches()), eval_source=held_out)
    return out, result.losses


@pytest.fixture(scope="module")
def single_deep(tmp_path_factory):
    """The one-process run of the 4-layer model (two stages a rank, interleaved, at pp=2)."""
    out = tmp_path_factory.mktemp("single_deep")
    result = train(
        _config(str(out), MICRO, {}, DEEP), "pretrain", source=ListBatchSource(_batches())
    )
    return out, result.losses


def _max_diff(per_rank: list[list[float]], expected: list[float]) -> float:
    return max(float(np.max(np.abs(np.array(losses) - expected))) for losses in per_rank)


# ~25 s per 4-process run on 2 cores: slow.
@pytest.mark.slow
def test_tp_run_resumes_on_a_pp_mesh_with_the_losses_of_one_process(single, tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT))  # spawned children import this module
    single_out, expected = single
    assert len(expected) == STEPS
    # tp=2 x dp=2 for 5 steps (checkpoint at 5), then resumed on pp=2 x dp=2 for 5 more
    # (1F1B, activation checkpointing)
    first = _spawn(tmp_path, {"tp": 2}, stop_after=5)
    tp_diff = _max_diff(first, expected[:5])
    resumed = _spawn(tmp_path, {"pp": 2}, activation_checkpointing=True)
    pp_diff = _max_diff(resumed, expected[5:])
    print(f"max |loss - single| tp=2xdp=2: {tp_diff:.2e}; pp=2xdp=2 (resumed): {pp_diff:.2e}")
    assert tp_diff <= 1e-4 and pp_diff <= 1e-4
    saved = read_sharded_weights(tmp_path / "ckpt" / "step_00000005" / "model")
    reference = torch.load(single_out / "ckpt" / "step_00000005" / "train_state.pt")["model"]
    assert saved.keys() == reference.keys()
    # Adam divides by sqrt(v): where v is tiny, a gradient that differs in its last bits
    # (tp's reduction order) moves a weight by up to a few 1e-5 in 5 steps; the losses
    # above and below hold the run to 1e-4 and 1e-5.
    for key, value in reference.items():
        torch.testing.assert_close(saved[key], value, rtol=0, atol=5e-5)
    _same_export(single_out, tmp_path)
    assert _val_loss(tmp_path, 5) == pytest.approx(_val_loss(single_out, 5), abs=1e-5)
    export_checkpoint(tmp_path / "ckpt" / "step_00000005", tmp_path / "export5")
    export_checkpoint(single_out / "ckpt" / "step_00000005", single_out / "export5")
    _same_export(single_out, tmp_path, "export5")
    meta = json.loads((tmp_path / "ckpt" / "step_00000010" / "meta.json").read_text())
    assert (meta["dp"], meta["tp"], meta["pp"]) == (2, 1, 2)


@pytest.mark.slow
def test_one_process_checkpoint_resumes_on_tp_with_sequence_parallel_and_pp(
    single, tmp_path, monkeypatch
):
    monkeypatch.syspath_prepend(str(ROOT))
    single_out, expected = single
    # the one-process run's step-5 checkpoint (full state dicts), resumed on tp=2 x pp=2
    (tmp_path / "ckpt").mkdir()
    shutil.copy2(single_out / "ckpt" / ".dataforge-output", tmp_path / "ckpt")
    step5 = "step_00000005"
    shutil.copytree(single_out / "ckpt" / step5, tmp_path / "ckpt" / step5)
    mesh = {"tp": 2, "pp": 2, "pp_schedule": "gpipe", "sequence_parallel": True}
    losses = _spawn(tmp_path, mesh)
    diff = _max_diff(losses, expected[5:])
    print(f"max |loss - single| tp=2xpp=2 (sequence parallel, GPipe, resumed): {diff:.2e}")
    assert diff <= 1e-4
    _same_export(single_out, tmp_path)


@pytest.mark.slow
def test_interleaved_pipeline_resumes_with_the_losses_of_one_process(
    single_deep, tmp_path, monkeypatch
):
    monkeypatch.syspath_prepend(str(ROOT))
    single_out, expected = single_deep
    # pp=2 x dp=2, interleaved 1F1B: rank r holds stages r and r + 2 of 4, one layer each;
    # 5 steps (checkpoint at 5), then resumed on the same mesh for 5 more
    mesh = {"pp": 2, "pp_schedule": "interleaved_1f1b"}
    first = _spawn(tmp_path, mesh, stop_after=5, model=DEEP)
    resumed = _spawn(tmp_path, mesh, model=DEEP)
    diff = _max_diff([a + b for a, b in zip(first, resumed, strict=True)], expected)
    print(f"max |loss - single| pp=2xdp=2 interleaved 1F1B (2 stages a rank, resumed): {diff:.2e}")
    assert diff <= 1e-4
    saved = read_sharded_weights(tmp_path / "ckpt" / "step_00000005" / "model")
    reference = torch.load(single_out / "ckpt" / "step_00000005" / "train_state.pt")["model"]
    assert saved.keys() == reference.keys()
    # Adam divides by sqrt(v): where v is tiny, a gradient that differs in its last bits
    # (tp's reduction order) moves a weight by up to a few 1e-5 in 5 steps; the losses
    # above and below hold the run to 1e-4 and 1e-5.
    for key, value in reference.items():
        torch.testing.assert_close(saved[key], value, rtol=0, atol=5e-5)
    _same_export(single_out, tmp_path)


def _val_loss(out: Path, step: int) -> float:
    records = map(json.loads, (out / "run" / "metrics.jsonl").read_text().splitlines())
    (record,) = [r for r in records if "val_loss" in r and r["step"] == step]
    return record["val_loss"]


def _same_export(single_out: Path, out: Path, name: str = "ckpt/export") -> None:
    one = load_file(single_out / name / "model.safetensors")
    many = load_file(out / name / "model.safetensors")
    assert one.keys() == many.keys()
    for key in one:
        torch.testing.assert_close(many[key], one[key], rtol=0, atol=1e-4)


def test_stages_cut_by_layer_count():
    assert [list(stage_layers(5, 2, s)) for s in range(2)] == [[0, 1, 2], [3, 4]]
    assert [list(stage_layers(4, 4, s)) for s in range(4)] == [[0], [1], [2], [3]]


def test_interleaved_ranks_hold_non_adjacent_stages_under_the_whole_models_names(tmp_path):
    config = _config(str(tmp_path), 2, {}, DEEP | {"n_layers": 5})
    names = set(Transformer(config.model).state_dict())
    held = []
    for rank in range(2):
        env = DistEnv(rank, 4, rank, torch.device("cpu"), pp_rank=rank, pp=2)
        stages = split_stages(Transformer(config.model), env, 2)
        held.append([list(stage.blocks) for stage in stages])
        whole = RankStages(stages)
        assert [s.embed is not None for s in stages] == [rank == 0, False]
        assert [s.lm_head is not None for s in stages] == [False, rank == 1]
        assert set(whole.state_dict()) <= names
        names -= set(whole.state_dict())
        assert not whole.train(False).training and not any(s.training for s in stages)
    # 5 layers over 4 stages: stage 0 holds two; rank 0 stages 0 and 2, rank 1 stages 1 and 3
    assert held == [[["0", "1"], ["3"]], [["2"], ["4"]]]
    assert names == set()  # the two ranks hold every parameter once


@pytest.mark.parametrize(
    ("mesh", "message"),
    [
        ({"tp": 3}, "distributed.tp=3 does not divide model.n_heads 4 and model.n_kv_heads 2"),
        ({"tp": 4}, "distributed.tp=4 does not divide model.n_heads 4 and model.n_kv_heads 2"),
        ({"pp": 3}, "distributed.pp=3 > model.n_layers 2; valid: 1 to 2"),
        ({"tp": 0}, "distributed.tp=0; valid: an integer >= 1"),
        ({"sequence_parallel": True}, "sequence_parallel needs distributed.tp > 1"),
        (
            {"pp": 2, "pp_schedule": "interleaved_1f1b"},
            r"distributed.pp x pp_stages_per_rank = 2 x 2 stages > model.n_layers 2",
        ),
        (
            {"pp": 2, "pp_stages_per_rank": 2},
            "pp_stages_per_rank=2 needs distributed.pp_schedule interleaved_1f1b, got 1f1b",
        ),
        ({"pp_stages_per_rank": 0}, "distributed.pp_stages_per_rank=0; valid: an integer >= 1"),
    ],
)
def test_shapes_the_mesh_cannot_split_are_refused_at_load(tmp_path, mesh, message):
    with pytest.raises(ConfigError, match=message):
        _config(str(tmp_path), 2, mesh)


def test_features_a_split_model_cannot_serve_are_refused_at_load(tmp_path):
    with pytest.raises(ConfigError, match="1f1b needs train.grad_accum_steps >= distributed.pp 2"):
        _config(str(tmp_path), 1, {"pp": 2})
    with pytest.raises(ConfigError, match="cannot be used with train.precision fp16"):
        _config(str(tmp_path), 2, {"tp": 2}, precision="fp16")
    _config(str(tmp_path), 1, {"pp": 2, "pp_schedule": "gpipe"})  # GPipe takes any count
    interleaved = {"pp": 2, "pp_schedule": "interleaved_1f1b"}
    with pytest.raises(ConfigError, match="interleaved_1f1b needs train.grad_accum_steps a "):
        _config(str(tmp_path), 3, interleaved, DEEP)
    assert _config(str(tmp_path), 4, interleaved, DEEP).distributed.stages_per_rank == 2


def test_a_world_the_mesh_does_not_fit_is_refused_before_any_process_group(tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "6")
    with pytest.raises(ConfigError, match=r"tp x distributed.pp = 2 x 2 does not divide the world"):
        init_distributed(_config(str(tmp_path), 2, {"tp": 2, "pp": 2}))
    with pytest.raises(ConfigError, match=r"strategy ddp cannot run with tp=1/pp=2 over dp=3"):
        init_distributed(_config(str(tmp_path), 2, {"pp": 2, "strategy": "ddp"}))
    with pytest.raises(ConfigError, match=r"distributed.dp=3 but 6 ranks / \(tp 1 x pp 1\) = 6"):
        init_distributed(_config(str(tmp_path), 2, {"tp": 1, "dp": 3}))
    assert not torch.distributed.is_initialized()


def test_cli_exits_2_with_one_line_naming_the_key(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(json.dumps({"model": MODEL, "distributed": {"tp": 3}}))
    done = subprocess.run(
        [sys.executable, "-m", "trainer", "pretrain", str(config)],
        cwd=ROOT,
        env=os.environ | {"PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1
    assert "distributed.tp=3 does not divide model.n_heads 4" in done.stderr


FAKE_PYTHON = """#!/bin/bash
# the launcher's torch.distributed.run call is recorded; the mesh is read for real
if [[ "$2" == torch.distributed.run ]]; then echo "$*" > "$FAKE_DIR/torchrun_args"; exit 0; fi
exec "$REAL_PYTHON" "$@"
"""


@pytest.mark.parametrize(
    ("sets", "nproc"),
    [
        (
            [
                "distributed.dp=2",
                "distributed.tp=2",
                "distributed.pp=2",
                "train.grad_accum_steps=2",
            ],
            "8",
        ),
        (["distributed.tp=2"], "2"),
    ],
)
def test_torchrun_launcher_starts_the_ranks_of_the_configs_mesh(tmp_path, sets, nproc):
    fake = tmp_path / "python"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    (tmp_path / "nvidia-smi").write_text("#!/bin/sh\nexit 9\n")  # no GPU: tp x pp ranks
    (tmp_path / "nvidia-smi").chmod(0o755)
    overrides = [arg for key in sets for arg in ("--set", key)]
    env = os.environ | {
        "PYTHON": str(fake),
        "REAL_PYTHON": sys.executable,
        "FAKE_DIR": str(tmp_path),
        "PYTHONPATH": str(ROOT),
        "PATH": f"{tmp_path}:{os.environ['PATH']}",
    }
    done = subprocess.run(
        ["bash", "trainer/launch/torchrun.sh", "pretrain", "trainer/configs/pretrain_tiny.yaml"]
        + overrides,
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    args = (tmp_path / "torchrun_args").read_text().split()
    assert args[args.index("--nproc_per_node") + 1] == nproc
    assert args[-len(overrides) :] == overrides


def test_a_killed_distributed_save_is_recognised_and_a_foreign_file_refused(tmp_path):
    from dataforge.io.owned_output import OUTPUT_MARKER
    from trainer.checkpoint.checkpointer import WHAT, check_checkpoint_dir

    marker = json.dumps({"dataforge_output": WHAT}) + "\n"
    root = tmp_path / "ckpt"
    partial = root / ".tmp-step_00000005" / "model"
    partial.mkdir(parents=True)
    for folder in (root, partial.parent):
        (folder / OUTPUT_MARKER).write_text(marker)
    for name in ("__0_0.distcp", "__1_0.distcp", ".metadata.tmp"):  # cut before .metadata
        (partial / name).write_bytes(b"")
    check_checkpoint_dir(root)
    (partial / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="is not a partial checkpoint dataforge train wrote"):
        check_checkpoint_dir(root)
