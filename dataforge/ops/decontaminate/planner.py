"""Planner of the ``decontaminate`` barrier: the audit file and the per-set counts.

The matches were found per document by ``Decontaminate.prepare`` (column ``_decontam``);
this reads them from every part, in task order, writes ``matches.jsonl`` (one line per
matched span: id, source, eval_set, item, span) into the audit directory, and returns per
evaluation set its items, n-grams and matched documents. Nothing is decided here: ``apply``
drops or cuts each document by its own matches. Ray is not needed.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq

from dataforge.ops.barrier import BarrierContext
from dataforge.ops.decontaminate import MATCHES, Decontaminate

__all__ = ["plan"]


def plan(op: Decontaminate, ctx: BarrierContext) -> dict[str, Any]:
    """Write ``matches.jsonl`` and return the summary."""
    stats = {label: {**s, "matched_docs": 0} for label, s in op.set_stats.items()}
    matched_docs = 0
    ctx.audit_dir.mkdir(parents=True, exist_ok=True)
    target = ctx.audit_dir / "matches.jsonl"
    tmp = target.with_name(f".{target.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as out:
        for task in sorted(ctx.parts):
            file = pq.ParquetFile(ctx.parts[task])
            if file.metadata.num_rows == 0 or MATCHES not in file.schema_arrow.names:
                continue
            table = file.read(columns=["id", "source", MATCHES])
            table = table.filter(pc.is_valid(table.column(MATCHES)))
            for doc_id, source, raw in zip(*(table.column(c).to_pylist() for c in table.column_names), strict=True):  # fmt: skip
                match = json.loads(raw)
                matched_docs += 1
                for label in match["sets"]:
                    stats[label]["matched_docs"] += 1
                for span in match["spans"]:
                    line = {"id": doc_id, "source": source, **span}
                    out.write(json.dumps(line, ensure_ascii=False) + "\n")
    os.replace(tmp, target)  # a reader never sees a half-written audit
    return {"mode": op.config.mode, "matched_docs": matched_docs, "eval_sets": stats}
