"""Start-up of ``dataforge run`` on embedded Ray: seconds from the command's start to its
first committed task, to "running on embedded local Ray" (Ray up), and to exit.

Each round runs the CLI as a fresh subprocess (interpreter start-up and imports count) on
a pipeline (default: the demo's, ``pipelines/demo.yaml``) into a new output directory and
polls ``OUT/_work/seg0/`` every 5 ms for the first ``*.done`` marker (a committed task).
Prints every round and the medians. Not part of ``make test``.

    .venv/bin/python benchmarks/startup.py [--rounds 5] [--pipeline pipelines/demo.yaml]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def one_round(pipeline: Path, out: Path) -> dict[str, float]:
    """Seconds to the first committed task, to Ray up, and to exit, for one run."""
    seg0 = out / "_work" / "seg0"
    marks: dict[str, float] = {}
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "dataforge.cli", "run", str(pipeline), "-o", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )

    def read_log() -> None:
        for line in proc.stderr:
            if "running on" in line and "ray_up" not in marks:
                marks["ray_up"] = time.perf_counter() - start

    reader = threading.Thread(target=read_log, daemon=True)
    reader.start()
    while proc.poll() is None and "first_commit" not in marks:
        if seg0.is_dir() and any(name.endswith(".done") for name in os.listdir(seg0)):
            marks["first_commit"] = time.perf_counter() - start
        time.sleep(0.005)
    proc.wait()
    marks["exit"] = time.perf_counter() - start
    reader.join()
    if proc.returncode != 0:
        raise SystemExit(f"dataforge run failed (exit {proc.returncode}) on {pipeline}")
    return marks


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pipeline", type=Path, default=ROOT / "pipelines" / "demo.yaml")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="df-startup-"))
    rounds = []
    try:
        for k in range(args.rounds):
            marks = one_round(args.pipeline.resolve(), work / f"out{k}")
            rounds.append(marks)
            print(
                f"  round {k + 1}: first committed task {marks.get('first_commit', float('nan')):5.2f} s"
                f"  Ray up {marks.get('ray_up', float('nan')):5.2f} s  exit {marks['exit']:5.2f} s",
                flush=True,
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for key, label in (("first_commit", "first committed task"), ("ray_up", "Ray up"),
                       ("exit", "exit")):  # fmt: skip
        values = [r[key] for r in rounds if key in r]
        if values:
            print(f"median {label:<21} {statistics.median(values):5.2f} s")
    print(f"load average (1 min) now: {os.getloadavg()[0]:.1f}  (goal: first commit <= 3 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
