"""Planner of the dedup barrier: sharded bucket index, verified candidates, star clusters.

It runs on one worker of the run (:mod:`dataforge.runtime.barrier_task`), not in the
driver. Steps (``plan``):

1. **Keys.** Every record gets an integer key: its rank in the order
   ``(origin, prefer_source rank, id, task, _ord)``, where records published by the runs
   listed in ``against`` come first (origin 0). Keys depend only on the records, never on
   batch sizes, task boundaries or actor counts, and the smallest key of a cluster is its
   representative. (The sort reads ids and sources, not signatures; past a quarter of
   ``ctx.memory_bytes`` it runs in runs spilled to ``ctx.spill_dir`` and merged, and the
   keys and ids are memory-mapped files there: :mod:`.keys`.)
2. **Exact copies.** Verified methods (MinHash, SimHash) first group the records by the
   exact hash of their normalized text (``_text_hash``; :mod:`dataforge.ops.dedup.copies`),
   on the shards by hash: only the head (smallest key) of each group goes on to steps 3-4,
   and every copy takes its head's cluster in step 5 (one pass, 16 bytes per record).
3. **Index.** Signatures are streamed part by part (sorted task order); each record's bucket
   keys (from the method, :class:`dataforge.ops.dedup.method.DedupMethod`) go to index
   shard ``bucket_key % N`` (of the key bits a shard keeps:
   :func:`dataforge.ops.dedup.buckets.key_owners`, so that buckets, and the output, do
   not depend on N). N = ``index_shards`` (default: the run's CPUs). The shards
   (:class:`dataforge.ops.dedup.index.IndexShard`) are the context's shard workers
   (``ctx.start_shards``): with the Ray executor Ray actors spread over the cluster; with
   the local one objects in the planning worker, each on a thread of its own. Same shards,
   same calls, same results.
4. **Candidates and verification.** Each shard turns its buckets into candidate pairs,
   routed to the shard that owns the first node; in rounds of bucket keys, a share of
   ``ctx.memory_bytes // VERIFY_SHARE`` each at :data:`CANDIDATE_COPIES` bytes per byte of
   entries, the entries and the pairs on disk past the shards' share
   (:mod:`dataforge.ops.dedup.runs`). MinHash first screens them on the
   signatures (chance band collisions, far below the threshold, go). Verified methods
   (MinHash, SimHash): the parts are read again and only the candidate records are shingled, their shingle
   sequences going to the owning shard; each pair is scored on the shard that owns its
   second node (:mod:`dataforge.ops.dedup.verify`: exact Jaccard >= ``threshold``, and not
   two documents that each have content of their own). Memory on a shard: the shingles of
   its candidate records, not of the corpus, held up to its share of
   ``ctx.memory_bytes // VERIFY_SHARE`` and past it on disk, read back a block at a time
   (:mod:`dataforge.ops.dedup.pool`); the signatures forwarded for the screen, the
   template's n-grams and the texts forwarded for the pairs go in rounds of at most
   ``ctx.memory_bytes // VERIFY_SHARE`` (counting the copies each makes; slices of the
   first nodes in key order cut at equal bytes of texts and pairs, or of the n-grams by
   value: the same pairs and template in any number of rounds).
5. **Star clusters.** The decided pairs (few: near-duplicates only) come back to the
   planner, which builds star clusters in key order (:mod:`dataforge.ops.dedup.star`):
   every dropped record was verified against its representative, never chained (a copy:
   its head was).
6. **Decisions.** ``decision_dir/<task>.parquet`` lists ``_ord`` and ``_dedup_reason`` of the
   dropped records; ``audit_dir/clusters.parquet`` has (id, source, cluster, kept,
   similarity) for every clustered record (cluster = id of the representative;
   similarity = the verified similarity to it that decided the drop, null for the kept
   representative); ``audit_dir/signatures.parquet`` publishes the signatures of the kept
   records for later ``against`` runs.

Failures: index actors run with ``max_restarts=0``; if one dies, every call to it raises,
the whole index is rebuilt from the parts with fresh actors (the result is a function of
the parts only, so a retry cannot change it), and after ``MAX_ATTEMPTS`` the stage fails
with a ``RuntimeError``. Empty texts (null signature) never enter the index.
"""

