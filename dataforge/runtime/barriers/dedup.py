"""Planner of the dedup barrier: sharded bucket index, sharded connected components.

Steps (``plan``):

1. **Keys.** Every record gets an integer key: its rank in the order
   ``(origin, prefer_source rank, id, task, _ord)``, where records published by the runs
   listed in ``against`` come first (origin 0). Keys depend only on the records, never on
   batch sizes, task boundaries or actor counts, and the smallest key of a cluster is its
   representative. (The driver holds ids and source ranks for this sort, not signatures.)
2. **Index.** Signatures are streamed part by part (sorted task order); each record's bucket
   keys (MinHash band keys, the exact hash, or SimHash permuted-block table keys) go to
   index shard ``bucket_key % N``. N = ``index_shards`` (default: cluster CPUs). Shards are
   Ray actors (:class:`dataforge.ops.dedup.index.IndexShard`) when Ray is available.
3. **Edges and components.** Each shard turns its buckets into edges, routed to the shard
   that owns the first node; the shards then run the alternating large-star / small-star
   rounds of :mod:`dataforge.ops.dedup.unionfind` until nothing changes. Only the final
   (node, root) pairs of clustered records come back to the driver.
4. **Decisions.** ``decision_dir/<task>.parquet`` lists ``_ord`` and ``_dedup_reason`` of the
   dropped records; ``audit_dir/clusters.parquet`` has (id, source, cluster, kept) for every
   clustered record (cluster = id of the representative); ``audit_dir/signatures.parquet``
   publishes the signatures of the kept records for later ``against`` runs.

Failures: index actors run with ``max_restarts=0``; if one dies, every call to it raises,
the whole index is rebuilt from the parts with fresh actors (the result is a function of
the parts only, so a retry cannot change it), and after ``MAX_ATTEMPTS`` the stage fails
with a ``RuntimeError``. Empty texts (null signature) never enter the index.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from dataforge.io import fs
from dataforge.ops.dedup import DECISION_REASON, Dedup
from dataforge.ops.dedup.minhash import band_keys
from dataforge.ops.dedup.simhash import block_masks, table_keys
from dataforge.ops.dedup.unionfind import MAX_NODE
from dataforge.records import ORD
from dataforge.runtime.barriers import BarrierContext
from dataforge.runtime.barriers._dedup_shards import LocalShards, RayShards

__all__ = ["MAX_ATTEMPTS", "SIGNATURE_META_KEY", "load_published", "plan"]

MAX_ATTEMPTS = 2
MAX_ROUNDS = 200
SIGNATURE_META_KEY = b"dataforge.dedup"
_INFLIGHT_PARTS = 8

# Tests set this to inject faults: called as hook(phase, attempt, shards) at phase ends.
_fault_hook: Callable[[str, int, list[Any]], None] | None = None


def plan(op: Dedup, ctx: BarrierContext) -> dict[str, Any]:
    """Cluster the prepared records, write decisions and audit, return the summary."""
    tasks = sorted(ctx.parts)
    shards = op.config.index_shards or max(1, ctx.num_cpus)
    previous = [load_published(op.context.locate(p), op) for p in op.config.against]
    previous_table = pa.concat_tables(previous) if previous else None
    keys = _assign_keys(op, ctx, tasks, previous_table)
    n_prev = 0 if previous_table is None else previous_table.num_rows

    last_error: Exception | None = None
    for attempt in range(1, MAX_ATTEMPTS + 1):
        backend = RayShards(shards, op) if ctx.ray_available else LocalShards(shards, op)
        try:
            nodes, roots, stats = _cluster(op, ctx, tasks, keys, previous_table, backend, attempt)
            break
        except backend.failures as exc:
            last_error = exc
        finally:
            backend.close()
    else:
        raise RuntimeError(
            f"dedup: an index actor died in each of {MAX_ATTEMPTS} attempts; stage failed "
            f"(last error: {last_error})"
        ) from last_error

    summary = _write_outputs(op, ctx, tasks, keys, n_prev, nodes, roots)
    summary.update(stats, attempts=attempt, index_shards=shards, against_docs=n_prev)
    return summary


# -- keys ------------------------------------------------------------------------------


class _Keys:
    """Record keys per task, and ids/sources by key (for cluster ids and audit)."""

    def __init__(self, per_task: dict[str, np.ndarray], ids: pa.Array, sources: pa.Array):
        self.per_task = per_task
        self.ids = ids
        self.sources = sources


def _assign_keys(
    op: Dedup, ctx: BarrierContext, tasks: list[str], previous: pa.Table | None
) -> _Keys:
    prefer = {s: i for i, s in enumerate(op.config.keep.prefer_source)}
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
        sources = table.column("source").to_pylist()
        sizes.append(table.num_rows)
        cols["origin"].append(np.ones(table.num_rows, np.int8))
        cols["rank"].append(np.array([prefer.get(s, len(prefer)) for s in sources], np.int32))
        cols["id"].append(table.column("id"))
        cols["source"].append(table.column("source"))
        cols["task"].append(np.full(table.num_rows, t, np.int32))
        cols["ord"].append(table.column(ORD).to_numpy())
    flat = {
        k: (pa.chunked_array(v, pa.string()) if k in ("id", "source") else np.concatenate(v))
        for k, v in cols.items()
        if v
    }
    if not flat:
        return _Keys({}, pa.array([], pa.string()), pa.array([], pa.string()))
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
    return _Keys(per_task, ids, sources)


# -- index and components -------------------------------------------------------------


def _minhash_matrix(op: Dedup, signatures: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(valid row indices, (valid rows, num_perm) uint32 signatures) of a ``_minhash`` column."""
    valid = np.flatnonzero(pc.is_valid(signatures).to_numpy(zero_copy_only=False))
    values = signatures.filter(pc.is_valid(signatures))
    num_perm = op.config.num_perm
    raw = np.frombuffer(values.buffers()[1], dtype=np.uint32)
    start = values.offset * num_perm
    return valid, raw[start : start + len(values) * num_perm].reshape(-1, num_perm)


