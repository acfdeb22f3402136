"""Planner of the ``quality_classifier`` barrier: the top share of each source, run-wide.

With ``keep_top``, each source keeps its ``round(keep_top * n)`` documents with the highest
(score, id hash) keys, the hash keyed by the pipeline seed (``_qc_tie``), so equal scores are
cut by a property of the document, never by the task or batch it came in. The parts are read
twice: once for the keys of every live document (two 8-byte numbers each), once per task to
write the ``_ord`` of its dropped rows. Without ``keep_top`` nothing is written: ``apply``
judges each row by its own score. Rows of a language no model serves (score NaN) are
kept and left out of the ranking; the summary counts them per source and language
(``unscored``). Ray is not needed.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from dataforge.ops.quality_classifier import SCORE, TIE, QualityClassifier
from dataforge.records import ORD
from dataforge.runtime.barriers import BarrierContext

__all__ = ["plan"]

_COLUMNS = ["source", "lang", ORD, SCORE, TIE]


def _read(path) -> pa.Table | None:
    file = pq.ParquetFile(path)
    if file.metadata.num_rows == 0:
        return None
    return file.read(columns=_COLUMNS)


def plan(op: QualityClassifier, ctx: BarrierContext) -> dict[str, Any]:
    """Write per-task drop decisions for ``keep_top``; return per-source counts and cuts."""
    cfg = op.config
    keys: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
    unscored: dict[str, Counter] = {}
    for task in sorted(ctx.parts):
        table = _read(ctx.parts[task])
        if table is None:
            continue
        for source, score, tie, langs in _by_source(table):
            scored = ~np.isnan(score)
            keys.setdefault(source, []).append((score[scored], tie[scored]))
            if not scored.all():
                unscored.setdefault(source, Counter()).update(langs[~scored].tolist())
    cuts: dict[str, tuple[float, int, int]] = {}  # source -> (score, tie, kept docs)
    summary: dict[str, Any] = {"name": cfg.name, "keep_top": cfg.keep_top, "sources": {}}
    for source in sorted(keys):
        score = np.concatenate([s for s, _ in keys[source]])
        tie = np.concatenate([t for _, t in keys[source]])
        n = len(score)
        summary["sources"][source] = {
            "scored_docs": n,
            "mean_score": float(score.mean()) if n else None,
        }
        if source in unscored:
            summary["sources"][source]["unscored"] = dict(sorted(unscored[source].items()))
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
    langs = np.asarray(table.column("lang").to_pylist(), dtype=object)
    for source in sorted(set(sources.tolist())):
        mask = sources == source
        yield source, score[mask], tie[mask], langs[mask]


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
        # a source whose rows are all unscored has no cut: none of its rows is below one
        cut = [cuts.get(s, (-np.inf, 0, 1)) for s in sources]
        cut_score = np.array([c[0] for c in cut], np.float64)
        cut_tie = np.array([c[1] for c in cut], np.uint64)
        none_kept = np.array([c[2] == 0 for c in cut], bool)
        below = (score < cut_score) | ((score == cut_score) & (tie < cut_tie)) | none_kept
        below &= ~np.isnan(score)  # unscored rows are kept
        if not below.any():
            continue
        ords = table.column(ORD).to_numpy()[below].astype(np.int64)
        target = ctx.decision_dir / f"{task}.parquet"
        tmp = target.with_name(f".{target.name}.tmp")
        pq.write_table(pa.table({ORD: ords}), tmp)
        os.replace(tmp, target)  # a reader never sees a half-written decision