from __future__ import annotations

import collections
import functools
import json
import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from dataforge.io import fs
from dataforge.ops.barrier import WORK_NODES, BarrierContext, ShardBackend
from dataforge.ops.barrier.memory import return_free_memory
from dataforge.ops.dedup import DECISION_REASON, Dedup
from dataforge.ops.dedup.calls import (
    Calls,
    index_calls,
    payload_calls,
    signature_calls,
    text_hash_calls,
)
from dataforge.ops.dedup.copies import join_heads
from dataforge.ops.dedup.index import IndexShard
from dataforge.ops.dedup.keys import assign_keys
from dataforge.ops.dedup.runs import MIN_RUN_ROWS, cut_ranges
from dataforge.ops.dedup.star import StarWalk
from dataforge.records import ORD

__all__ = [
    "MAX_ATTEMPTS",
    "MAX_VERIFY_ROUNDS",
    "SIGNATURE_META_KEY",
    "VERIFY_SHARE",
    "load_published",
    "plan",
]

MAX_ATTEMPTS = 2
SIGNATURE_META_KEY = b"dataforge.dedup"
VERIFY_SHARE = 4
"""The texts forwarded in one verification round take at most this fraction (1/4) of the
planner's budget (the shards' own texts, and the index's other state, share it)."""
TEMPLATE_COPIES = 5
"""Bytes alive at once per byte of a template round's n-grams: sent, joined on the
counting shard, sorted, and the positions (8 bytes per distinct n-gram) of the count."""
CANDIDATE_COPIES = 6
"""Bytes alive at once per byte of a candidate round's bucket entries (8 each): the
entries read, sorted, the buckets' keys and nodes (12), their pairs made unique, and the
pairs routed and received."""
STAR_BYTES_PER_EDGE = 160
"""Bytes alive at once per decided pair of a star range in the planner: the shards'
pieces (24) and, at the walk's peak, their join, node ranks, order and sorted copies
(137.5 measured by tracemalloc on 2M random pairs of 400k nodes, two shards' pieces)."""
_STAR_BINS = 1 << 16
"""Bins of the larger node the shards count pairs in, for the star ranges."""
MAX_VERIFY_ROUNDS = 64
"""Rounds of verification at most: each one scans every shard's candidate pairs."""
_INFLIGHT_PARTS = 8
"""Parts sent to the shards between two waits: bounds the data in flight."""
_PREPARE_THREADS = 2
"""Threads (at most ``num_cpus``) that read parts and make their index calls ahead of the
sending thread: Parquet decoding and the numpy of bucket keys and shingles release the
GIL, the rest of that work does not, so a third thread adds little."""

# Tests set this to inject faults: called as hook(phase, attempt, shards) at phase ends.
_fault_hook: Callable[[str, int, list[Any]], None] | None = None


def plan(op: Dedup, ctx: BarrierContext) -> dict[str, Any]:
    """Cluster the prepared records, write decisions and audit, return the summary."""
    tasks = sorted(ctx.parts)
    shards = op.config.index_shards or max(1, ctx.num_cpus)
    previous = [load_published(op.context.locate(p), op) for p in op.config.against]
    previous_table = pa.concat_tables(previous) if previous else None
    n_prev = 0 if previous_table is None else previous_table.num_rows

    def start() -> ShardBackend:
        # The shards shingle their own candidates' texts (op.verification_texts).
        # Each shard holds at most its share of a VERIFY_SHARE of the budget of candidate
        # texts, past it they wait on disk (:mod:`dataforge.ops.dedup.pool`).
        hold = None if ctx.memory_bytes is None else ctx.memory_bytes // VERIFY_SHARE // shards
        texts_of, spill = op.verification_texts, str(ctx.spill_dir) if ctx.spill_dir else None
        return ctx.start_shards(
            shards, IndexShard, shards, op.method, n_prev, texts_of, hold, spill
        )

    backend = start()  # Ray: the shards' actors start while the keys are assigned
    try:
        keys = assign_keys(op, ctx, tasks, previous_table)
    except BaseException:
        backend.close()
        raise
    last_error: Exception | None = None
    for attempt in range(1, MAX_ATTEMPTS + 1):
        backend = backend or start()
        try:
            members, copies, stats = _cluster(
                op, ctx, tasks, keys, previous_table, backend, attempt
            )
            shard_nodes = backend.nodes()
            break
        except backend.failures as exc:
            last_error = exc
        finally:
            backend.close()
            backend = None
    else:
        raise RuntimeError(
            f"dedup: an index actor died in each of {MAX_ATTEMPTS} attempts; stage failed "
            f"(last error: {last_error})"
        ) from last_error

    stars = _with_representatives(join_heads(members, copies))
    summary = _write_outputs(op, ctx, tasks, keys, n_prev, stars)
    summary.update(stats, attempts=attempt, index_shards=shards, against_docs=n_prev)
    summary.update(key_runs=keys.spilled_runs)  # 0: the keys were sorted in memory
    summary[WORK_NODES] = shard_nodes
    return summary


