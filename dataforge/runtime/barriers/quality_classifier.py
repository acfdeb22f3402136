"""Planner of the ``quality_classifier`` barrier: the top share of each source, run-wide.

With ``keep_top``, each source keeps its ``round(keep_top * n)`` documents with the highest
(score, id hash) keys, the hash keyed by the pipeline seed (``_qc_tie``), so equal scores are
cut by a property of the document, never by the task or batch it came in. The parts are read
twice: once for the keys of every live document (two 8-byte numbers each), once per task to
write the ``_ord`` of its dropped rows. Without ``keep_top`` nothing is written: ``apply``
judges each row by its own score. Ray is not needed.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from dataforge.ops.quality_classifier import SCORE, TIE, QualityClassifier
from dataforge.records import ORD
from dataforge.runtime.barriers import BarrierContext

__all__ = ["plan"]

_COLUMNS = ["source", ORD, SCORE, TIE]


def _read(path) -> pa.Table | None:
    file = pq.ParquetFile(path)
    if file.metadata.num_rows == 0:
        return None
    return file.read(columns=_COLUMNS)


def plan(op: QualityClassifier, ctx: BarrierContext) -> dict[str, Any]:
    """Write per-task drop decisions for ``keep_top``; return per-source counts and cuts."""
    cfg = op.config
    keys: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
    for task in sorted(ctx.parts):
        table = _read(ctx.parts[task])
        if table is None:
            continue
        for source, score, tie in _by_source(table):
            keys.setdefault(source, []).append((score, tie))
    cuts: dict[str, tuple[float, int, int]] = {}  # source -> (score, tie, kept docs)
    summary: dict[str, Any] = {"name": cfg.name, "keep_top": cfg.keep_top, "sources": {}}
    for source in sorted(keys):
        score = np.concatenate([s for s, _ in keys[source]])
        tie = np.concatenate([t for _, t in keys[source]])
        n = len(score)
        summary["sources"][source] = {"scored_docs": n, "mean_score": float(score.mean())}
        if cfg.keep_top is None:
            continue
        keep = int(round(cfg.keep_top * n))
        order = np.lexsort((tie, score))[::-1]  # descending (score, tie)
        if keep == 0:
            cuts[source] = (np.inf, 0, 0)
        else:
            last = order[keep - 1]
            cuts[source] = (float(score[last]), int(tie[last]), keep)
        summary["sources"][source] |= {"kept_docs": keep, "cut_score": cuts[source][0]}
    if cfg.keep_top is not None:
        _write_decisions(ctx, cuts)
    return summary


def _by_source(table: pa.Table):
    sources = np.asarray(table.column("source").to_pylist(), dtype=object)
    score = table.column(SCORE).to_numpy()
    tie = table.column(TIE).to_numpy()
    for source in sorted(set(sources.tolist())):
        mask = sources == source
        yield source, score[mask], tie[mask]


def _write_decisions(ctx: BarrierContext, cuts: dict[str, tuple[float, int, int]]) -> None:
    """``<task>.parquet`` with the ``_ord`` of each row below its source's cut key."""
    ctx.decision_dir.mkdir(parents=True, exist_ok=True)
    for task in sorted(ctx.parts):
        table = _read(ctx.parts[task])
        if table is None:
            continue
        sources = np.asarray(table.column("source").to_pylist(), dtype=object)
        score = table.column(SCORE).to_numpy()
        tie = table.column(TIE).to_numpy()
        cut_score = np.array([cuts[s][0] for s in sources], np.float64)
        cut_tie = np.array([cuts[s][1] for s in sources], np.uint64)
        none_kept = np.array([cuts[s][2] == 0 for s in sources], bool)
        below = (score < cut_score) | ((score == cut_score) & (tie < cut_tie)) | none_kept
        if not below.any():
            continue
        ords = table.column(ORD).to_numpy()[below].astype(np.int64)
        target = ctx.decision_dir / f"{task}.parquet"
        tmp = target.with_name(f".{target.name}.tmp")
        pq.write_table(pa.table({ORD: ords}), tmp)
        os.replace(tmp, target)  # a reader never sees a half-written decision
