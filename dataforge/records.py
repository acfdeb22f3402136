"""The record schema every stage exchanges: an Arrow table per batch.

Columns (all batches):
    id      string   stable id: given by the input, else ``<source>/<relpath>:<line>``
    text    string   the document text
    source  string   the input source name from the pipeline YAML
    lang    string   the source's language code (``zh``, ``en``, ...)
    meta    string   JSON object (string so that Arrow schemas never diverge across batches)
    drop    string   null while the record is kept; the drop reason once an op drops it

Added by the tokenize op: ``tokens`` (list<int32> in Arrow; uint16/int32 ndarray in MDS)
and ``num_tokens`` (int64). Columns starting with ``_`` are runtime-internal
(``_ord``: the record's position in its input task) and never reach the output.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

__all__ = [
    "BASE_SCHEMA",
    "DROP",
    "ORD",
    "live_mask",
    "meta_dicts",
    "with_meta",
]

DROP = "drop"
ORD = "_ord"

BASE_SCHEMA = pa.schema(
    [
        pa.field("id", pa.string()),
        pa.field("text", pa.string()),
        pa.field("source", pa.string()),
        pa.field("lang", pa.string()),
        pa.field("meta", pa.string()),
        pa.field(DROP, pa.string()),
        pa.field(ORD, pa.int64()),
    ]
)


def live_mask(batch: pa.Table) -> pa.ChunkedArray:
    """Boolean mask of the records that no op has dropped yet."""
    return pc.is_null(batch.column(DROP))


def meta_dicts(batch: pa.Table) -> list[dict[str, Any]]:
    """Decode the ``meta`` column into dicts (one per row)."""
    return [json.loads(m) if m else {} for m in batch.column("meta").to_pylist()]


def with_meta(batch: pa.Table, key: str, values: list[Any]) -> pa.Table:
    """Return ``batch`` with ``meta[key] = value`` set row by row (``None`` leaves a row as is)."""
    metas = meta_dicts(batch)
    for meta, value in zip(metas, values, strict=True):
        if value is not None:
            meta[key] = value
    encoded = pa.array(
        [json.dumps(m, ensure_ascii=False, sort_keys=True) for m in metas], pa.string()
    )
    return batch.set_column(batch.schema.get_field_index("meta"), "meta", encoded)
