"""Signals: the step in flight finishes, a checkpoint of it is written, one line, exit 75."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from trainer.control.stopping import EXIT_REQUEUE, Interrupted
from trainer.data.sources import ListBatchSource
from trainer.loop import train

ROOT = Path(__file__).resolve().parents[2]


class SignalAt(ListBatchSource):
    """Sends ``signum`` to this process while handing out batch number ``at`` (1-based),
    i.e. during the step that batch belongs to."""

    def __init__(self, batches, at: int, signum: int) -> None:
        super().__init__(batches)
        self.at, self.signum, self.served = at, signum, 0

    def __iter__(self):
        for batch in super().__iter__():
            self.served += 1
            if self.served == self.at:
                os.kill(os.getpid(), self.signum)
            yield batch


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGUSR1])
def test_signal_at_step_7_checkpoints_it_and_resumes_with_identical_losses(
    tmp_path, make_config, make_batch, capsys, signum
):
    batches = [make_batch(i, pad=i % 3) for i in range(5)]
    common = dict(train={"max_steps": 10}, checkpoint={"interval": 5})
    full = train(make_config(tmp_path / "a", **common), "pretrain", source=ListBatchSource(batches))
    config = make_config(tmp_path / "b", **common)
    capsys.readouterr()
    before = signal.getsignal(signum)
    with pytest.raises(Interrupted) as stopped:
        train(config, "pretrain", source=SignalAt(batches, at=7, signum=signum))
    assert signal.getsignal(signum) is before  # the loop's handler is gone again
    ckpt = tmp_path / "b" / "ckpt"
    assert stopped.value.step == 7 and stopped.value.checkpoint == ckpt / "step_00000007"
    assert sorted(p.name for p in ckpt.glob("step_*")) == ["step_00000005", "step_00000007"]
    name = signal.Signals(signum).name
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == (
        f"[trainer] {name}: stopped after step 7, checkpoint {ckpt / 'step_00000007'}; "
        f"the same command resumes from it (exit {EXIT_REQUEUE})"
    )
    assert not (ckpt / "export").exists()  # a stopped run is not a finished one
    resumed = train(config, "pretrain", source=ListBatchSource(batches))
    assert resumed.steps == 10 and len(resumed.losses) == 3  # steps 8, 9, 10
    np.testing.assert_allclose(resumed.losses, full.losses[7:], rtol=0, atol=1e-6)
    records = (tmp_path / "b" / "run" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(r)["step"] for r in records] == list(range(1, 11))


class TwiceAt(SignalAt):
    def __iter__(self):
        for batch in super().__iter__():
            if self.served == self.at:
                os.kill(os.getpid(), self.signum)
            yield batch


def test_a_second_ctrl_c_stops_at_once(tmp_path, make_config, make_batch):
    config = make_config(tmp_path, train={"max_steps": 10}, checkpoint={"interval": 2})
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        train(config, "pretrain", source=TwiceAt([make_batch(0)], at=5, signum=signal.SIGINT))
    assert signal.getsignal(signal.SIGINT) is before
    # the step in flight was abandoned: only the interval checkpoints before it exist
    assert sorted(p.name for p in (tmp_path / "ckpt").glob("step_*")) == [
        "step_00000002",
        "step_00000004",
    ]


def test_ctrl_c_on_the_cli_is_one_line_and_exit_75(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(
        f"""