# -- index and components -------------------------------------------------------------


def _needed(backend: Any) -> np.ndarray:
    """Keys of the records that have a candidate pair on some shard."""
    return np.unique(np.concatenate([np.zeros(0, np.int64), *backend.call_all("candidate_nodes")]))


def _stream(
    backend, calls_of, op, ctx, tasks, keys, previous, with_text: bool = False, column=None
) -> int:
    """Send every part's signature column (or ``column``; ``with_text``: and a table of its
    texts and languages) to the shards: ``calls_of(count, op, signatures, node_keys[,
    texts])`` makes a part's calls on :data:`_PREPARE_THREADS` threads, sent here in task
    order (so the index receives what one thread would send). Returns the non-null count."""
    column = column or op.signature_column
    pending: list[Any] = []
    count = 0

    def send(calls: Calls) -> None:
        pending.extend(backend.call_one(shard, method, *args) for shard, method, args in calls)

    if previous is not None:
        prev_keys = keys.of_previous()
        send(calls_of(backend.count, op, previous.column(column).combine_chunks(), prev_keys))
        count += previous.num_rows

    def read(task: str) -> tuple[str, pa.Table]:
        columns = [column, "text", "lang"] if with_text else [column]
        return task, pq.read_table(ctx.parts[task], columns=columns)

    def prepare(part: tuple[str, pa.Table]) -> tuple[int, Calls]:
        task, table = part
        sigs = table.column(column).combine_chunks()
        extra = {"texts": table.select(["text", "lang"])} if with_text else {}
        calls = calls_of(backend.count, op, sigs, keys.of_task(task), **extra)
        return len(sigs) - sigs.null_count, calls

    threads = max(1, min(_PREPARE_THREADS, ctx.num_cpus))
    for i, (valid, calls) in enumerate(_in_order(read, prepare, tasks, threads)):
        count += valid
        send(calls)
        if i % _INFLIGHT_PARTS == _INFLIGHT_PARTS - 1:
            backend.wait(pending)  # backpressure: bounded data in flight
            pending.clear()
    backend.wait(pending)
    return count


def _in_order(
    read: Callable[[str], Any], prepare: Callable[[Any], Any], tasks: list[str], threads: int
) -> Iterator[Any]:
    """``prepare(read(task))`` of each task in order. With ``threads`` > 1 both run on that
    many threads, at most ``threads`` tasks ahead of the caller (Parquet decoding and the
    numpy of bucket keys and shingles run outside the GIL); with one, a thread reads the
    next part while the caller prepares the current one."""
    one = threads <= 1
    threads = max(1, threads)

    def work(task: str) -> Any:
        return read(task) if one else prepare(read(task))

    with ThreadPoolExecutor(threads, thread_name_prefix="dataforge-prepare") as pool:
        ahead = collections.deque(pool.submit(work, t) for t in tasks[:threads])
        for i in range(len(tasks)):
            result = ahead.popleft().result()
            if i + threads < len(tasks):
                ahead.append(pool.submit(work, tasks[i + threads]))
            yield prepare(result) if one else result


