"""``benchmarks/gpu_check.sh --dry-run`` works on CPU: every figure's line is printed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

NUMBER = r"[0-9][0-9,.]*"
STEP = rf"loss={NUMBER} step_time_s={NUMBER} tokens_per_s={NUMBER} applied=2/2"
EXPECTED = [
    r"device: cpu preset=tiny batch=2x64",
    rf"fp32 step: {STEP}",
    rf"bf16 step: {STEP} sdpa=flash not asserted \(cpu dry run\)",
    r"mfu: n/a \(no known peak for this device\)",
    rf"peak memory activation_checkpointing=off: max_rss_gib={NUMBER} \(cpu: whole process\)",
    rf"peak memory activation_checkpointing=on: max_rss_gib={NUMBER} \(cpu: whole process\)",
    rf"bf16 step activation_checkpointing=on: {STEP}",
    rf"fp16 step GradScaler: {STEP} loss_scale=16384.0",
    rf"fsdp nproc=2: {STEP} max_rss_gib={NUMBER} \(cpu: whole process\)",
    rf"tp=2 nproc=2: {STEP} max_rss_gib={NUMBER} \(cpu: whole process\)",
    rf"gpu check: done in {NUMBER}s",
]


@pytest.mark.slow
def test_dry_run_prints_every_figure(tmp_path):
    env = os.environ | {"PYTHON": sys.executable, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp_path)}
    done = subprocess.run(
        ["bash", "benchmarks/gpu_check.sh", "--dry-run"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [x for x in done.stdout.splitlines() if not x.startswith("[trainer]")]
    assert len(lines) == len(EXPECTED), lines
    for pattern, line in zip(EXPECTED, lines, strict=True):  # in order, one line each
        assert re.fullmatch(pattern, line), (pattern, line)
    left = [p.name for p in tmp_path.iterdir() if p.name.startswith("tmp")]
    assert left == []  # the shared FSDP directory (mktemp -d) is removed


def test_gpu_mode_without_a_gpu_is_a_one_line_error(tmp_path):
    env = os.environ | {"PYTHON": sys.executable, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    (tmp_path / "nvidia-smi").write_text("#!/bin/sh\nexit 9\n")  # no GPU listed
    (tmp_path / "nvidia-smi").chmod(0o755)
    done = subprocess.run(
        ["bash", "benchmarks/gpu_check.sh"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == "error: no GPU found (nvidia-smi -L); use --dry-run\n"
