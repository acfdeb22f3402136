"""Streaming readers: one input file (a task) -> Arrow batches in the record schema.

Every physical record becomes exactly one row: a record that cannot be used (malformed
JSON, missing or non-string text, over ``max_doc_chars``, invalid UTF-8 under
``invalid_utf8: drop``) is emitted with its drop reason so that the runtime counts it.
Lines are read with a bounded ``readline`` so a 100 MB line never sits in memory whole.
UTF-8 JSON lines go through :mod:`dataforge.io.jsonl_fast` (blocks parsed in C++ outside
the GIL) where it is built; it hands every line this module's per-line code would treat
specially back to that code, so both give the same rows.

Text formats (jsonl, txt) are decoded by :mod:`dataforge.io.decoding` before lines are
split: the source's ``encoding`` (``utf-8`` by default, ``auto``, or a codec name) decides
per file, a byte-order mark is stripped (event ``bom_stripped``), and every record of a
file decoded from another codec counts an event ``transcoded:<codec>``. A file that
decodes under no candidate is dropped record by record (``invalid_encoding``). A record
whose bytes the reader had to repair and whose text is then mostly U+FFFD (more than
``decoding.MOJIBAKE_SHARE`` of its non-space characters: what a file read in the wrong
codec looks like) is dropped as
``invalid_utf8`` whatever ``read.invalid_utf8`` says; :meth:`TaskReader.decoding_report`
tells the driver how many records of the file needed repair, so that a file read in the
wrong codec is reported by name.
"""

from __future__ import annotations

import gzip
import io
import json
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any, BinaryIO, TextIO

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import zstandard

from dataforge.io import jsonl_fast
from dataforge.io.decoding import Decision, file_report, mostly_replacement, open_decoded
from dataforge.io.fs import open_input_file
from dataforge.io.input_config import InputConfig, ReadConfig
from dataforge.io.streams import open_binary
from dataforge.io.tasks import InputTask, open_task, plan_input_tasks
from dataforge.io.web_readers import WEB_FORMATS, web_rows
from dataforge.records import BASE_SCHEMA
from dataforge.text.surrogates import has_surrogates, replace_lone_surrogates

__all__ = ["InputTask", "ReadError", "TaskReader", "plan_input_tasks"]

# The decoding layer maps each undecodable byte to U+DC00..U+DCFF: finding one means the
# line held bytes its codec cannot decode.
_ESCAPED_BYTES = re.compile("[\udc00-\udcff]+")

# The line cap only keeps a monster line out of memory; ``max_doc_chars`` is checked on the
# decoded text. A JSON line can spell each character as "\uXXXX" (6 characters, 12 for a
# character outside the BMP), plus the other keys of the record.
_JSON_ESCAPE_WORST = 12
_JSON_LINE_OVERHEAD = 1 << 16


class ReadError(RuntimeError):
    """An input file that cannot be read to the end (truncated or corrupt stream)."""


