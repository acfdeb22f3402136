"""Reading LM training/reference text, and the id-hash train/held-out split.

Documents come from :func:`dataforge.io.documents.iter_documents` (the pipeline's own readers
and id rule). They are split into train and held-out sets by a hash of their id, so the
split does not depend on file order, sharding or how many documents there are.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import xxhash

from dataforge.io.documents import iter_documents

__all__ = ["id_hash_percent", "read_documents"]

_HASH_SEED = 0x6C6D  # "lm": fixed, so that splits are the same on every machine


def id_hash_percent(ids: list[str]) -> np.ndarray:
    """Per id, a stable number in [0, 100) (float64) from xxh64 of the id."""
    hashes = np.fromiter(
        (xxhash.xxh64_intdigest(i, seed=_HASH_SEED) for i in ids), np.uint64, count=len(ids)
    )
    return (hashes >> np.uint64(11)).astype(np.float64) / float(1 << 53) * 100.0


def read_documents(
    pattern: str,
    *,
    text_key: str = "text",
    id_key: str | None = "id",
    batch_rows: int = 1000,
) -> Iterator[pa.Table]:
    """Yield batches (columns ``id``, ``text``) of the usable documents under ``pattern``.

    Ids are ``lm/<id>`` (or ``lm/<relpath>:<line>`` without ``id_key``), so the held-out
    split is a function of the input's own ids.
    """
    return iter_documents(
        pattern, source="lm", text_key=text_key, id_key=id_key, batch_rows=batch_rows
    )