model: {{preset: tiny, vocab_size: 64}}
train: {{max_steps: 100000, precision: fp32, device: cpu, tensorboard: false, log_interval: 1000}}
optim: {{warmup_steps: 1}}
data: {{source: synthetic, batch_size: 2, seq_len: 16}}
checkpoint: {{dir: {tmp_path / "ck"}, interval: 100000}}
run_dir: {tmp_path / "run"}
"""
    )
    env = {"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "trainer", "pretrain", str(config)]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT
    )
    metrics = tmp_path / "run" / "metrics.jsonl"
    deadline = time.monotonic() + 120
    while not (metrics.is_file() and len(metrics.read_text().splitlines()) >= 3):
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == EXIT_REQUEUE, err
    assert err == ""
    last = out.splitlines()[-1]
    assert last.startswith("[trainer] SIGINT: stopped after step ")
    step = int(last.split("stopped after step ")[1].split(",")[0])
    assert step == len(metrics.read_text().splitlines())  # the step in flight finished
    meta = json.loads((tmp_path / "ck" / f"step_{step:08d}" / "meta.json").read_text())
    assert meta["step"] == step


FAKE_SRUN = """#!/bin/bash
# the template's first srun asks for the head node's address
if [[ "$*" == *"hostname --ip-address"* ]]; then echo 127.0.0.1; exit 0; fi
echo "$*" > "$FAKE_DIR/srun_args"
trap 'echo TERM >> "$FAKE_DIR/srun_got"; exit 75' TERM
touch "$FAKE_DIR/srun_started"
while true; do sleep 0.05; done
"""
FAKE_SCONTROL = """#!/bin/bash
if [[ $1 == show ]]; then echo node1; exit 0; fi
echo "$*" >> "$FAKE_DIR/scontrol_calls"
"""


@pytest.mark.parametrize("signum", [signal.SIGUSR1, signal.SIGTERM])
def test_slurm_template_passes_the_signal_on_and_requeues(tmp_path, signum):
    template = (ROOT / "trainer" / "launch" / "slurm.sbatch").read_text()
    assert "#SBATCH --requeue" in template and "#SBATCH --signal=B:USR1@300" in template
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("srun", FAKE_SRUN), ("scontrol", FAKE_SCONTROL)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "FAKE_DIR": str(tmp_path),
        "CONFIG": "trainer/configs/pretrain_tiny.yaml",
        "SLURM_JOB_NAME": "t",
        "SLURM_JOB_ID": "42",
        "SLURM_JOB_NODELIST": "node1",
        "SLURM_NNODES": "1",
    }
    proc = subprocess.Popen(
        ["bash", str(ROOT / "trainer" / "launch" / "slurm.sbatch")],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 30
    while not (tmp_path / "srun_started").exists():
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    proc.send_signal(signum)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    assert (tmp_path / "srun_got").read_text() == "TERM\n"
    assert (tmp_path / "scontrol_calls").read_text() == "requeue 42\n"
    assert (
        "-m trainer pretrain trainer/configs/pretrain_tiny.yaml"
        in (tmp_path / "srun_args").read_text()
    )
    assert out.splitlines()[-1] == "job 42: requeued (exit status 75)"


def _rank_worker(rank: int, world: int, port: int, out: str) -> None:
    import torch

    from trainer.config import config_from_mapping

    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world),
        TORCHELASTIC_USE_AGENT_STORE="True",
    )
    torch.set_num_threads(1)
    config = config_from_mapping(
        {
            "model": {"preset": "tiny", "vocab_size": 64},
            "train": {"max_steps": 8, "precision": "fp32", "device": "cpu", "tensorboard": False},
            "optim": {"warmup_steps": 1},
            "distributed": {"timeout_s": 120},
            "checkpoint": {"dir": f"{out}/ckpt", "interval": 100},
            "run_dir": f"{out}/run",
        }
    )
    gen = torch.Generator().manual_seed(rank)
    ids = torch.randint(1, 64, (2, 16), generator=gen)
    batches = [{"input_ids": ids, "labels": torch.roll(ids, -1, 1)}]
    # only rank 1 is signalled, during its third step
    source = SignalAt(batches, at=3, signum=signal.SIGTERM) if rank == 1 else None
    try:
        train(config, "pretrain", source=source or ListBatchSource(batches))
        stopped = None
    except Interrupted as exc:
        stopped = exc.step
    Path(f"{out}/rank{rank}.json").write_text(json.dumps(stopped))


@pytest.mark.slow
def test_a_signal_to_one_rank_stops_every_rank_at_the_same_step(tmp_path, monkeypatch):
    import torch
    import torch.multiprocessing as mp

    # The spawned ranks unpickle _rank_worker by its module, tests.trainer.<this file>: the
    # repository root must be on the path they inherit (the pytest script does not add it).
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2]))

    with __import__("socket").socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    store = torch.distributed.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False)
    try:
        mp.spawn(_rank_worker, args=(2, port, str(tmp_path)), nprocs=2, join=True)
    finally:
        del store
    assert [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)] == [3, 3]
    step = tmp_path / "ckpt" / "step_00000003"
    assert sorted(p.name for p in step.iterdir()) == [
        ".dataforge-output",
        "meta.json",
        "rank_00000.pt",
        "rank_00001.pt",
        "train_state.pt",
    ]
