"""Reading LM training/reference text through the pipeline's own readers.

Documents are split into train and held-out sets by a hash of their id, so the split does
not depend on file order, sharding or how many documents there are.
"""

from __future__ import annotations

import glob
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from dataforge.config import InputConfig, ReadConfig
from dataforge.io.readers import InputTask, TaskReader

__all__ = ["corpus_files", "id_hash_percent", "read_documents"]

_HASH_SEED = 0x6C6D  # "lm": fixed, so that splits are the same on every machine


def corpus_files(pattern: str) -> list[str]:
    """Files matching ``pattern`` (recursive glob), sorted.

    Raises:
        FileNotFoundError: nothing matches.
    """
    files = sorted(p for p in glob.glob(pattern, recursive=True) if Path(p).is_file())
    if not files:
        raise FileNotFoundError(f"input {pattern!r} matches no file")
    return files


def _input_format(path: str) -> str:
    if path.endswith(".parquet"):
        return "parquet"
    if path.endswith(".txt"):
        return "txt"
    return "jsonl"


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

    Formats follow the suffix (``.parquet``, ``.txt`` one document per line, else JSON
    lines, also ``.gz``/``.zst``). Records the reader would drop (malformed, missing
    text or id) are skipped. Ids are ``lm/<id>`` (or ``lm/<file>:<line>`` without
    ``id_key``), so the held-out split is a function of the input's own ids.
    """
    read = ReadConfig(batch_rows=batch_rows)
    for path in corpus_files(pattern):
        fmt = _input_format(path)
        source = InputConfig(
            name="lm",
            path=path,
            format=fmt,
            text_key=text_key,
            id_key=id_key if fmt != "txt" else None,
        )
        task = InputTask(
            task_id="lm",
            source="lm",
            path=path,
            relpath=Path(path).name,
            bytes=Path(path).stat().st_size,
        )
        for batch in TaskReader(task, source, read).batches():
            usable = batch.filter(pc.is_null(batch.column("drop")))
            if usable.num_rows:
                yield usable.select(["id", "text"])
