"""The JSON-lines reader's fast path: blocks of lines parsed in C++ with the GIL released.

The per-line reader (:class:`dataforge.io.readers.TaskReader`) decodes every line to a
Python string, parses it with ``json.loads`` and builds a dict per record: all of it under
the GIL, so two threads of one process read no faster than one. Here a UTF-8 file is read
as bytes, in blocks cut after a line break, and ``dataforge.io._jsonl.scan`` (``make
jsonl-reader``) parses up to a batch of lines at a time outside the GIL, returning the ids
and texts as Arrow string buffers; Python only builds the batch's columns and checks the
records' ids against those already read.

Exactness: ``scan`` accepts only lines it reads exactly as ``json.loads`` does (see
``_jsonl.cpp``) and marks every other line (bad JSON, a missing or non-string text, invalid
UTF-8, a ``\\r``, a lone surrogate escape, ...); a block holding one is given back to the
reader's per-line code as decoded text, so every record gets the row, drop reason and
events it got before. A line longer than :data:`LONG_LINE_BYTES` switches the rest of the
file to the per-line reader, whose bounded ``readline`` keeps it out of memory.
"""

from __future__ import annotations

import io
import itertools
import json
from collections.abc import Iterator
from typing import Any, BinaryIO, NamedTuple, Protocol, TextIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dataforge.io.decoding import ESCAPE_ERRORS, PrefixedStream
from dataforge.records import BASE_SCHEMA

try:
    from dataforge.io import _jsonl
except ImportError:  # not built (make jsonl-reader): the reader parses line by line
    _jsonl = None

__all__ = [
    "BLOCK_BYTES",
    "LONG_LINE_BYTES",
    "LineRows",
    "ScanKeys",
    "available",
    "json_lines",
    "jsonl_batches",
]

BLOCK_BYTES = 1 << 20
"""Bytes read from the stream at a time."""
LONG_LINE_BYTES = 1 << 22
"""A line still without its end after this many bytes hands the file to the per-line reader."""

_RECORD, _TOO_LONG, _EMPTY, _PYTHON = 0, 1, 2, 3


def available() -> bool:
    """Whether the C++ parser is built."""
    return _jsonl is not None


class ScanKeys(NamedTuple):
    """What ``scan`` needs of the source, as UTF-8 bytes."""

    text_key: bytes
    id_key: bytes | None
    meta_keys: tuple[bytes, ...]
    """Sorted, distinct, neither the text nor the id key."""
    key_prefix: bytes
    """Before an id key's value: ``<source>/``."""
    line_prefix: bytes
    """Before a line number: ``<source>/<relpath>:``."""
    limit: int
    """Characters at which a line is too long (the per-line reader's ``readline`` bound)."""
    max_doc_chars: int


class LineRows(Protocol):
    """The reader's per-line code and its per-file state, which the fast path shares."""

    def rows_from_lines(self, lines: list[tuple[int, str, bool]]) -> list[dict[str, Any]]:
        """Rows of (line number, line, too long) lines, as the per-line reader makes them."""

    def lines_of(self, text: TextIO, lineno: int) -> Iterator[tuple[int, str, bool]]:
        """The per-line reader's lines of ``text``, numbered after ``lineno``."""

    def duplicate_ids(self, ids: list[str]) -> list[bool]:
        """Per id of a kept record, whether an earlier record had it (the others are noted)."""

    def next_ords(self, n: int) -> np.ndarray:
        """The next ``n`` record numbers of the file."""


def jsonl_batches(
    stream: BinaryIO,
    lineno: int,
    keys: ScanKeys,
    constants: tuple[str, str | None],
    batch_rows: int,
    rows: LineRows,
) -> Iterator[pa.Table]:
    """Tables of ``batch_rows`` rows (the last one shorter) of the UTF-8 JSON lines of
    ``stream``, whose first line is number ``lineno + 1``.

    Args:
        constants: every row's ``source`` and ``lang``.
    """
    batches = _Batches(batch_rows)
    pending = b""
    while True:
        chunk = stream.read(BLOCK_BYTES)
        data = pending + chunk if pending else chunk
        if not data:
            break
        cut = len(data) if not chunk else data.rfind(b"\n") + 1
        if cut == 0:
            pending = data
            if len(pending) > LONG_LINE_BYTES:  # bounded readline from here on
                text = io.TextIOWrapper(
                    io.BufferedReader(PrefixedStream(pending, stream)),
                    encoding="utf-8",
                    errors=ESCAPE_ERRORS,
                    newline=None,
                )
                yield from _line_by_line(rows, text, lineno, batches)
                break
            continue
        block, pending = memoryview(data)[:cut], data[cut:]
        pos = 0
        while pos < cut:
            scanned = _jsonl.scan(
                block,
                pos,
                batch_rows - batches.rows,
                keys.text_key,
                keys.id_key,
                keys.meta_keys,
                keys.key_prefix,
                keys.line_prefix,
                lineno,
                keys.limit,
                keys.max_doc_chars,
            )
            consumed, n, status = scanned[0], scanned[1], np.frombuffer(scanned[2], np.uint8)
            if (status == _PYTHON).any():
                lines = _decoded_lines(bytes(block[pos : pos + consumed]), lineno, keys.limit)
                table = _rows_table(rows.rows_from_lines(lines))
                lineno = lines[-1][0] if lines else lineno
            else:
                table = _scanned_table(status, scanned[3:], constants, rows)
                lineno += n
            pos += consumed
            yield from batches.add(table)
        if not chunk:
            break
    yield from batches.rest()


