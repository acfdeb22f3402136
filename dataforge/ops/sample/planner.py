"""Planner of the ``sample`` barrier: mixture targets, then an exact, order-free selection.

Sizes come from ``ctx.source_stats`` (the live totals the runtime counted before the
barrier). Selection reads only ``source``, ``_hash``, ``_units`` and ``_ord`` from the
prepared parts, streaming them three times so memory stays bounded whatever the corpus size:

1. a per-source histogram of units over the top ``HIST_BITS`` bits of the hash;
2. the documents of the one bucket per source where the cumulative units reach the
   source's selection target, sorted by (hash, units) to place the exact cut;
3. per task, each document's copy count, written to ``decision_dir/<task>.parquet``.

A document is selected iff its (hash, units) key is <= the source's cut key, so the result
depends only on the set of (id, units) pairs, never on parts, batches or actors (duplicate
(id, units) pairs share a key and are selected together). Ray is not needed.
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from dataforge.ops.barrier import BarrierContext
from dataforge.ops.sample import COPIES, HASH, UNITS, MixturePlan, Sample, mixture_plan
from dataforge.records import ORD

__all__ = ["HIST_BITS", "plan"]

HIST_BITS = 16
_BUCKETS = 1 << HIST_BITS
_SHIFT = np.uint64(64 - HIST_BITS)
_READ_ROWS = 1 << 20


def plan(op: Sample, ctx: BarrierContext) -> dict[str, Any]:
    """Compute the mixture, write per-task copy counts, and return the JSON summary.

    Raises:
        ValueError: weights or source_stats name unknown sources, or a unit is missing
            from source_stats.
        RuntimeError: the parts' ``_units`` do not add up to ``source_stats``.
    """
    cfg = op.config
    names = list(ctx.sources)
    unknown = sorted((set(cfg.weights) | set(ctx.source_stats)) - set(names))
    if unknown:
        raise ValueError(f"sample: unknown source(s) {unknown}; sources: {names}")
    sizes = {s: _stat(ctx.source_stats, s, cfg.unit) for s in names}
    total = cfg.target if cfg.target is not None else sum(sizes.values())
    mix = mixture_plan(sizes, cfg.effective_alpha, total, cfg.weights, cfg.max_epochs)

    hist = _unit_histograms(ctx.parts, names)
    counted = np.rint(hist.sum(axis=1)).astype(np.int64)
    for i, s in enumerate(names):
        if counted[i] != sizes[s]:
            raise RuntimeError(
                f"sample: source_stats[{s!r}][{cfg.unit!r}] = {sizes[s]} but the prepared parts "
                f"hold {int(counted[i])} {cfg.unit}; runtime statistics and Sample.prepare disagree"
            )
    base = np.zeros(len(names), dtype=np.int64)
    remainder = np.zeros(len(names))
    for i, s in enumerate(names):
        if sizes[s] > 0:
            ratio = mix.sources[s].target_units / sizes[s]
            base[i] = math.floor(ratio)
            remainder[i] = max(0.0, mix.sources[s].target_units - base[i] * sizes[s])
    cut_hash, cut_units = _cut_keys(ctx.parts, names, hist, remainder)
    counts = _write_decisions(ctx, names, base, cut_hash, cut_units)
    return _summary(op, names, mix, counts)


def _stat(stats: dict[str, dict[str, int]], source: str, unit: str) -> int:
    if source not in stats:
        return 0  # a source that no record reached the barrier from
    if unit not in stats[source]:
        raise ValueError(
            f"sample: source_stats[{source!r}] has no {unit!r}: {sorted(stats[source])}"
        )
    return int(stats[source][unit])


def _batches(parts: dict[str, Path], columns: list[str]) -> Iterator[tuple[str, pa.RecordBatch]]:
    for task in sorted(parts):
        file = pq.ParquetFile(parts[task])
        if file.metadata.num_rows == 0:
            continue
        for batch in file.iter_batches(batch_size=_READ_ROWS, columns=columns):
            yield task, batch


def _keys(batch: pa.RecordBatch, names: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(source index, hash, units) of a batch of prepared rows."""
    src = pc.index_in(batch.column("source"), value_set=pa.array(names, pa.string()))
    if src.null_count:
        bad = pc.filter(batch.column("source"), src.is_null()).unique().to_pylist()
        raise ValueError(f"sample: parts hold unknown source(s) {bad}; sources: {names}")
    hashes = batch.column(HASH).to_numpy().astype(np.uint64, copy=False)
    units = batch.column(UNITS).to_numpy().astype(np.int64, copy=False)
    return src.to_numpy().astype(np.int64), hashes, units


def _unit_histograms(parts: dict[str, Path], names: list[str]) -> np.ndarray:
    """Units per (source, top hash bits); float64 is exact for sums below 2**53."""
    hist = np.zeros(len(names) * _BUCKETS)
    for _, batch in _batches(parts, ["source", HASH, UNITS]):
        src, hashes, units = _keys(batch, names)
        cell = src * _BUCKETS + (hashes >> _SHIFT).astype(np.int64)
        hist += np.bincount(cell, weights=units, minlength=len(hist))
    return hist.reshape(len(names), _BUCKETS)


