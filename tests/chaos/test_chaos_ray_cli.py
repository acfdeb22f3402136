"""Real ``dataforge run`` processes on Ray: two into one OUT (one runs, the other is
refused naming the holder before it starts Ray; case 2), and a full disk (exit 1, one line
naming the path)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from chaos_kit import mount_tmpfs, output_ids, run_local, write_lines

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


@pytest.mark.parametrize("cpus", [1, 2])  # 1: Ray at once; 2: the driver's forked lanes
def test_full_disk_under_ray_exits_1_in_one_line(tmp_path: Path, write_pipeline, cpus: int) -> None:

    disk = tmp_path / "disk"
    if os.geteuid() != 0 or not mount_tmpfs(disk, "300k"):
        pytest.skip("needs root and `mount -t tmpfs` to make a small full disk")
    try:
        for f in range(4):
            write_lines(
                tmp_path / "in" / f"f{f}.jsonl", [f"{f}/{i} " + "字" * 600 for i in range(80)]
            )
        path = write_pipeline(
            tmp_path,
            """
            name: disk
            inputs: [{name: s, path: "in/*.jsonl", lang: zh}]
            ray: {num_cpus: CPUS, max_task_retries: 0}
            output: {path: out, compression: null}
            """.replace("CPUS", str(cpus)),
        )
        proc = subprocess.run(
            [sys.executable, "-m", "dataforge.cli", "run", str(path), "-o", str(disk / "out")],
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        assert proc.returncode == 1, proc.stderr[-2000:]
        errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and "no space left on device" in errors[0], proc.stderr[-3000:]
        assert str(disk / "out") in errors[0] and "Traceback" not in errors[0]
        assert not (disk / "out" / "manifest.json").exists()
    finally:
        subprocess.run(["umount", str(disk)], check=False)
