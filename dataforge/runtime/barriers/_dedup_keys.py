"""Record keys of the dedup planner (step 1 of :mod:`dataforge.runtime.barriers.dedup`)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from dataforge.ops.dedup import Dedup
from dataforge.ops.dedup.buckets import MAX_NODE
from dataforge.records import ORD
from dataforge.runtime.barriers import BarrierContext

__all__ = ["Keys", "assign_keys"]


@dataclasses.dataclass
class Keys:
    """Record keys per task, and ids/sources by key (for cluster ids and audit)."""

    per_task: dict[str, np.ndarray]
    ids: pa.Array
    sources: pa.Array


def assign_keys(
    op: Dedup, ctx: BarrierContext, tasks: list[str], previous: pa.Table | None
) -> Keys:
    """Every record's key: its rank in ``(origin, prefer_source rank, id, task, _ord)``,
    records of the ``against`` runs (``previous``) first."""
    prefer = pa.array(list(op.config.keep.prefer_source), pa.string())
    cols = {"origin": [], "rank": [], "id": [], "source": [], "task": [], "ord": []}
    sizes = []
    if previous is not None:
        n = previous.num_rows
        cols["origin"].append(np.zeros(n, np.int8))
        cols["rank"].append(np.zeros(n, np.int32))
        cols["id"].append(previous.column("id"))
        cols["source"].append(previous.column("source"))
        cols["task"].append(np.full(n, -1, np.int32))
        cols["ord"].append(np.arange(n, dtype=np.int64))
    for t, task in enumerate(tasks):
        table = pq.read_table(ctx.parts[task], columns=["id", "source", ORD])
        sizes.append(table.num_rows)
        cols["origin"].append(np.ones(table.num_rows, np.int8))
        # a source's place in prefer_source; the sources not listed after all of them
        rank = pc.fill_null(pc.index_in(table.column("source"), value_set=prefer), len(prefer))
        cols["rank"].append(rank.to_numpy().astype(np.int32))
        cols["id"].append(table.column("id"))
        cols["source"].append(table.column("source"))
        cols["task"].append(np.full(table.num_rows, t, np.int32))
        cols["ord"].append(table.column(ORD).to_numpy())
    flat = {
        k: _strings(v) if k in ("id", "source") else np.concatenate(v) for k, v in cols.items() if v
    }
    if not flat:
        return Keys({}, pa.array([], pa.string()), pa.array([], pa.string()))
    table = pa.table(flat)
    if table.num_rows > MAX_NODE:
        raise ValueError(f"dedup: {table.num_rows} records exceed the {MAX_NODE} keys of one run")
    order = pc.sort_indices(
        table, sort_keys=[(c, "ascending") for c in ("origin", "rank", "id", "task", "ord")]
    ).to_numpy()
    keys = np.empty(len(order), dtype=np.int64)
    keys[order] = np.arange(len(order))
    n_prev = 0 if previous is None else previous.num_rows
    bounds = np.cumsum([n_prev, *sizes])
    per_task = {task: keys[bounds[i] : bounds[i + 1]] for i, task in enumerate(tasks)}
    ids = table.column("id").take(pa.array(order)).combine_chunks()
    sources = table.column("source").take(pa.array(order)).combine_chunks()
    return Keys(per_task, ids, sources)


def _strings(columns: list[pa.ChunkedArray]) -> pa.ChunkedArray:
    """The columns one after another, by their chunks (``pa.chunked_array`` of whole
    chunked arrays goes value by value through Python: 0.09 s per 64k ids)."""
    return pa.chunked_array([chunk for column in columns for chunk in column.chunks], pa.string())