class TaskReader:
    """Reads one task in batches of ``read.batch_rows`` rows.

    Attributes:
        events: counters of repairs that did not drop a record (``invalid_utf8_replaced``).
    """

    def __init__(self, task: InputTask, source: InputConfig, read: ReadConfig) -> None:
        self.task = task
        self.source = source
        self.read = read
        self.events: Counter[str] = Counter()
        self.decision: Decision | None = None
        self._repaired_records = 0
        self._repaired = False
        self._seen_ids: set[str] = set(task.known_ids)
        self._ord_counter = -1
        self._transcoded_event: str | None = None  # per file, set with the decision

    def accepted_ids(self) -> set[str]:
        """Ids of the records read so far that were not dropped while reading."""
        return self._seen_ids.difference(self.task.known_ids)

    def decoding_report(self) -> dict[str, Any] | None:
        """How this task's file was decoded (None for parquet); see :func:`file_report`."""
        if self.decision is None:
            return None
        return file_report(self.decision, self._ord_counter + 1, self._repaired_records)

    def batches(self) -> Iterator[pa.Table]:
        try:
            if self.source.format == "jsonl":
                yield from self._jsonl_batches()
            elif self.source.format in WEB_FORMATS:
                yield from self._row_batches(web_rows(self))
            else:
                yield from self._row_batches(self._rows())
        except (zstandard.ZstdError, EOFError, gzip.BadGzipFile, OSError) as exc:
            raise ReadError(
                f"{self.task.path}: corrupt or truncated input ({type(exc).__name__}: {exc})"
            ) from exc

    def _row_batches(self, rows: Iterable[dict[str, Any]]) -> Iterator[pa.Table]:
        batch: list[dict[str, Any]] = []
        for row in rows:
            batch.append(row)
            if len(batch) >= self.read.batch_rows:
                yield pa.Table.from_pylist(batch, schema=BASE_SCHEMA)
                batch = []
        if batch:
            yield pa.Table.from_pylist(batch, schema=BASE_SCHEMA)

    def _jsonl_batches(self) -> Iterator[pa.Table]:
        """UTF-8 files through :mod:`dataforge.io.jsonl_fast` where it is built, the others
        (and sources whose ``meta_keys`` name the text or id key) line by line."""
        with open_task(self.task) as raw:
            text = self._open_text(raw)
            source = self.source
            meta_keys = tuple(sorted(set(source.meta_keys)))
            fast = (
                jsonl_fast.available()
                and self.decision.encoding == "utf-8"
                and not self.decision.undecodable
                and not {source.text_key, source.id_key}.intersection(meta_keys)
            )
            if not fast:
                lines = self.lines_of(text, self.task.first_record)
                yield from self._row_batches(self._row_from_line(*line) for line in lines)
                return
            keys = jsonl_fast.ScanKeys(
                text_key=source.text_key.encode(),
                id_key=source.id_key.encode() if source.id_key is not None else None,
                meta_keys=tuple(key.encode() for key in meta_keys),
                key_prefix=f"{source.name}/".encode(),
                line_prefix=f"{source.name}/{self.task.relpath}:".encode(),
                limit=self._line_limit(),
                max_doc_chars=self.read.max_doc_chars,
            )
            yield from jsonl_fast.jsonl_batches(
                text.buffer,
                self.task.first_record,
                keys,
                (source.name, source.lang),
                self.read.batch_rows,
                self,
            )

    # -- what the fast path shares (jsonl_fast.LineRows) ---------------------------------
    def rows_from_lines(self, lines: list[tuple[int, str, bool]]) -> list[dict[str, Any]]:
        return [self._row_from_line(*line) for line in lines]

    def duplicate_ids(self, ids: list[str]) -> list[bool]:
        seen = self._seen_ids
        batch = set(ids)
        if len(batch) == len(ids) and seen.isdisjoint(batch):  # almost always: set ops only
            seen |= batch
            return [False] * len(ids)
        repeated = []
        for record_id in ids:
            repeated.append(record_id in seen)
            seen.add(record_id)
        return repeated

    def next_ords(self, n: int) -> np.ndarray:
        first = self._ord_counter + 1
        self._ord_counter += n
        return np.arange(first, first + n, dtype=np.int64)

    # -- one row per physical record ---------------------------------------------------
    def _rows(self) -> Iterator[dict[str, Any]]:
        fmt = self.source.format
        if fmt == "parquet":
            yield from self._parquet_rows()
        elif fmt == "txt" and self.source.txt_unit == "file":
            yield from self._txt_file_row()
        elif fmt == "txt" and self.source.txt_unit == "paragraph":
            yield from self._txt_paragraph_rows()
        else:
            for lineno, line, too_long in self._lines():
                yield self._row_from_line(lineno, line, too_long)

    def _open_text(self, raw: BinaryIO) -> io.TextIOBase:
        text, self.decision = open_decoded(raw, self.source.encoding)
        transcoded = self.decision.transcoded
        self._transcoded_event = f"transcoded:{self.decision.encoding}" if transcoded else None
        if self.decision.bom:
            self.events["bom_stripped"] += 1
        return text

    def _line_limit(self) -> int:
        if self.source.format == "jsonl":
            return self.read.max_doc_chars * _JSON_ESCAPE_WORST + _JSON_LINE_OVERHEAD
        return self.read.max_doc_chars + 2

    def _lines(self) -> Iterator[tuple[int, str, bool]]:
        with open_task(self.task) as raw:
            yield from self.lines_of(self._open_text(raw), self.task.first_record)

    def lines_of(self, text: TextIO, lineno: int) -> Iterator[tuple[int, str, bool]]:
        """(line number, line without its end, too long) of ``text``, numbered after
        ``lineno``; a line of the limit's characters or more is read in pieces, dropped."""
        limit = self._line_limit()
        while True:
            line = text.readline(limit)
            if not line:
                return
            lineno += 1
            too_long = not line.endswith("\n") and len(line) >= limit
            if too_long:
                while True:  # discard the rest of the line chunk by chunk
                    rest = text.readline(limit)
                    if not rest or rest.endswith("\n"):
                        break
                line = ""
            yield lineno, line.rstrip("\n"), too_long

    def _base_row(self, line_id: str, text: str = "", drop: str | None = None) -> dict[str, Any]:
        return {
            "id": f"{self.source.name}/{self.task.relpath}:{line_id}",
            "text": text,
            "source": self.source.name,
            "lang": self.source.lang,
            "meta": "{}",
            "drop": drop,
            "_ord": 0,
        }

    def _finish(self, row: dict[str, Any]) -> dict[str, Any]:
        row["_ord"] = self._next_ord()
        self._repaired = False
        decision = self.decision
        if decision is not None and decision.undecodable:
            row["drop"], row["text"] = "invalid_encoding", ""
        elif self._transcoded_event is not None:
            self.events[self._transcoded_event] += 1
        if decision is not None and decision.suspect_reason is not None:
            self.events[f"suspect:{decision.suspect_reason}"] += 1
        if row["drop"] is None:
            if row["id"] in self._seen_ids:
                row["drop"] = "duplicate_id"
            else:
                self._seen_ids.add(row["id"])
        return row

    def _next_ord(self) -> int:
        self._ord_counter += 1
        return self._ord_counter

    def _fix_utf8(self, text: str) -> tuple[str, str | None]:
        # Undecodable bytes are escaped as surrogates: a line without any (almost every
        # line) is told by one C pass, without the regex.
        if not has_surrogates(text) or not _ESCAPED_BYTES.search(text):
            return text, None
        self._repaired_records += 1
        self._repaired = True  # until _finish: U+FFFD in this record came from its bytes
        if self.read.invalid_utf8 == "drop":
            return "", "invalid_utf8"
        self.events["invalid_utf8_replaced"] += 1
        return _ESCAPED_BYTES.sub("\ufffd", text), None

    def _row_from_line(self, lineno: int, line: str, too_long: bool) -> dict[str, Any]:
        row = self._base_row(str(lineno))
        if too_long:
            row["drop"] = "too_long"
            return self._finish(row)
        line, bad = self._fix_utf8(line)
        if bad:
            row["drop"] = bad
            return self._finish(row)
        if self.source.format == "txt":
            return self._finish(self._with_text(row, line))
        if not line.strip():
            row["drop"] = "error:json_blank_line"
            return self._finish(row)
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError):
            # JSONDecodeError, an integer past Python's 4,300 digits, nesting past the
            # recursion limit: none of them may stop the file.
            row["drop"] = "error:json"
            return self._finish(row)
        if not isinstance(obj, dict):
            row["drop"] = "error:json_not_object"
            return self._finish(row)
        return self._finish(self._from_object(row, obj))

    def _from_object(self, row: dict[str, Any], obj: dict[str, Any]) -> dict[str, Any]:
        key = self.source.id_key
        if key is not None:
            value = obj.get(key)
            if value is None or isinstance(value, (dict, list)) or value == "":
                row["drop"] = "error:missing_id"
                return row
            row["id"] = replace_lone_surrogates(f"{self.source.name}/{value}")
        if self.source.meta_keys:
            meta = {k: obj[k] for k in self.source.meta_keys if k in obj}
            row["meta"] = replace_lone_surrogates(
                json.dumps(meta, ensure_ascii=False, sort_keys=True)
            )
        if self.source.text_key not in obj:
            row["drop"] = "error:missing_text"
            return row
        text = obj[self.source.text_key]
        if not isinstance(text, str):
            row["drop"] = "error:text_type"
            return row
        fixed = replace_lone_surrogates(text)
        if fixed is not text:
            # JSON "\ud800" escapes decode to lone surrogates, which Arrow cannot hold;
            # clean applies its invalid_utf8 policy to the U+FFFD put in their place.
            self.events["lone_surrogates_replaced"] += 1
        return self._with_text(row, fixed)

    def _with_text(self, row: dict[str, Any], text: str) -> dict[str, Any]:
        if len(text) > self.read.max_doc_chars:
            row["drop"] = "too_long"
        elif not text.strip():
            row["drop"] = "empty"
        elif self._repaired and mostly_replacement(text):
            row["drop"] = "invalid_utf8"
        else:
            row["text"] = text
        return row

    def _txt_file_row(self) -> Iterator[dict[str, Any]]:
        with open_binary(self.task.path) as raw:
            data = self._open_text(raw).read(self.read.max_doc_chars + 1)
        row = self._base_row("0")
        if len(data) > self.read.max_doc_chars:
            row["drop"] = "too_long"
            yield self._finish(row)
            return
        text, bad = self._fix_utf8(data)
        if bad:
            row["drop"] = bad
            yield self._finish(row)
            return
        yield self._finish(self._with_text(row, text))

    def _txt_paragraph_rows(self) -> Iterator[dict[str, Any]]:
        para: list[str] = []
        start = 0
        for lineno, line, too_long in self._lines():
            if too_long:
                if para:
                    yield self._row_from_line(start, "\n".join(para), False)
                    para = []
                yield self._row_from_line(lineno, "", True)
            elif line.strip():
                if not para:
                    start = lineno
                para.append(line)
            elif para:
                yield self._row_from_line(start, "\n".join(para), False)
                para = []
        if para:
            yield self._row_from_line(start, "\n".join(para), False)

    def _parquet_rows(self) -> Iterator[dict[str, Any]]:
        pf = pq.ParquetFile(open_input_file(self.task.path))
        names = set(pf.schema_arrow.names)
        wanted = [self.source.text_key]
        if self.source.id_key:
            wanted.append(self.source.id_key)
        wanted += [k for k in self.source.meta_keys if k in names]
        missing = [k for k in wanted if k not in names]
        if missing:
            raise ReadError(
                f"{self.task.path}: parquet file has no column(s) {missing}; columns: {sorted(names)}"
            )
        index = self.task.first_record
        batches = pf.iter_batches(
            batch_size=self.read.batch_rows,
            columns=sorted(set(wanted)),
            row_groups=self.task.row_groups,
        )
        for batch in batches:
            for obj in batch.to_pylist():
                row = self._base_row(str(index))
                index += 1
                if isinstance(obj.get(self.source.text_key), str):
                    text, bad = self._fix_utf8(obj[self.source.text_key])
                    obj[self.source.text_key] = text
                    if bad:
                        row["drop"] = bad
                        yield self._finish(row)
                        continue
                yield self._finish(self._from_object(row, obj))