def _cut_keys(
    parts: dict[str, Path], names: list[str], hist: np.ndarray, remainder: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per source the largest selected (hash, units) key, for ``remainder`` units taken by
    ascending key; the cumulative sum stops at whichever side of the target is closer.
    A source selecting nothing gets units -1 with hash 0 (no document has a smaller key)."""
    cut_hash = np.zeros(len(names), dtype=np.uint64)
    cut_units = np.full(len(names), -1, dtype=np.int64)
    cum = np.cumsum(hist, axis=1)
    bucket = np.full(len(names), -1, dtype=np.int64)
    for i in np.flatnonzero(remainder > 0):
        bucket[i] = min(int(np.searchsorted(cum[i], remainder[i], side="left")), _BUCKETS - 1)
    if not (bucket >= 0).any():
        return cut_hash, cut_units
    found: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {}
    for _, batch in _batches(parts, ["source", HASH, UNITS]):
        src, hashes, units = _keys(batch, names)
        inside = (hashes >> _SHIFT).astype(np.int64) == bucket[src]
        for i in np.unique(src[inside]):
            mask = inside & (src == i)
            found.setdefault(int(i), []).append((hashes[mask], units[mask]))
    for i in np.flatnonzero(bucket >= 0):
        b = int(bucket[i])
        before = float(cum[i, b - 1]) if b > 0 else 0.0
        pieces = found.get(int(i), [])
        hashes = np.concatenate([h for h, _ in pieces]) if pieces else np.zeros(0, np.uint64)
        units = np.concatenate([u for _, u in pieces]) if pieces else np.zeros(0, np.int64)
        order = np.lexsort((units, hashes))
        hashes, units = hashes[order], units[order]
        reached = before + np.cumsum(units)
        k = int(np.searchsorted(reached, remainder[i], side="left"))
        if k >= len(reached):
            take = len(reached)
        else:
            low = reached[k - 1] if k > 0 else before
            take = k if remainder[i] - low <= reached[k] - remainder[i] else k + 1
        if take > 0:
            cut_hash[i], cut_units[i] = hashes[take - 1], units[take - 1]
        else:
            # nothing from this bucket: everything in the buckets below it
            cut_hash[i], cut_units[i] = np.uint64(b) << _SHIFT, -1
    return cut_hash, cut_units


def _write_decisions(
    ctx: BarrierContext,
    names: list[str],
    base: np.ndarray,
    cut_hash: np.ndarray,
    cut_units: np.ndarray,
) -> dict[str, np.ndarray]:
    """Write ``<task>.parquet`` (``_ord``, ``copies``) for rows whose copies differ from 1;
    return per-source document and unit counts of the result."""
    ctx.decision_dir.mkdir(parents=True, exist_ok=True)
    k = len(names)
    counts = {
        key: np.zeros(k, dtype=np.int64)
        for key in ("input_docs", "dropped_docs", "repeated_docs", "realized_units")
    }
    # parts arrive task by task, so one task's decisions are held in memory at a time
    for task, group in itertools.groupby(
        _batches(ctx.parts, [ORD, "source", HASH, UNITS]), key=_task
    ):
        tables = []
        for _, batch in group:
            src, hashes, units = _keys(batch, names)
            h, u = cut_hash[src], cut_units[src]
            copies = base[src] + ((hashes < h) | ((hashes == h) & (units <= u)))
            _count(counts, src, copies, units)
            differ = copies != 1
            if differ.any():
                ords = batch.column(ORD).to_numpy()[differ].astype(np.int64)
                tables.append(pa.table({ORD: ords, COPIES: copies[differ].astype(np.int64)}))
        if tables:
            target = ctx.decision_dir / f"{task}.parquet"
            tmp = target.with_name(f".{target.name}.tmp")
            try:
                pq.write_table(pa.concat_tables(tables), tmp)
                os.replace(tmp, target)  # a reader never sees a half-written decision
            finally:
                tmp.unlink(missing_ok=True)
    return counts


def _task(item: tuple[str, pa.RecordBatch]) -> str:
    return item[0]


def _count(
    counts: dict[str, np.ndarray], src: np.ndarray, copies: np.ndarray, units: np.ndarray
) -> None:
    """Add one batch's documents to the per-source counts."""
    k = len(counts["input_docs"])
    counts["input_docs"] += np.bincount(src, minlength=k)
    for key, values in (
        ("dropped_docs", copies == 0),
        ("repeated_docs", np.maximum(copies - 1, 0)),
        ("realized_units", copies * units),
    ):
        counts[key] += np.rint(
            np.bincount(src, weights=values.astype(np.float64), minlength=k)
        ).astype(np.int64)


def _summary(
    op: Sample, names: list[str], mix: MixturePlan, counts: dict[str, np.ndarray]
) -> dict[str, Any]:
    cfg = op.config
    realized_total = int(counts["realized_units"].sum())
    planned_total = sum(m.target_units for m in mix.sources.values())
    sources = {}
    for i, s in enumerate(names):
        m = mix.sources[s]
        realized = int(counts["realized_units"][i])
        input_docs = int(counts["input_docs"][i])
        dropped, repeated = int(counts["dropped_docs"][i]), int(counts["repeated_docs"][i])
        sources[s] = {
            "n": m.units,
            "q": m.share,
            "p": m.target_share,
            "target_units": m.target_units,
            "effective_p": m.target_units / planned_total if planned_total > 0 else 0.0,
            "capped": m.capped,
            "cap_shortfall": max(0.0, m.target_share * mix.requested - m.target_units),
            "realized_units": realized,
            "realized_share": realized / realized_total if realized_total else 0.0,
            "repetition": realized / m.units if m.units else 0.0,
            "input_docs": input_docs,
            "kept_docs": input_docs - dropped,
            "dropped_docs": dropped,
            "repeated_docs": repeated,
            "output_docs": input_docs - dropped + repeated,
        }
    return {
        "unit": cfg.unit,
        "alpha": cfg.effective_alpha,
        "seed": op.seed,
        "max_epochs": cfg.max_epochs,
        "requested_units": mix.requested,
        "realized_units": realized_total,
        "shortfall_units": mix.shortfall,
        "sources": sources,
    }