def _copies(op, ctx, tasks, keys, backend) -> np.ndarray:
    """``(copy, head)`` pairs of the records whose text hash a smaller key has (verified
    methods; none for exact)."""
    if op.text_hash_column is None:
        return np.zeros((0, 2), np.int64)
    _stream(backend, text_hash_calls, op, ctx, tasks, keys, None, column=op.text_hash_column)
    return np.concatenate([np.zeros((0, 2), np.int64), *backend.call_all("copy_pairs")])


def _send_group_sizes(backend: Any, copies: np.ndarray) -> np.ndarray:
    """Send each copy group's size to the shard owning its head (for the template count,
    where the copies were candidates before they collapsed); returns the heads."""
    heads, copy_counts = np.unique(copies[:, 1], return_counts=True)
    owner = heads % backend.count
    backend.wait(
        [
            backend.call_one(i, "add_group_sizes", heads[owner == i], copy_counts[owner == i] + 1)
            for i in range(backend.count)
        ]
    )
    return heads


def _cluster(op, ctx, tasks, keys, previous, backend, attempt):
    copies = _copies(op, ctx, tasks, keys, backend)
    is_copy = np.zeros(keys.count, dtype=bool)
    is_copy[copies[:, 0]] = True
    heads_only = functools.partial(index_calls, copies=is_copy)
    indexed = _stream(backend, heads_only, op, ctx, tasks, keys, previous) - len(copies)
    index_bytes = sum(backend.call_all("index_bytes"))
    _trim(backend)
    _hook("indexed", attempt, backend)
    stats: dict[str, Any] = {"copies": len(copies)}
    # the candidate pairs in rounds of bucket keys (each round's entries, pairs and their
    # routed copies alive at once), received into runs that spill past the shards' share
    rounds = _rounds(ctx, CANDIDATE_COPIES * index_bytes)
    for r in range(rounds):
        backend.exchange("candidate_edges", "receive_candidates", r, rounds)
    stats["candidate_rounds"] = rounds
    _trim(backend)
    stats["candidate_pairs"] = sum(backend.call_all("finish_candidates")) // 2
    if op.method.verified and op.method.screen_floor() is not None:
        calls_of = functools.partial(signature_calls, needed=_needed(backend))
        _stream(backend, calls_of, op, ctx, tasks, keys, previous)
        held = sum(backend.broadcast("forward_bytes", True)) if ctx.memory_bytes else 0
        rounds = _rounds(ctx, held)
        for r in range(rounds):  # the signatures of a slice of the first nodes per round
            screened = backend.exchange("forward_signatures", "screen", r, rounds)
            _trim(backend)  # a round's freed copies would sit under the next one's
        stats["screened_pairs"], stats["screen_rounds"] = sum(screened), rounds
        rounds = _rounds(ctx, CANDIDATE_COPIES * sum(backend.call_all("candidate_bytes")))
        for r in range(rounds):  # the screened pairs replace the candidates
            backend.exchange("emit_screened", "receive_candidates", r, rounds)
        _trim(backend)
    if op.method.verified:
        # Only candidate records are read back and shingled (the planner holds their keys).
        needed = _needed(backend)
        stats["candidate_docs"] = len(needed)
        if op.config.verify.template_docs and len(copies):
            needed = np.union1d(needed, _send_group_sizes(backend, copies))
        calls_of = functools.partial(payload_calls, needed=needed)
        _stream(backend, calls_of, op, ctx, tasks, keys, previous, with_text=True)
        _trim(backend)
        if op.config.verify.template_docs:  # the candidates' template, counted on the shards
            rounds = _rounds(ctx, TEMPLATE_COPIES * sum(backend.call_all("template_bytes")))
            for r in range(rounds):  # a share of the n-grams (by value) counted per round
                counted = backend.exchange("template_counts", "count_template", r, rounds)
            stats["template_ngrams"] = sum(counted)
            stats["template_rounds"] = rounds
            backend.exchange("template_share", "receive_template")
            _trim(backend)
        _hook("signatures", attempt, backend)
        rounds = _verify_rounds(backend, ctx)
        verified = []
        for r in range(rounds):
            verified.append(sum(backend.exchange("forward", "verify", r, rounds)))
            _trim(backend)
        stats["verify_rounds"] = rounds
        stats["texts_spilled_shards"] = sum(backend.call_all("texts_spilled"))
        stats["verified_pairs"] = sum(verified)
        _trim(backend)
    _hook("edges", attempt, backend)
    total = sum(backend.call_all("finish_edges"))
    _trim(backend)
    stats["edge_runs"] = sum(backend.call_all("edge_runs"))
    stats["pair_runs"] = sum(backend.call_all("pair_runs"))
    n_prev = 0 if previous is None else previous.num_rows
    members, stats["star_ranges"] = _star_walk(backend, ctx, keys.count, n_prev, total)
    stats["shard_peak_rss_mb"] = backend.call_all("peak_rss_mb")
    backend.call_all("release_edges")
    _trim(backend)
    stats.update(
        indexed=int(indexed),
        index_bytes=int(index_bytes),
        index_bytes_per_doc=round(index_bytes / indexed, 1) if indexed else 0.0,
    )
    return members, copies, stats


