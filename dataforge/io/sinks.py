"""Output sinks: one committed part per task, merged into one dataset at the end.

MDS parts are written in mosaicml-streaming's format (``dataforge.io.mds``, byte-identical to
``MDSWriter``, which is used directly for other compressions) into a private temporary
directory; :func:`merge_mds_indexes` writes the root ``index.json`` only after every part
is committed, so a reader never sees a half dataset that looks complete.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from dataforge.io.jsonl_fast import json_lines
from dataforge.io.mds import MDSShardWriter, supports

__all__ = [
    "BASE_MDS_ENCODINGS",
    "mds_columns",
    "merge_mds_indexes",
    "output_table",
    "json_bytes",
    "write_json_atomic",
    "PartWriter",
]

BASE_MDS_ENCODINGS = {"id": "str", "text": "str", "source": "str", "lang": "str", "meta": "json"}


def json_bytes(obj: Any) -> bytes:
    """``obj`` as indented UTF-8 JSON, non-ASCII text kept readable.

    A file name that is not UTF-8 is a ``str`` with Python's surrogate escapes
    (``os.fsdecode``); each byte it could not decode is written as the JSON escape
    ``\\udc80``-``\\udcff``, which ``json.loads`` reads back to the same ``str`` (and
    ``os.fsencode`` to the original bytes), so the file stays valid UTF-8 JSON.
    """
    text = json.dumps(obj, ensure_ascii=False, indent=2, sort_keys=True)
    return text.encode("utf-8", "backslashreplace")


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write JSON (:func:`json_bytes`) via a temp file and rename, so readers see old or
    new, never half; the temp file is removed whatever fails."""
    data = json_bytes(obj)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _json_line(row: dict[str, Any]) -> str:
    if isinstance(row.get("meta"), str):
        row["meta"] = json.loads(row["meta"])
    return json.dumps(row, ensure_ascii=False) + "\n"


def output_table(table: pa.Table) -> pa.Table:
    """Drop runtime-internal columns (``_*`` and ``drop``) before writing."""
    keep = [c for c in table.column_names if not c.startswith("_") and c != "drop"]
    return table.select(keep)


def mds_columns(table: pa.Table, declared: dict[str, str]) -> dict[str, str]:
    """MDS column encodings for an output table: base columns, op-declared columns, and
    a safe default for anything else (never ``pkl``)."""
    columns = {}
    for field in table.schema:
        name = field.name
        if name in BASE_MDS_ENCODINGS:
            columns[name] = BASE_MDS_ENCODINGS[name]
        elif name in declared:
            columns[name] = declared[name]
        elif pa.types.is_integer(field.type):
            columns[name] = "int64"
        elif pa.types.is_floating(field.type):
            columns[name] = "float64"
        elif pa.types.is_string(field.type):
            columns[name] = "str"
        else:
            columns[name] = "json"
        if columns[name] == "pkl":
            raise ValueError(f"column {name!r}: pkl encoding is never written (unsafe to read)")
    return columns


def _column_values(column: pa.ChunkedArray, encoding: str) -> list[Any]:
    if encoding.startswith("ndarray"):
        dtype = np.dtype(encoding.split(":")[1]) if ":" in encoding else np.int32
        arr = column.combine_chunks()
        flat = pc.list_flatten(arr).to_numpy(zero_copy_only=False).astype(dtype, copy=False)
        offsets = arr.offsets.to_numpy()
        offsets = offsets - offsets[0]
        return [flat[offsets[i] : offsets[i + 1]] for i in range(len(arr))]
    values = column.to_pylist()
    if encoding == "json":
        return [json.loads(v) if isinstance(v, str) else v for v in values]
    return values


class PartWriter:
    """Streams the kept rows of one task into ``out_dir``: an MDS directory, or
    ``data.parquet`` / ``data.jsonl``. Open lazily (a task may keep nothing)."""

    def __init__(
        self,
        out_dir: Path,
        fmt: str,
        declared: dict[str, str],
        *,
        compression: str | None,
        size_limit: int,
        hashes: tuple[str, ...],
    ) -> None:
        if fmt not in ("mds", "parquet", "jsonl"):
            raise ValueError(f"unknown output format {fmt!r}; valid: mds, parquet, jsonl")
        self.out_dir, self.fmt, self.declared = out_dir, fmt, declared
        self.compression, self.size_limit, self.hashes = compression, size_limit, hashes
        self._writer: Any = None
        self._columns: dict[str, str] = {}
        self.rows = 0

    def _open(self, table: pa.Table) -> None:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        if self.fmt == "parquet":
            self._writer = pq.ParquetWriter(
                self.out_dir / "data.parquet", table.schema, compression=self.compression or "none"
            )
        elif self.fmt == "jsonl":
            self._writer = open(self.out_dir / "data.jsonl", "wb")  # noqa: SIM115
        else:
            self._columns = mds_columns(table, self.declared)
            hashes = sorted(self.hashes)
            if supports(self._columns, self.compression):
                self._writer = MDSShardWriter(self.out_dir, self._columns, hashes=hashes,
                                              compression=self.compression,
                                              size_limit=self.size_limit)  # fmt: skip
                return
            from streaming import MDSWriter

            self._writer = MDSWriter(out=str(self.out_dir), columns=self._columns, hashes=hashes,
                                     compression=self.compression, size_limit=self.size_limit,
                                     exist_ok=False)  # fmt: skip

    def write(self, table: pa.Table) -> None:
        table = output_table(table)
        if table.num_rows == 0:
            return
        if self._writer is None:
            self._open(table)
        if self.fmt == "parquet":
            self._writer.write_table(table.cast(self._writer.schema))
        elif self.fmt == "jsonl":
            lines = json_lines(table)
            if lines is None:
                lines = "".join(_json_line(row) for row in table.to_pylist()).encode("utf-8")
            self._writer.write(lines)
        else:
            values = {
                name: _column_values(table.column(name), enc) for name, enc in self._columns.items()
            }
            for i in range(table.num_rows):
                self._writer.write({name: values[name][i] for name in self._columns})
        self.rows += table.num_rows

    def close(self) -> int:
        """Finish the part (MDS: flush the last shard and write its index.json)."""
        if self._writer is not None:
            if self.fmt == "mds":
                self._writer.finish()
            else:
                self._writer.close()
        return self.rows


def merge_mds_indexes(store: Any, root: str, part_dirs: list[str]) -> dict[str, Any]:
    """Write ``root/index.json`` listing the shards of every part in the given order
    (basenames made relative to ``root``). Returns the merged index.

    Args:
        store: the run directory (a :class:`dataforge.rundir.store.RunStore`).
        root: the dataset directory, relative to the store (``mds`` or ``mds/<source>``).
        part_dirs: part directories under ``root``, relative to the store.
    """
    shards = []
    for part in part_dirs:
        index = store.read_json(f"{part}/index.json")
        if index is None:
            continue  # a task with no kept records writes no shard
        rel = part[len(root) :].lstrip("/")
        for shard in index["shards"]:
            shard = dict(shard)
            for key in ("raw_data", "zip_data"):
                if shard.get(key):
                    shard[key] = {**shard[key], "basename": f"{rel}/{shard[key]['basename']}"}
            shards.append(shard)
    merged = {"version": 2, "shards": shards}
    store.write_json(f"{root}/index.json", merged)
    return merged