def _line_by_line(
    rows: LineRows, text: TextIO, lineno: int, batches: _Batches
) -> Iterator[pa.Table]:
    lines = rows.lines_of(text, lineno)
    while chunk := list(itertools.islice(lines, batches.size - batches.rows)):
        yield from batches.add(_rows_table(rows.rows_from_lines(chunk)))


def _decoded_lines(data: bytes, lineno: int, limit: int) -> list[tuple[int, str, bool]]:
    """Whole lines as the per-line reader's text stream gives them: decoded with its error
    handler, universal newlines (``\\r\\n`` and ``\\r`` end a line too), a line of ``limit``
    characters or more marked too long (and emptied)."""
    text = data.decode("utf-8", ESCAPE_ERRORS).replace("\r\n", "\n").replace("\r", "\n")
    parts = text.split("\n")
    if parts[-1] == "":
        parts.pop()
    return [
        (lineno + i, "" if len(part) >= limit else part, len(part) >= limit)
        for i, part in enumerate(parts, start=1)
    ]


def _scanned_table(
    status: np.ndarray,
    buffers: tuple[bytes, ...],
    constants: tuple[str, str | None],
    rows: LineRows,
) -> pa.Table:
    n = len(status)
    ids, texts, metas = (
        pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(data))
        for offsets, data in zip(buffers[0::2], buffers[1::2], strict=True)
    )
    drop = np.full(n, None, dtype=object)
    drop[status == _TOO_LONG] = "too_long"
    drop[status == _EMPTY] = "empty"
    records = np.flatnonzero(status == _RECORD)
    if len(records):
        repeated = np.asarray(rows.duplicate_ids(ids.take(records).to_pylist()), dtype=bool)
        drop[records[repeated]] = "duplicate_id"
    source, lang = constants
    return pa.Table.from_arrays(
        [
            ids,
            texts,
            pa.array([source] * n, pa.string()),
            pa.array([lang] * n, pa.string()),
            metas,
            pa.array(drop, pa.string()),
            pa.array(rows.next_ords(n), pa.int64()),
        ],
        schema=BASE_SCHEMA,
    )


def _rows_table(rows: list[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=BASE_SCHEMA)


class _Batches:
    """Pieces of rows in, tables of exactly ``size`` rows out (the last one shorter)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.rows = 0
        self._pieces: list[pa.Table] = []

    def add(self, table: pa.Table) -> Iterator[pa.Table]:
        if table.num_rows:
            self._pieces.append(table)
            self.rows += table.num_rows
        while self.rows >= self.size:
            whole = self._joined()
            yield whole.slice(0, self.size)
            rest = whole.slice(self.size)
            self._pieces, self.rows = ([rest] if rest.num_rows else []), rest.num_rows

    def rest(self) -> Iterator[pa.Table]:
        if self.rows:
            yield self._joined()

    def _joined(self) -> pa.Table:
        if len(self._pieces) == 1:
            return self._pieces[0]
        return pa.concat_tables(self._pieces).combine_chunks()


_NO_OFFSETS = np.zeros(1, np.int32).tobytes()


def json_lines(table: pa.Table) -> bytes | None:
    """The rows of ``table`` as ``json.dumps(row, ensure_ascii=False)`` lines, ``meta`` (a
    JSON string) as the value it holds, byte for byte what the output sink's per-row code
    writes; formatted in C++ outside the GIL. None when the parser is not built or a column
    is not a string (the caller writes those rows itself)."""
    if _jsonl is None:
        return None
    keys, columns = [], []
    for name in table.column_names:
        column = table.column(name).combine_chunks()
        if column.type != pa.string():
            return None
        if name == "meta":
            column = _meta_values(column)
        validity, offsets, data = column.buffers()
        keys.append(name.encode())
        columns.append(
            (validity, offsets or _NO_OFFSETS, data or b"", column.offset, name == "meta")
        )
    return _jsonl.dump(table.num_rows, keys, columns)


def _meta_values(meta: pa.Array) -> pa.Array:
    """``json.dumps(json.loads(m), ensure_ascii=False)`` per meta string: the reader's
    ``{}`` as it is, the few others through Python."""
    other = pc.fill_null(pc.not_equal(meta, "{}"), False)
    if not pc.any(other).as_py():
        return meta
    values = [json.dumps(json.loads(m), ensure_ascii=False) for m in meta.filter(other).to_pylist()]
    return pc.replace_with_mask(meta, other, pa.array(values, pa.string()))
