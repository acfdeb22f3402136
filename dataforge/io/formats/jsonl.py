"""``format: jsonl``: a JSON object per line (``.jsonl``, ``.json``, optionally ``.gz`` or
``.zst``). UTF-8 files go through :mod:`dataforge.io.jsonl_fast` (blocks parsed in C++
outside the GIL) where it is built; it hands every line this module's per-line code would
treat specially back to that code, so both give the same rows."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from dataforge.io import jsonl_fast
from dataforge.io.formats.base import ReadLimits, RowReader, Source
from dataforge.io.formats.lines import LineFormat
from dataforge.io.tasks import open_task

__all__ = ["JsonlFormat"]

# The line cap only keeps a monster line out of memory; ``max_doc_chars`` is checked on the
# decoded text. A JSON line can spell each character as "\uXXXX" (6 characters, 12 for a
# character outside the BMP), plus the other keys of the record.
_JSON_ESCAPE_WORST = 12
_JSON_LINE_OVERHEAD = 1 << 16


class JsonlFormat(LineFormat):
    name = "jsonl"
    suffixes = (".jsonl", ".jsonl.gz", ".jsonl.zst", ".jsonl.zstd", ".json")

    def line_limit(self, read: ReadLimits) -> int:
        return read.max_doc_chars * _JSON_ESCAPE_WORST + _JSON_LINE_OVERHEAD

    def line_row(self, reader: RowReader, row: dict[str, Any], line: str) -> dict[str, Any]:
        if not line.strip():
            row["drop"] = "error:json_blank_line"
            return row
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError):
            # JSONDecodeError, an integer past Python's 4,300 digits, nesting past the
            # recursion limit: none of them may stop the file.
            row["drop"] = "error:json"
            return row
        if not isinstance(obj, dict):
            row["drop"] = "error:json_not_object"
            return row
        return reader.object_row(row, obj)

    def batches(self, reader: RowReader) -> Iterator[pa.Table]:
        """UTF-8 files through :mod:`dataforge.io.jsonl_fast` where it is built, the others
        (and sources whose ``meta_keys`` name the text or id key) line by line."""
        with open_task(reader.task) as raw:
            text = reader.open_text(raw)
            if not _fast(reader.source, reader):
                lines = reader.lines_of(text, reader.task.first_record)
                yield from reader.row_batches(reader.line_row(*line) for line in lines)
                return
            yield from jsonl_fast.jsonl_batches(
                text.buffer,
                reader.task.first_record,
                _scan_keys(reader),
                (reader.source.name, reader.source.lang),
                reader.read.batch_rows,
                reader,
            )


def _fast(source: Source, reader: RowReader) -> bool:
    meta_keys = set(source.meta_keys)
    return (
        jsonl_fast.available()
        and reader.decision.encoding == "utf-8"
        and not reader.decision.undecodable
        and not {source.text_key, source.id_key}.intersection(meta_keys)
    )


def _scan_keys(reader: RowReader) -> jsonl_fast.ScanKeys:
    source = reader.source
    return jsonl_fast.ScanKeys(
        text_key=source.text_key.encode(),
        id_key=source.id_key.encode() if source.id_key is not None else None,
        meta_keys=tuple(key.encode() for key in sorted(set(source.meta_keys))),
        key_prefix=f"{source.name}/".encode(),
        line_prefix=f"{source.name}/{reader.task.relpath}:".encode(),
        limit=reader.line_limit(),
        max_doc_chars=reader.read.max_doc_chars,
    )