def _bucket_entries(op: Dedup, signatures: pa.Array) -> tuple[np.ndarray, np.ndarray, Any]:
    """(valid row indices, (rows, per-row) bucket keys, fingerprints or None)."""
    method = op.config.method
    if method == "minhash":
        valid, sigs = _minhash_matrix(op, signatures)
        bands, rows = op.bands_rows()
        return valid, band_keys(sigs, bands, rows, op.config.hash_seed), None
    valid = np.flatnonzero(pc.is_valid(signatures).to_numpy(zero_copy_only=False))
    hashes = signatures.filter(pc.is_valid(signatures)).to_numpy(zero_copy_only=False)
    hashes = hashes.astype(np.uint64)
    if method == "exact":
        return valid, hashes[:, None], None
    masks = block_masks(op.config.max_hamming, op.simhash_block_count())
    return valid, table_keys(hashes, masks), hashes


def _send(backend: Any, op: Dedup, signatures: pa.Array, node_keys: np.ndarray) -> list[Any]:
    valid, bucket, fps = _bucket_entries(op, signatures)
    if len(valid) == 0:
        return []
    per_row = bucket.shape[1]
    keys = bucket.reshape(-1)
    nodes = np.repeat(node_keys[valid], per_row).astype(np.uint32)
    fps = None if fps is None else np.repeat(fps, per_row)
    owner = keys % np.uint64(backend.count)
    order = np.argsort(owner, kind="stable")
    bounds = np.searchsorted(owner[order], np.arange(backend.count + 1, dtype=np.uint64))
    pending = []
    for shard in range(backend.count):
        sel = order[bounds[shard] : bounds[shard + 1]]
        if len(sel):
            part_fps = None if fps is None else fps[sel]
            pending.append(backend.call_one(shard, "add", keys[sel], nodes[sel], part_fps))
    return pending


def _send_signatures(
    backend: Any, op: Dedup, signatures: pa.Array, node_keys: np.ndarray, needed: np.ndarray
) -> list:
    """Full MinHash signatures of the candidate nodes to their owners (for verification)."""
    valid, sigs = _minhash_matrix(op, signatures)
    wanted = np.isin(node_keys[valid], needed)
    nodes, sigs = node_keys[valid][wanted], sigs[wanted]
    owner = nodes % backend.count
    return [
        backend.call_one(shard, "add_signatures", nodes[owner == shard], sigs[owner == shard])
        for shard in range(backend.count)
        if (owner == shard).any()
    ]


