"""Dedup on one giant cluster: N identical short documents (an error page copied N times)
against N distinct short documents of the same length, per method, in this one process.

    .venv/bin/python benchmarks/dedup_giant_cluster.py [--docs 100000] [--methods exact,minhash,simhash]

Each case runs ``prepare`` per batch, writes the prepared parts, and runs the planner with
in-process index shards (``--shards``, default 2; threads when ``--cpus`` > 1). Printed
per method and case: prepare and planner seconds (wall), the planner's candidate and
verified pairs, kept records (identical: 1; distinct: N) and the peak resident memory of
the case (``VmHWM``, reset before each case where the kernel allows it; else the
process's peak so far, marked ``*``), after a warm-up run of 1000 documents; then the ratio identical / distinct of the whole
(prepare + planner), of the planner alone and of the peak memory. Goal: at most 2x.
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dataforge.ops.barrier import BarrierContext  # noqa: E402
from dataforge.ops.base import OpContext  # noqa: E402
from dataforge.ops.dedup import Dedup  # noqa: E402
from dataforge.records import BASE_SCHEMA  # noqa: E402
from dataforge.runtime.shards import shard_workers  # noqa: E402

PAGE_WORDS = 14


def texts(count: int, identical: bool, seed: int = 0) -> list[str]:
    """``count`` texts of ``PAGE_WORDS`` pseudo-words: all the first one, or all distinct."""
    rng = np.random.default_rng(seed)
    syllables = np.array(["ka", "lo", "mi", "ne", "ru", "ta", "vo", "shi", "pe", "gu", "zo", "bel"])
    vocabulary = np.array(["".join(rng.choice(syllables, 3)) + str(i) for i in range(20_000)])
    if identical:
        return [" ".join(vocabulary[rng.integers(0, len(vocabulary), PAGE_WORDS)])] * count
    picks = rng.integers(0, len(vocabulary), (count, PAGE_WORDS))
    return [" ".join(row) for row in vocabulary[picks]]


def records(batch: list[str], start: int) -> pa.Table:
    n = len(batch)
    return pa.table(
        {
            "id": [f"doc{start + i:09d}" for i in range(n)],
            "text": batch,
            "source": ["web"] * n,
            "lang": ["en"] * n,
            "meta": ["{}"] * n,
            "drop": pa.nulls(n, pa.string()),
            "_ord": np.arange(n, dtype=np.int64),
        },
        schema=BASE_SCHEMA,
    )


def reset_peak_rss() -> bool:
    """Reset this process's peak resident memory (Linux ``clear_refs``); whether it could."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def peak_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_case(method: str, corpus: list[str], args, tmp: Path) -> dict:
    op = Dedup(Dedup.Config(method=method, index_shards=args.shards), OpContext())
    op.setup()
    parts: dict[str, Path] = {}
    t = time.perf_counter()
    for start in range(0, len(corpus), args.batch):
        task = f"t{start // args.batch:06d}"
        parts[task] = tmp / f"{task}.parquet"
        pq.write_table(op.prepare(records(corpus[start : start + args.batch], start)), parts[task])
    prepare = time.perf_counter() - t
    ctx = BarrierContext(
        parts=parts,
        decision_dir=tmp / "decisions",
        audit_dir=tmp / "OUT" / "dedup",
        num_cpus=args.cpus,
        seed=0,
        source_stats={},
        sources={},
        shards=shard_workers(False, args.cpus),
    )
    t = time.perf_counter()
    summary = op.plan(ctx)
    plan = time.perf_counter() - t
    return {"prepare": prepare, "plan": plan, **summary}


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--docs", type=int, default=100_000, help="N, documents per case")
    ap.add_argument("--methods", default="exact,minhash,simhash")
    ap.add_argument("--shards", type=int, default=2, help="index shards")
    ap.add_argument("--cpus", type=int, default=2, help="the planner's CPUs (shard threads)")
    ap.add_argument("--batch", type=int, default=50_000, help="documents per prepared part")
    ap.add_argument("--tmp", default=None, help="directory for the prepared parts")
    args = ap.parse_args()
    print(f"N={args.docs} documents of {PAGE_WORDS} words, shards={args.shards}, cpus={args.cpus}")
    corpora = {"distinct": texts(args.docs, False), "identical": texts(args.docs, True)}
    worst = 0.0
    for method in args.methods.split(","):
        with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:  # imports and first calls
            run_case(method, corpora["distinct"][:1000], args, Path(tmp))
        results = {}
        for case, corpus in corpora.items():
            exact_peak = reset_peak_rss()
            with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
                r = run_case(method, corpus, args, Path(tmp))
            r["peak_mb"] = peak_rss_mb()
            results[case] = r
            print(
                f"{method:<8} {case:<9} prepare {r['prepare']:7.2f}s  planner {r['plan']:7.2f}s  "
                f"candidates {r.get('candidate_pairs', 0):>9}  verified "
                f"{r.get('verified_pairs', '-'):>9}  kept {r['kept']:>9}  peak RSS "
                f"{r['peak_mb']:7.0f} MB{'' if exact_peak else '*'}",
                flush=True,
            )
        same, diff = results["identical"], results["distinct"]
        whole = (same["prepare"] + same["plan"]) / (diff["prepare"] + diff["plan"])
        plan_only = same["plan"] / diff["plan"]
        worst = max(worst, whole)
        memory = same["peak_mb"] / diff["peak_mb"]
        print(
            f"{method:<8} ratio identical/distinct: whole {whole:.2f}x, planner "
            f"{plan_only:.2f}x, peak RSS {memory:.2f}x"
        )
        if same["kept"] != 1 or diff["kept"] != args.docs:
            print(f"error: kept {same['kept']} identical (want 1), {diff['kept']} distinct")
            return 1
    print(f"worst whole ratio: {worst:.2f}x (goal <= 2x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