def _star_walk(
    backend: Any, ctx: BarrierContext, key_count: int, n_prev: int, total: int
) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], int]:
    """Star clusters of the shards' decided pairs, a range of larger nodes at a time
    (:class:`dataforge.ops.dedup.star.StarWalk`), each range's pairs at most
    ``memory_bytes // VERIFY_SHARE`` at :data:`STAR_BYTES_PER_EDGE` where the histogram's
    bins allow. Returns the members ``(nodes, representatives, similarity)`` and the
    number of ranges."""
    walk = StarWalk(key_count, fixed_representatives=n_prev)
    ranges = _star_ranges(backend, ctx, key_count, total)
    members: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    for lo, hi in ranges:
        got = backend.broadcast("edges_between", lo, hi)
        big, small, sim = (_joined([g[i] for g in got], dtype) for i, dtype in enumerate(_EDGE))
        del got
        members.append(walk.decide(big, small, sim, lo, hi))
    nodes, reps, sims = (_joined([m[i] for m in members], dtype) for i, dtype in enumerate(_EDGE))
    return (nodes, reps, sims), len(ranges)


_EDGE = (np.int64, np.int64, np.float64)


def _joined(pieces: list[np.ndarray], dtype: Any) -> np.ndarray:
    return np.concatenate([np.zeros(0, dtype), *pieces]).astype(dtype, copy=False)