def _stream(backend, send, op, ctx, tasks, keys, previous) -> int:
    """Send every part's signature column through ``send``; returns the non-null count."""
    column = op.signature_column
    pending: list[Any] = []
    count = 0
    if previous is not None:
        prev_keys = np.arange(previous.num_rows, dtype=np.int64)
        pending += send(backend, op, previous.column(column).combine_chunks(), prev_keys)
        count += previous.num_rows
    for i, task in enumerate(tasks):
        sigs = pq.read_table(ctx.parts[task], columns=[column]).column(column).combine_chunks()
        count += len(sigs) - sigs.null_count
        pending += send(backend, op, sigs, keys.per_task[task])
        if i % _INFLIGHT_PARTS == _INFLIGHT_PARTS - 1:
            backend.wait(pending)  # backpressure: bounded data in flight
            pending = []
    backend.wait(pending)
    return count


def _cluster(op, ctx, tasks, keys, previous, backend, attempt):
    indexed = _stream(backend, _send, op, ctx, tasks, keys, previous)
    index_bytes = sum(backend.call_all("index_bytes"))
    _hook("indexed", attempt, backend)
    stats: dict[str, Any] = {}
    if op.config.method == "minhash":
        stats["candidate_edges"] = (
            sum(backend.exchange("candidate_edges", "receive_candidates")) // 2
        )
        # Only candidate nodes' signatures travel (the driver holds their keys: 8 bytes each).
        needed = np.unique(
            np.concatenate([np.zeros(0, np.int64), *backend.call_all("candidate_nodes")])
        )
        stats["candidate_nodes"] = len(needed)
        send = functools.partial(_send_signatures, needed=needed)
        _stream(backend, send, op, ctx, tasks, keys, previous)
        _hook("signatures", attempt, backend)
        stats["verified_edges"] = sum(backend.exchange("forward", "verify"))
        backend.exchange("emit_verified", "receive")
    else:
        backend.exchange("candidate_edges", "receive")
    _hook("edges", attempt, backend)
    rounds, changed = 0, True
    while changed:
        if rounds == MAX_ROUNDS:
            raise RuntimeError(f"dedup: components did not converge in {MAX_ROUNDS} rounds")
        rounds += 1
        changed = any(backend.exchange("large_star", "receive"))
        changed |= any(backend.exchange("small_star", "receive"))
    stats["shard_peak_rss_mb"] = backend.call_all("peak_rss_mb")
    pairs = backend.call_all("roots")
    nodes = np.concatenate([p[0] for p in pairs]) if pairs else np.zeros(0, np.int64)
    roots = np.concatenate([p[1] for p in pairs]) if pairs else np.zeros(0, np.int64)
    order = np.argsort(nodes)
    stats.update(
        indexed=int(indexed),
        index_bytes=int(index_bytes),
        index_bytes_per_doc=round(index_bytes / indexed, 1) if indexed else 0.0,
        rounds=rounds,
    )
    return nodes[order], roots[order], stats


def _hook(phase: str, attempt: int, backend: Any) -> None:
    if _fault_hook is not None:
        _fault_hook(phase, attempt, getattr(backend, "actors", []))


# -- outputs ---------------------------------------------------------------------------


