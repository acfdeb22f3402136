"""Memory of the dedup planner's key phase (``assign_keys``) within a small budget against
unconstrained, on the same prepared parts.

    .venv/bin/python benchmarks/dedup_keys_memory.py [--records 1000000] [--budget 32MB]

Writes ``--parts`` parquet parts of the columns the key phase reads (id, source, _ord; ids
in an order unrelated to the files'), then runs the key phase twice, each in a fresh
process (so that neither inherits the other's allocator pools): unconstrained
(``memory_bytes`` None: sorted in memory) and within ``--budget`` (spilled runs, merged).
Each case first runs the phase on one part (thread pools, kernels and imports are then the
process's). Printed per case: wall seconds, spilled runs, the phase's live peak (Arrow's
pool peak over what it held before, plus the peak that ``tracemalloc`` traces: numpy and
Python), and the peak rise of anonymous resident memory (``RssAnon``, sampled every 2 ms:
the live data plus what the allocators keep for reuse, not the page cache of the
memory-mapped spill files) and of all resident memory (``VmHWM``, file-backed pages
included); then the ratios budget / unconstrained of time and of the live peak.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dataforge.ops.barrier import BarrierContext  # noqa: E402
from dataforge.ops.base import OpContext  # noqa: E402
from dataforge.ops.dedup import Dedup  # noqa: E402
from dataforge.ops.dedup.keys import assign_keys  # noqa: E402
from dataforge.typed_config import parse_size  # noqa: E402


def write_parts(root: Path, records: int, parts: int) -> dict[str, Path]:
    """``parts`` parquet files of ``records`` in all: ids shuffled, two sources."""
    rng = np.random.default_rng(0)
    ids = rng.permutation(records)
    per = -(-records // parts)
    paths = {}
    for p in range(parts):
        chunk = ids[p * per : (p + 1) * per]
        table = pa.table(
            {
                "id": pa.array([f"doc{i:010d}" for i in chunk]),
                "source": pa.array(np.where(chunk % 3 == 0, "books", "web")),
                "_ord": pa.array(np.arange(len(chunk), dtype=np.int64)),
            }
        )
        paths[f"t{p:05d}"] = root / f"t{p:05d}.parquet"
        pq.write_table(table, paths[f"t{p:05d}"])
    return paths


def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


def measure(parts_dir: Path, budget: int | None) -> dict:
    """One case in this process: the key phase, its time and its memory rises."""
    parts = {p.stem: p for p in sorted(parts_dir.glob("*.parquet"))}
    op = Dedup(Dedup.Config(method="exact"), OpContext())
    with tempfile.TemporaryDirectory(dir=parts_dir) as spill:

        def context(parts: dict[str, Path], budget: int | None) -> BarrierContext:
            return BarrierContext(
                parts=parts, decision_dir=Path(spill), audit_dir=Path(spill), num_cpus=1,
                seed=0, source_stats={}, sources={},
                memory_bytes=budget, spill_dir=Path(spill) if budget else None,
            )  # fmt: skip

        # warm-up on one part, spilled: thread pools, kernels and first-use imports are
        # the process's, not the phase's
        first = dict([next(iter(parts.items()))])
        assign_keys(op, context(first, 2**20), list(first), None)
        ctx = context(parts, budget)
        pool = pa.default_memory_pool()
        arrow_before = pool.bytes_allocated()
        tracemalloc.start()
        Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM
        base_anon, base_hwm = _status("RssAnon"), _status("VmHWM")
        peak = [base_anon]
        done = threading.Event()

        def sample() -> None:
            while not done.wait(0.002):
                peak[0] = max(peak[0], _status("RssAnon"))

        sampler = threading.Thread(target=sample)
        sampler.start()
        t = time.perf_counter()
        keys = assign_keys(op, ctx, sorted(parts), None)
        seconds = time.perf_counter() - t
        numpy_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        peak[0] = max(peak[0], _status("RssAnon"))
        done.set()
        sampler.join()
        result = {
            "seconds": seconds,
            "runs": keys.spilled_runs,
            "anon_rise_mb": (peak[0] - base_anon) / 2**20,
            "hwm_rise_mb": (_status("VmHWM") - base_hwm) / 2**20,
            # what the phase allocates at its peak (each allocator's peak, added)
            "live_mb": (pool.max_memory() - arrow_before + numpy_peak) / 2**20,
            "first_key": int(keys.of_task(sorted(parts)[0])[0]),
        }
        del keys
    return result


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--parts", type=int, default=16, help="prepared parts (tasks)")
    ap.add_argument("--budget", default="32MB", help="the planner's memory_bytes, as a size")
    ap.add_argument("--tmp", default=None, help="directory for the parts and spilled runs")
    ap.add_argument("--case", help=argparse.SUPPRESS)  # internal: run one case, print JSON
    args = ap.parse_args()
    budget = parse_size("--budget", args.budget)
    if args.case:
        print(json.dumps(measure(Path(args.tmp), None if args.case == "free" else budget)))
        return 0
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        write_parts(Path(tmp), args.records, args.parts)
        results = {}
        for case in ("free", "budget"):
            cmd = [sys.executable, __file__, "--case", case, "--tmp", tmp, "--budget", args.budget]
            results[case] = json.loads(subprocess.check_output(cmd, text=True))
    free, small = results["free"], results["budget"]
    assert free["first_key"] == small["first_key"]
    print(f"key phase over {args.records} records in {args.parts} parts")
    for case, r in (("unconstrained", free), (f"budget {args.budget}", small)):
        print(
            f"  {case:>16}: {r['seconds']:6.2f} s, {r['runs']:3d} spilled runs, live peak "
            f"{r['live_mb']:6.1f} MB; peak rise: anon {r['anon_rise_mb']:6.1f} MB, all "
            f"resident {r['hwm_rise_mb']:6.1f} MB"
        )
    print(
        f"  budget / unconstrained: time {small['seconds'] / free['seconds']:.2f}x, "
        f"live peak {small['live_mb'] / free['live_mb']:.2f}x, "
        f"anon peak rise {small['anon_rise_mb'] / free['anon_rise_mb']:.2f}x"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
