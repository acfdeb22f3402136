"""How much a second busy core slows the pipeline on this machine: the ceiling of any
two-core speed-up, Ray or not.

The in-process recipe of ``benchmarks/peers.py`` (clean -> quality_filter -> MinHash dedup
-> jsonl, on its re-sharded demo corpus) is timed in a fresh process, interleaved:

- alone;
- next to a numpy copy loop (64 MB arrays) on the other core: memory traffic only;
- next to a pure-Python loop on the other core: CPU only, little memory traffic;
- as two identical runs at once (what two workers of one run do to each other).

Printed: medians of ``run_pipeline`` wall seconds and each case's ratio to "alone"; for
the pair, the two-core throughput it implies (2 / ratio). Run ``benchmarks/peers.py``
once first (it builds the corpus and the pipeline file).

    .venv/bin/python benchmarks/core_sharing.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "build" / "peers"

RUN = """
import json, sys, time
from pathlib import Path
from dataforge.config import load_pipeline
from dataforge.runtime.executors.local import LocalExecutor
from dataforge.runtime.pipeline import run_pipeline
start = time.perf_counter()
run_pipeline(load_pipeline(Path(sys.argv[1])), Path(sys.argv[2]), LocalExecutor(),
             overwrite=True, log=lambda m: None)
print(json.dumps({"wall": time.perf_counter() - start}))
"""
MEMCPY = """
import sys, time
import numpy as np
a = np.ones(8_000_000); b = np.empty_like(a)
end = time.time() + float(sys.argv[1])
while time.time() < end:
    np.copyto(b, a)
"""
SPIN = """
import sys, time
end, x = time.time() + float(sys.argv[1]), 0
while time.time() < end:
    x += 1
"""


def _run(out: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", RUN, str(WORK / "peers.yaml"), str(WORK / out)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def _wall(proc: subprocess.Popen) -> float:
    stdout, _ = proc.communicate(timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"the pipeline run failed (exit {proc.returncode})")
    return json.loads(stdout.strip().splitlines()[-1])["wall"]


def _beside(load: str, seconds: float) -> float:
    """One run with ``load`` busy on the other core for its whole duration."""
    neighbour = subprocess.Popen([sys.executable, "-c", load, str(seconds)])
    time.sleep(0.3)  # the neighbour is up and busy
    try:
        return _wall(_run("core_sharing_a"))
    finally:
        neighbour.kill()
        neighbour.wait()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    if not (WORK / "peers.yaml").is_file():
        raise SystemExit(f"{WORK / 'peers.yaml'} missing: run benchmarks/peers.py first")
    alone_s = _wall(_run("core_sharing_a"))  # warm-up: page cache, bytecode
    times: dict[str, list[float]] = {"alone": [], "memcpy": [], "spin": [], "pair": []}
    for round_ in range(args.rounds):
        times["alone"].append(_wall(_run("core_sharing_a")))
        limit = 4 * max(alone_s, times["alone"][-1]) + 5
        times["memcpy"].append(_beside(MEMCPY, limit))
        times["spin"].append(_beside(SPIN, limit))
        pair = [_run("core_sharing_a"), _run("core_sharing_b")]
        times["pair"].append(statistics.mean(_wall(p) for p in pair))
        print(
            f"  round {round_ + 1}: " + "  ".join(f"{k} {v[-1]:.2f} s" for k, v in times.items()),
            flush=True,
        )
    median = {k: statistics.median(v) for k, v in times.items()}
    base = median["alone"]
    print(f"run_pipeline alone: {base:.2f} s (median of {args.rounds})")
    print(f"beside a memory copy loop on the other core: {median['memcpy'] / base:.2f}x")
    print(f"beside a pure-Python loop on the other core: {median['spin'] / base:.2f}x")
    ratio = median["pair"] / base
    print(
        f"two identical runs at once: {ratio:.2f}x each -> two cores give {2 / ratio:.2f}x "
        "the throughput of one on this work"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
