"""Drive the sample barrier the way the runtime does, without Ray: prepare per batch,
write the live parts as parquet, plan over them, apply per task and batch."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from dataforge.ops.barrier import BarrierContext
from dataforge.ops.base import OpContext
from dataforge.ops.sample import Sample
from dataforge.records import BASE_SCHEMA

LANGS = {"news_zh": "zh", "reviews_zh": "zh", "docs_en": "en", "pkgdesc_en": "en"}


def synthetic_docs(counts: dict[str, int], seed: int = 0, max_len: int = 200) -> pa.Table:
    """Documents ``<source>/<i>`` with random lengths 1..max_len, in the base schema."""
    rng = np.random.default_rng(seed)
    ids, texts, sources = [], [], []
    for source, count in counts.items():
        lengths = rng.integers(1, max_len + 1, size=count)
        ids += [f"{source}/{i}" for i in range(count)]
        texts += ["字" * int(n) for n in lengths]  # multi-byte: chars are code points
        sources += [source] * count
    n = len(ids)
    return pa.table(
        {
            "id": ids,
            "text": texts,
            "source": sources,
            "lang": [LANGS.get(s, "en") for s in sources],
            "meta": ["{}"] * n,
            "drop": pa.nulls(n, pa.string()),
            "_ord": np.zeros(n, dtype=np.int64),
        },
        schema=BASE_SCHEMA,
    )


def split_tasks(docs: pa.Table, tasks: int, shuffle_seed: int | None = None) -> list[pa.Table]:
    """Assign documents to ``tasks`` tasks (optionally shuffled), numbering ``_ord`` per task."""
    order = np.arange(docs.num_rows)
    if shuffle_seed is not None:
        order = np.random.default_rng(shuffle_seed).permutation(docs.num_rows)
    out = []
    for chunk in np.array_split(order, tasks):
        part = docs.take(chunk)
        out.append(
            part.set_column(
                part.schema.get_field_index("_ord"),
                "_ord",
                pa.array(np.arange(len(chunk), dtype=np.int64)),
            )
        )
    return out


def batches(table: pa.Table, rows: int) -> list[pa.Table]:
    return [table.slice(i, rows) for i in range(0, table.num_rows, rows)] or [table]


def source_stats(docs: pa.Table, sources: list[str]) -> dict[str, dict[str, int]]:
    stats = {}
    for s in sources:
        rows = docs.filter(pa.compute.equal(docs.column("source"), s))
        chars = pa.compute.sum(pa.compute.utf8_length(rows.column("text"))).as_py() or 0
        tokens = 0
        if "num_tokens" in rows.column_names:
            tokens = pa.compute.sum(rows.column("num_tokens")).as_py() or 0
        stats[s] = {"docs": rows.num_rows, "chars": chars, "tokens": tokens}
    return stats


def run_sample(
    docs: pa.Table,
    params: dict,
    workdir: Path,
    tasks: int = 1,
    batch_rows: int = 1000,
    shuffle_seed: int | None = None,
    sources: list[str] | None = None,
    seed: int = 1234,
) -> tuple[pa.Table, dict]:
    """prepare -> parts -> plan -> apply; returns (all applied rows, planner summary)."""
    sources = sources or list(dict.fromkeys(docs.column("source").to_pylist()))
    op = Sample(
        Sample.Config(**params),
        OpContext(seed=seed, sources={s: LANGS.get(s, "en") for s in sources}),
    )
    parts_dir, decisions = workdir / "parts", workdir / "decisions"
    parts_dir.mkdir(parents=True)
    task_tables = {}
    for t, task in enumerate(split_tasks(docs, tasks, shuffle_seed)):
        task_id = f"task-{t:05d}"
        task_tables[task_id] = task
        prepared = pa.concat_tables([op.prepare(b) for b in batches(task, batch_rows)])
        pq.write_table(prepared, parts_dir / f"{task_id}.parquet")
    ctx = BarrierContext(
        parts={t: parts_dir / f"{t}.parquet" for t in task_tables},
        decision_dir=decisions,
        audit_dir=workdir / "sample",
        num_cpus=1,
        seed=seed,
        source_stats=source_stats(docs, sources),
        sources={s: LANGS.get(s, "en") for s in sources},
    )
    summary = op.plan(ctx)
    json.dumps(summary)  # the manifest stores it: must be JSON-able
    applied = []
    for task_id, task in task_tables.items():
        path = decisions / f"{task_id}.parquet"
        decision = pq.read_table(path) if path.exists() else None
        applied += [op.apply(b, decision) for b in batches(task, batch_rows)]
    return pa.concat_tables(applied), summary


def outcome(applied: pa.Table) -> list[tuple[str, str | None, int]]:
    """Order-free view of a result: sorted (id, drop, _copy) triples."""
    return sorted(
        zip(
            applied.column("id").to_pylist(),
            applied.column("drop").to_pylist(),
            applied.column("_copy").to_pylist(),
            strict=True,
        ),
        key=lambda r: (r[0], r[1] or "", r[2]),
    )
