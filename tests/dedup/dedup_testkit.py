"""Dedup test helpers: record tables, a prepare -> plan -> apply run, kept ids."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from dataforge.ops.barrier import BarrierContext
from dataforge.ops.base import OpContext
from dataforge.ops.dedup import Dedup
from dataforge.records import BASE_SCHEMA
from dataforge.runtime.shards import shard_workers
from dataforge.typed_config import from_mapping

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


HOW_NOT_WHAT = {
    "shard_peak_rss_mb",
    "key_runs",
    "screen_rounds",
    "template_rounds",
    "verify_rounds",
    "texts_spilled_shards",
    "edge_runs",
    "pair_runs",
    "candidate_rounds",
    "star_ranges",
}
"""Summary keys that say how a budget split the work (and the process's peak memory),
not what was decided: they differ between a budgeted and an unbudgeted run."""


def make_table(texts: list[str], langs: list[str], sources: list[str] | None = None, ids=None):
    n = len(texts)
    return pa.table(
        {
            "id": ids or [f"doc{i:05d}" for i in range(n)],
            "text": texts,
            "source": sources or ["src"] * n,
            "lang": langs,
            "meta": ["{}"] * n,
            "drop": pa.nulls(n, pa.string()),
            "_ord": np.arange(n, dtype=np.int64),
        },
        schema=BASE_SCHEMA,
    )


def run_dedup(
    tmp: Path,
    table: pa.Table,
    batch: int = 1000,
    ray_available: bool = False,
    num_cpus: int = 2,
    memory_bytes: int | None = None,
    **config,
) -> tuple[dict, pa.Table, Path]:
    """prepare per batch -> plan -> apply per task; returns (summary, output, OUT dir).
    ``config`` is the stage's keys as in YAML (``minhash={"num_perm": 64}``);
    ``memory_bytes``: the planner's budget, spilling to ``<work>/spill``; ``ray_available``:
    the index shards are Ray actors (else threads of this process)."""
    op = Dedup(from_mapping(Dedup.Config, config, "dedup"), OpContext(base_dir=str(tmp)))
    op.setup()
    settings = json.dumps(config, sort_keys=True, default=str).encode()
    name = f"{batch}-{num_cpus}-{memory_bytes}-{hashlib.sha256(settings).hexdigest()[:16]}"
    work = tmp / f"work-{name}"
    work.mkdir(parents=True)
    parts, batches = {}, {}
    for start in range(0, table.num_rows, batch):
        task = f"t{start // batch:06d}"
        part = table.slice(start, batch)
        part = part.set_column(6, "_ord", pa.array(np.arange(part.num_rows, dtype=np.int64)))
        batches[task] = part
        parts[task] = work / f"{task}.parquet"
        pq.write_table(op.prepare(part), parts[task])
    out = work / "OUT"
    ctx = BarrierContext(
        parts=parts,
        decision_dir=work / "decisions",
        audit_dir=out / "dedup",
        num_cpus=num_cpus,
        seed=0,
        source_stats={},
        sources={},
        shards=shard_workers(ray_available, num_cpus),
        memory_bytes=memory_bytes,
        spill_dir=None if memory_bytes is None else work / "spill",
    )
    if ctx.spill_dir is not None:
        ctx.spill_dir.mkdir()
    summary = op.plan(ctx)
    outputs = []
    for task in sorted(batches):
        path = ctx.decision_dir / f"{task}.parquet"
        decision = pq.read_table(path) if path.exists() else None
        outputs.append(op.apply(batches[task], decision))
    return summary, pa.concat_tables(outputs), out


def kept_ids(output: pa.Table) -> set[str]:
    return {r["id"] for r in output.to_pylist() if r["drop"] is None}


def planner_files(out: Path) -> dict[str, bytes]:
    """Every file the planner wrote under ``run_dedup``'s OUT dir: decisions and audit."""
    roots = [out.parent / "decisions", out / "dedup"]
    return {
        str(p.relative_to(out.parent)): p.read_bytes()
        for root in roots
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }
