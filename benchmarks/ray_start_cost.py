"""What starting embedded Ray costs: ``dataforge``'s lean node vs a plain ``ray.init``.

Each round starts a fresh process that starts a local node (``--cpus`` CPUs), creates one
actor and waits for its first answer, then sums the CPU seconds of its whole process tree
(the driver, GCS, raylet, dashboard, agents, monitors, workers; read from ``/proc``)
three seconds later. ``lean`` is :func:`dataforge.runtime.cluster.connect` (no autoscaler
monitor, no log monitor); ``plain`` is ``ray.init`` with the same CPUs and no dashboard.
The two kinds alternate; medians are printed with the ratio. Linux only (``/proc``).

    .venv/bin/python benchmarks/ray_start_cost.py [--rounds 3] [--cpus 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, os, sys, time
sys.path.insert(0, sys.argv[3])
os.environ.setdefault("RAY_AUTH_MODE", "token")
import ray

kind, cpus = sys.argv[1], int(sys.argv[2])
HZ = os.sysconf("SC_CLK_TCK")


def tree_cpu():
    parent, cpu = {}, {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = open(f"/proc/{d}/stat").read()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2 :].split()
            parent[int(d)] = int(fields[1])
            cpu[int(d)] = (int(fields[11]) + int(fields[12])) / HZ
    todo, total, count = [os.getpid()], 0.0, 0
    while todo:
        pid = todo.pop()
        total, count = total + cpu.get(pid, 0.0), count + 1
        todo += [p for p, pp in parent.items() if pp == pid]
    return total, count


start = time.perf_counter()
if kind == "lean":
    from dataforge.config import pipeline_from_mapping
    from dataforge.runtime.cluster import connect, stop_embedded_ray

    config = pipeline_from_mapping(
        {"name": "start", "inputs": [{"name": "x", "path": "x.jsonl"}],
         "output": {"path": "out"}, "ray": {"num_cpus": cpus}},
        base_dir=".",
    )  # fmt: skip
    connect(config, None)
else:
    ray.init(address="local", num_cpus=cpus, include_dashboard=False, logging_level="WARNING")
up = time.perf_counter() - start


@ray.remote
class Echo:
    def ping(self):
        return os.getpid()


ray.get(Echo.remote().ping.remote())
actor = time.perf_counter() - start
time.sleep(3)
cpu, processes = tree_cpu()
print(json.dumps({"up": up, "actor": actor, "cpu": cpu, "processes": processes}))
if kind == "lean":
    stop_embedded_ray()
else:
    ray.shutdown()
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cpus", type=int, default=2)
    args = ap.parse_args()
    results: dict[str, list[dict[str, float]]] = {"plain": [], "lean": []}
    for round_ in range(args.rounds):
        for kind in results:
            proc = subprocess.run(
                [sys.executable, "-c", CHILD, kind, str(args.cpus), str(ROOT)],
                capture_output=True,
                text=True,
                timeout=300,
            )
            if proc.returncode != 0:
                raise SystemExit(f"{kind} start failed:\n{proc.stderr[-3000:]}")
            row = json.loads(proc.stdout.strip().splitlines()[-1])
            results[kind].append(row)
            print(
                f"  round {round_ + 1}: {kind:<5} node up {row['up']:5.2f} s  first actor answer "
                f"{row['actor']:5.2f} s  process tree {row['cpu']:5.2f} CPU-s in "
                f"{row['processes']} processes",
                flush=True,
            )
    median = {
        kind: {key: statistics.median(r[key] for r in rows) for key in ("up", "actor", "cpu")}
        for kind, rows in results.items()
    }
    for kind, m in median.items():
        print(
            f"{kind:<5} median: node up {m['up']:.2f} s, first actor answer {m['actor']:.2f} s, "
            f"{m['cpu']:.2f} CPU-s"
        )
    lean, plain = median["lean"], median["plain"]
    print(
        f"lean / plain: node up {lean['up'] / plain['up']:.2f}x, first actor answer "
        f"{lean['actor'] / plain['actor']:.2f}x, CPU {lean['cpu'] / plain['cpu']:.2f}x "
        f"(load average {os.getloadavg()[0]:.1f})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