def _star_ranges(
    backend: Any, ctx: BarrierContext, key_count: int, total: int
) -> list[tuple[int, int]]:
    """Ranges ``[lo, hi)`` of the larger node that cover every key, in order, each with
    at most a ``memory_bytes // VERIFY_SHARE`` share of the pairs, and at least
    :data:`~dataforge.ops.dedup.runs.MIN_RUN_ROWS` of them (one range without a
    budget, or when all of them fit): cut at bins of ``2^shift`` keys, at most
    :data:`_STAR_BINS` of them, whose counts the shards report."""
    end = 1 << 31
    per_range = None if ctx.memory_bytes is None else ctx.memory_bytes // VERIFY_SHARE
    if per_range is None or total * STAR_BYTES_PER_EDGE <= per_range:
        return [(0, end)]
    per_range = max(MIN_RUN_ROWS, per_range // STAR_BYTES_PER_EDGE)
    shift = max(0, max(key_count - 1, 1).bit_length() - _STAR_BINS.bit_length() + 1)
    bins = (max(key_count - 1, 0) >> shift) + 1
    counts = np.sum(backend.broadcast("edge_histogram", shift, bins), axis=0).tolist()
    return [(lo, end if hi is None else hi) for lo, hi in cut_ranges(counts, per_range, shift)]


def _with_representatives(
    stars: tuple[np.ndarray, np.ndarray, np.ndarray],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The members ``(nodes, representatives, similarity)`` with their representatives
    (themselves, 1.0) added: every clustered node, sorted."""
    nodes, reps, sims = stars
    dropped = reps != nodes
    heads = np.setdiff1d(reps[dropped], nodes[~dropped])
    all_nodes = np.concatenate([nodes, heads])
    order = np.argsort(all_nodes, kind="stable")
    return (
        all_nodes[order],
        np.concatenate([reps, heads])[order],
        np.concatenate([sims, np.ones(len(heads))])[order],
    )


def _verify_rounds(backend: Any, ctx: BarrierContext) -> int:
    """Rounds of the pairs' verification: each forwards about a ``1 / rounds`` share of
    the candidates' texts (copies, beside the shards' own) and of the pairs, at most
    ``memory_bytes // VERIFY_SHARE`` where that allows (1 without a budget; at most
    :data:`MAX_VERIFY_ROUNDS`), as the shards count them
    (:meth:`~dataforge.ops.dedup.index.IndexShard.forward_bytes`: the copies the texts
    and pairs make on their way). The pairs decided do not depend on it."""
    held = sum(backend.call_all("forward_bytes")) if ctx.memory_bytes else 0
    return _rounds(ctx, held)


def _rounds(ctx: BarrierContext, held: int) -> int:
    """Rounds that move ``held`` bytes in shares of at most ``memory_bytes //
    VERIFY_SHARE`` (1 without a budget; at most :data:`MAX_VERIFY_ROUNDS`)."""
    if ctx.memory_bytes is None:
        return 1
    share = max(1, ctx.memory_bytes // VERIFY_SHARE)
    return int(min(MAX_VERIFY_ROUNDS, max(1, -(-held // share))))


def _trim(backend: Any) -> None:
    """A phase ended: the shards and this process give their free heap pages back."""
    backend.call_all("trim")
    return_free_memory()


def _hook(phase: str, attempt: int, backend: Any) -> None:
    if _fault_hook is not None:
        _fault_hook(phase, attempt, getattr(backend, "actors", []))


# -- outputs ---------------------------------------------------------------------------


def _write_outputs(op, ctx, tasks, keys, n_prev, stars) -> dict[str, Any]:
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
            ("similarity", pa.float32()),
        ]
    )
    sig_schema = pa.schema(
        [("id", pa.string()), ("source", pa.string()), (column, op.method.signature_type())],
        metadata={SIGNATURE_META_KEY: json.dumps(op.signature_params(), sort_keys=True)},
    )
    counts = {"docs": 0, "empty": 0, "clustered": 0, "dropped": 0, "dropped_against": 0}
    cluster_roots: set[int] = set()
    nodes, reps, sims = stars
    # A node is clustered when it was dropped for a representative, or is one that won.
    clustered = (reps != nodes) | np.isin(nodes, reps[reps != nodes])
    nodes, reps, sims = nodes[clustered], reps[clustered], sims[clustered]
    with (
        _AtomicParquet(ctx.audit_dir / "clusters.parquet", audit_schema) as audit,
        _AtomicParquet(ctx.audit_dir / "signatures.parquet", sig_schema) as published,
    ):
        for task in tasks:
            table = pq.read_table(ctx.parts[task], columns=["id", "source", ORD, column])
            task_keys = keys.of_task(task)
            pos = np.clip(np.searchsorted(nodes, task_keys), 0, max(len(nodes) - 1, 0))
            in_cluster = (nodes[pos] == task_keys) if len(nodes) else np.zeros(len(task_keys), bool)
            root = np.where(in_cluster, reps[pos] if len(nodes) else 0, task_keys)
            similarity = np.where(in_cluster, sims[pos] if len(nodes) else 0.0, 0.0)
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
                            "cluster": keys.ids_of(root[in_cluster]),
                            "kept": pa.array(~dropped[in_cluster]),
                            "similarity": pa.array(
                                similarity[in_cluster], pa.float32(), mask=~dropped[in_cluster]
                            ),
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
    counts.update(op.method.summary())
    return counts


def _write_decision(path: Path, table: pa.Table, dropped: np.ndarray, reason: str) -> None:
    if not dropped.any():
        path.unlink(missing_ok=True)
        return
    ords = table.column(ORD).filter(pa.array(dropped))
    decision = pa.table({ORD: ords, DECISION_REASON: pa.array([reason] * len(ords), pa.string())})
    tmp = path.with_suffix(".parquet.tmp")
    try:
        pq.write_table(decision, tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


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
