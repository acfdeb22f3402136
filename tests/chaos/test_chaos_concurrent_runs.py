"""Two real ``dataforge run`` processes into one OUT: one runs, the other is refused
naming the holder, before it starts Ray (case 2)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from chaos_kit import output_ids, run_local

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def test_two_concurrent_runs_one_writer(pipeline_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "shared"
    argv = [sys.executable, "-m", "dataforge.cli", "run", str(pipeline_file), "-o", str(out),
            "--set", "ray.num_cpus=1"]  # fmt: skip
    procs = [
        subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    results = [(p.pid, *p.communicate(timeout=600), p.returncode) for p in procs]
    codes = sorted(code for *_, code in results)
    assert codes == [0, 2], [r[2][-2000:] for r in results]
    winner = next(r for r in results if r[3] == 0)
    loser = next(r for r in results if r[3] == 2)
    error = [line for line in loser[2].splitlines() if line.startswith("error:")]
    assert len(error) == 1 and f"pid {winner[0]}, started 20" in error[0]
    assert "being written by another dataforge run (host " in error[0]
    assert "running on" not in loser[2]  # refused before Ray started
    assert json.loads(winner[1].strip().splitlines()[-1])["kept"] == 21
    reference = run_local(pipeline_file, tmp_path / "reference")
    assert output_ids(out) == output_ids(tmp_path / "reference")
    assert json.loads((out / "manifest.json").read_text())["counts"] == reference["counts"]
    rerun = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0 and "nothing to do" in rerun.stderr
    assert "running on" not in rerun.stderr  # a complete run never starts Ray again
    assert not os.path.exists(out / "_work")