def _write_outputs(op, ctx, tasks, keys, n_prev, nodes, roots) -> dict[str, Any]:
    reason = f"dedup:{op.config.method}"
    column = op.signature_column
    ctx.decision_dir.mkdir(parents=True, exist_ok=True)
    ctx.audit_dir.mkdir(parents=True, exist_ok=True)
    audit_schema = pa.schema(
        [
            ("id", pa.string()),
            ("source", pa.string()),
            ("cluster", pa.string()),
            ("kept", pa.bool_()),
        ]
    )
    sig_schema = pa.schema(
        [("id", pa.string()), ("source", pa.string()), (column, op._signature_type())],
        metadata={SIGNATURE_META_KEY: json.dumps(op.signature_params(), sort_keys=True)},
    )
    counts = {"docs": 0, "empty": 0, "clustered": 0, "dropped": 0, "dropped_against": 0}
    cluster_roots: set[int] = set()
    with (
        _AtomicParquet(ctx.audit_dir / "clusters.parquet", audit_schema) as audit,
        _AtomicParquet(ctx.audit_dir / "signatures.parquet", sig_schema) as published,
    ):
        for task in tasks:
            table = pq.read_table(ctx.parts[task], columns=["id", "source", ORD, column])
            task_keys = keys.per_task[task]
            pos = np.clip(np.searchsorted(nodes, task_keys), 0, max(len(nodes) - 1, 0))
            in_cluster = (nodes[pos] == task_keys) if len(nodes) else np.zeros(len(task_keys), bool)
            root = np.where(in_cluster, roots[pos] if len(nodes) else 0, task_keys)
            dropped = root != task_keys
            counts["docs"] += table.num_rows
            counts["empty"] += table.column(column).null_count
            counts["clustered"] += int(in_cluster.sum())
            counts["dropped"] += int(dropped.sum())
            counts["dropped_against"] += int((dropped & (root < n_prev)).sum())
            cluster_roots.update(np.unique(root[in_cluster]).tolist())
            _write_decision(ctx.decision_dir / f"{task}.parquet", table, dropped, reason)
            if in_cluster.any():
                sel = pa.array(np.flatnonzero(in_cluster))
                audit.write(
                    pa.table(
                        {
                            "id": table.column("id").take(sel),
                            "source": table.column("source").take(sel),
                            "cluster": keys.ids.take(pa.array(root[in_cluster])),
                            "kept": pa.array(~dropped[in_cluster]),
                        },
                        schema=audit_schema,
                    )
                )
            kept = table.filter(pa.array(~dropped)).select(["id", "source", column])
            kept = kept.filter(pc.is_valid(kept.column(column)))
            published.write(kept.cast(sig_schema))
    counts["kept"] = counts["docs"] - counts["dropped"]
    counts["clusters"] = len(cluster_roots)
    counts.update(method=op.config.method)
    if op.config.method == "minhash":
        counts["bands"], counts["rows"] = op.bands_rows()
    return counts


def _write_decision(path: Path, table: pa.Table, dropped: np.ndarray, reason: str) -> None:
    if not dropped.any():
        path.unlink(missing_ok=True)
        return
    ords = table.column(ORD).filter(pa.array(dropped))
    decision = pa.table({ORD: ords, DECISION_REASON: pa.array([reason] * len(ords), pa.string())})
    tmp = path.with_suffix(".parquet.tmp")
    pq.write_table(decision, tmp)
    os.replace(tmp, path)


class _AtomicParquet:
    """A parquet file written in row groups to a temporary name, renamed on success."""

    def __init__(self, path: Path, schema: pa.Schema) -> None:
        self.path, self.schema = path, schema
        self.tmp = path.with_suffix(".parquet.tmp")

    def __enter__(self) -> _AtomicParquet:
        self.writer = pq.ParquetWriter(self.tmp, self.schema)
        return self

    def write(self, table: pa.Table) -> None:
        if table.num_rows:
            self.writer.write_table(table)

    def __exit__(self, exc_type, exc, tb) -> None:
        self.writer.close()
        if exc_type is None:
            os.replace(self.tmp, self.path)
        else:
            self.tmp.unlink(missing_ok=True)


# -- against ---------------------------------------------------------------------------


def load_published(run_dir: str | Path, op: Dedup) -> pa.Table:
    """Signatures published by a previous run (``run_dir/dedup/signatures.parquet``; a
    local path or a URI).

    Raises:
        FileNotFoundError: the run has no published signatures.
        ValueError: they were made with different signature parameters (lists them).
    """
    path = fs.join(str(run_dir), "dedup", "signatures.parquet")
    if not fs.exists(path):
        raise FileNotFoundError(f"dedup.against: {path} not found (was it a dedup run?)")
    with fs.open_input_file(path) as f:
        table = pq.read_table(f)
    meta = json.loads((table.schema.metadata or {}).get(SIGNATURE_META_KEY, b"{}"))
    mine = op.signature_params()
    diff = {k: (meta.get(k), v) for k, v in mine.items() if meta.get(k) != v}
    if diff:
        detail = ", ".join(f"{k}: theirs {a!r} vs ours {b!r}" for k, (a, b) in sorted(diff.items()))
        raise ValueError(f"dedup.against: {path} has incompatible signatures ({detail})")
    return table.select(["id", "source", op.signature_column])
