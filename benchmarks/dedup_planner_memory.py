"""What the dedup planner holds, phase by phase, on the duplicate-heavy scale corpus.

Builds ``--size-mb`` of :mod:`scale`'s dup-heavy corpus (or reuses it) under ``--work``,
runs the dedup stage's ``prepare`` on parts of ``--part-docs`` documents (no clean or
quality filter: every document reaches the barrier), then the planner
(:func:`dataforge.ops.dedup.planner.plan`) in this process with local index shards,
as the local executor runs it. At the end of each phase it prints the process's RSS, its
peak during the phase (``VmHWM``, reset at each phase end through
``/proc/self/clear_refs``), Arrow's allocated bytes, and the numpy/Arrow bytes the index
shards hold (arrays reachable from their attributes), also per candidate document.
Linux only; not part of ``make test``.

    .venv/bin/python benchmarks/dedup_planner_memory.py --size-mb 256 --work /tmp/dpm
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from scale import NEAR_COPY_SHARE, build_corpus, demo_texts  # noqa: E402

from dataforge.ops.barrier import BarrierContext, ShardFactory  # noqa: E402
from dataforge.ops.base import OpContext  # noqa: E402
from dataforge.ops.dedup import Dedup, planner  # noqa: E402
from dataforge.records import BASE_SCHEMA  # noqa: E402
from dataforge.runtime.shards import LocalShards, shard_workers  # noqa: E402
from dataforge.typed_config import from_mapping  # noqa: E402


def _status(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) << 10
    return 0


def _held(obj: Any, seen: set[int], depth: int = 0) -> int:
    """Bytes of the numpy arrays and Arrow arrays/tables reachable from ``obj``."""
    if id(obj) in seen or depth > 6:
        return 0
    seen.add(id(obj))
    if isinstance(obj, np.ndarray):
        return obj.nbytes
    if isinstance(obj, (pa.Array, pa.ChunkedArray, pa.Table, pa.RecordBatch)):
        return obj.nbytes
    if isinstance(obj, (list, tuple)):
        return sum(_held(x, seen, depth + 1) for x in obj)
    if isinstance(obj, dict):
        return sum(_held(x, seen, depth + 1) for x in obj.values())
    fields = getattr(obj, "__dict__", None)
    if fields is None and hasattr(obj, "__dataclass_fields__"):
        fields = {k: getattr(obj, k) for k in obj.__dataclass_fields__}
    if fields and not callable(obj):
        return sum(_held(v, seen, depth + 1) for k, v in fields.items() if k != "method")
    return 0


class _Probe:
    """Prints one row per phase end."""

    def __init__(self) -> None:
        self.backend: LocalShards | None = None
        self.candidate_docs = 0
        self.start = time.perf_counter()
        print(f"{'phase':<22}{'RSS MB':>8}{'peak MB':>9}{'traced MB':>10}{'peak':>7}"
              f"{'arrow MB':>10}{'shards MB':>11}{'B/cand doc':>12}{'s':>7}")  # fmt: skip

    def __call__(self, phase: str) -> None:
        shards = 0
        if self.backend is not None:
            shards = sum(_held(s, set()) for s in self.backend.shards)
        per = f"{shards / self.candidate_docs:12.0f}" if self.candidate_docs else f"{'-':>12}"
        traced, traced_peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        print(f"{phase:<22}{_status('VmRSS') / 2**20:8.0f}{_status('VmHWM') / 2**20:9.0f}"
              f"{traced / 2**20:10.0f}{traced_peak / 2**20:7.0f}"
              f"{pa.total_allocated_bytes() / 2**20:10.0f}{shards / 2**20:11.0f}{per}"
              f"{time.perf_counter() - self.start:7.0f}", flush=True)  # fmt: skip
        Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM: next row = next phase


def _instrument(probe: _Probe, shards: ShardFactory) -> ShardFactory:
    """Wrap the planner's steps and the shards' exchanges so that each reports its end;
    returns ``shards`` made to hand the probe the backend it starts."""

    def wrap(owner: Any, name: str, label: Any) -> None:
        inner = getattr(owner, name)

        def outer(*args, **kwargs):
            result = inner(*args, **kwargs)
            probe(label(*args, **kwargs) if callable(label) else label)
            return result

        setattr(owner, name, outer)

    def make(*args, **kwargs):
        probe.backend = shards(*args, **kwargs)
        return probe.backend

    stream_names = iter(["text hashes", "index build", "signatures (screen)", "texts shipped"])
    wrap(planner, "assign_keys", "keys")
    wrap(planner, "_stream", lambda *a, **k: next(stream_names, "stream"))
    wrap(planner, "_copies", "copy pairs")
    exchanges = {
        "candidate_edges": "candidates",
        "forward_signatures": "screen",
        "emit_screened": "screened candidates",
        "template_counts": "template counted",
        "template_share": "template shared",
        "forward": "verification",
    }
    wrap(LocalShards, "exchange", lambda self, method, *a: exchanges.get(method, method))
    original_needed = planner._needed

    def needed(backend):
        nodes = original_needed(backend)
        probe.candidate_docs = len(nodes)
        return nodes

    planner._needed = needed
    wrap(planner, "_star_walk", "star clusters")
    wrap(planner, "join_heads", "copies joined")
    wrap(planner, "_write_outputs", "outputs written")
    return make


def _parts(corpus: Path, op: Dedup, work: Path, part_docs: int) -> dict[str, Path]:
    """Prepared parts of ``part_docs`` documents (reused when present)."""
    parts: dict[str, Path] = {}
    done = work / "parts" / "done"
    files = sorted(corpus.rglob("*.jsonl"))
    (work / "parts").mkdir(parents=True, exist_ok=True)
    for f_index, path in enumerate(files):
        lang = path.parent.name
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        for start in range(0, len(rows), part_docs):
            task = f"t{f_index:04d}-{start // part_docs:04d}"
            parts[task] = work / "parts" / f"{task}.parquet"
            if done.exists():
                continue
            chunk = rows[start : start + part_docs]
            n = len(chunk)
            table = pa.table(
                {
                    "id": [r["id"] for r in chunk],
                    "text": [r["text"] for r in chunk],
                    "source": [lang] * n,
                    "lang": [lang] * n,
                    "meta": ["{}"] * n,
                    "drop": pa.nulls(n, pa.string()),
                    "_ord": np.arange(n, dtype=np.int64),
                },
                schema=BASE_SCHEMA,
            )
            pq.write_table(op.prepare(table), parts[task])
    done.touch()
    return parts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=int, default=256)
    parser.add_argument("--work", type=Path, required=True, help="scratch folder")
    parser.add_argument("--part-docs", type=int, default=8192)
    parser.add_argument("--cpus", type=int, default=2)
    parser.add_argument("--memory-mb", type=int, default=None, help="ctx.memory_bytes")
    parser.add_argument("--method", default="minhash", choices=["minhash", "simhash"])
    parser.add_argument(
        "--tracemalloc", action="store_true", help="also Python's and numpy's traced bytes"
    )
    args = parser.parse_args()
    corpus = args.work / f"corpus-{args.size_mb}mb"
    if not corpus.exists():
        build_corpus(
            demo_texts(ROOT / "data" / "demo"),
            corpus,
            args.size_mb << 20,
            dup_share=NEAR_COPY_SHARE,
        )
    config = from_mapping(Dedup.Config, {"method": args.method}, "dedup")
    op = Dedup(config, OpContext(base_dir=str(args.work)))
    op.setup()
    parts = _parts(corpus, op, args.work, args.part_docs)
    run = args.work / f"run-{args.method}-{args.memory_mb}"
    for sub in ("decisions", "audit", "spill"):
        (run / sub).mkdir(parents=True, exist_ok=True)
    ctx = BarrierContext(
        parts=parts,
        decision_dir=run / "decisions",
        audit_dir=run / "audit",
        num_cpus=args.cpus,
        seed=0,
        source_stats={},
        sources={},
        shards=shard_workers(False, args.cpus),
        memory_bytes=None if args.memory_mb is None else args.memory_mb << 20,
        spill_dir=run / "spill",
    )
    if args.tracemalloc:
        tracemalloc.start()
    probe = _Probe()
    probe("parts prepared")
    ctx = dataclasses.replace(ctx, shards=_instrument(probe, ctx.shards))
    summary = op.plan(ctx)
    print(json.dumps(summary, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
