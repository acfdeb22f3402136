"""Streaming readers: one input file (a task) -> Arrow batches in the record schema.

Every physical record becomes exactly one row: a record that cannot be used (malformed
JSON, missing or non-string text, over ``max_doc_chars``, invalid UTF-8 under
``invalid_utf8: drop``) is emitted with its drop reason so that the runtime counts it.
Lines are read with a bounded ``readline`` so a 100 MB line never sits in memory whole.

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
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, BinaryIO

import pyarrow as pa
import pyarrow.parquet as pq
import zstandard

from dataforge.io.decoding import Decision, file_report, mostly_replacement, open_decoded
from dataforge.io.files import match_files
from dataforge.io.fs import open_input_file
from dataforge.io.input_config import InputConfig, ReadConfig
from dataforge.io.streams import open_binary, open_byte_range
from dataforge.records import BASE_SCHEMA
from dataforge.typed_config import ConfigError

if TYPE_CHECKING:  # the pipeline config sits above io; only its type is used here
    from dataforge.config import PipelineConfig
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


@dataclass(frozen=True)
class InputTask:
    """One input file of one source, or one split of it; the unit of work, commit and
    resume. A split (:mod:`dataforge.io.splits`) numbers its records from ``first_record``
    so that ids are those of the whole file."""

    task_id: str
    source: str
    path: str
    relpath: str
    bytes: int
    """Size of the whole file."""
    mtime_ns: int = 0
    """Modification time at planning; with the real path and size, what a resume checks."""
    offset: int = 0
    """Line files: byte offset of the split's first line."""
    length: int | None = None
    """Line files: bytes in the split (None: to the end of the file)."""
    first_record: int = 0
    """Lines (or parquet rows) of the file before the split."""
    row_groups: tuple[int, ...] | None = None
    """Parquet: the split's row groups (None: all)."""
    known_ids: tuple[str, ...] = ()
    """Ids that an earlier split of the file holds: records with them are ``duplicate_id``."""


def plan_input_tasks(config: PipelineConfig) -> list[InputTask]:
    """Expand every source's path/glob (local or a URI) into sorted tasks
    (:func:`~dataforge.io.files.match_files`).

    Raises:
        ConfigError: a source's path matches no file, or two sources match the same file.
        StorageError: a URI's storage cannot be reached.
    """
    tasks = []
    owner: dict[str, str] = {}
    for s_idx, source in enumerate(config.inputs):
        try:
            files = match_files(config.locate(source.path))
        except FileNotFoundError:
            raise ConfigError(
                f"inputs[{s_idx}] ({source.name}): path {source.path!r} matches no file"
            ) from None
        for f_idx, file in enumerate(files):
            if file.path in owner:
                raise ConfigError(
                    f"inputs[{s_idx}] ({source.name}): file {file.path} is also read by source "
                    f"{owner[file.path]!r}; a file may belong to one source only"
                )
            owner[file.path] = source.name
            tasks.append(
                InputTask(
                    task_id=f"{s_idx:03d}-{f_idx:06d}",
                    source=source.name,
                    path=file.path,
                    relpath=file.relpath,
                    bytes=file.bytes,
                    mtime_ns=file.mtime_ns,
                )
            )
    return tasks


def _open_task(task: InputTask) -> BinaryIO:
    if task.length is None:
        return open_binary(task.path)
    return open_byte_range(task.path, task.offset, task.length)


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
        rows: list[dict[str, Any]] = []
        try:
            for row in self._rows():
                rows.append(row)
                if len(rows) >= self.read.batch_rows:
                    yield pa.Table.from_pylist(rows, schema=BASE_SCHEMA)
                    rows = []
        except (zstandard.ZstdError, EOFError, gzip.BadGzipFile, OSError) as exc:
            raise ReadError(
                f"{self.task.path}: corrupt or truncated input ({type(exc).__name__}: {exc})"
            ) from exc
        if rows:
            yield pa.Table.from_pylist(rows, schema=BASE_SCHEMA)

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

    def _lines(self) -> Iterator[tuple[int, str, bool]]:
        if self.source.format == "jsonl":
            limit = self.read.max_doc_chars * _JSON_ESCAPE_WORST + _JSON_LINE_OVERHEAD
        else:
            limit = self.read.max_doc_chars + 2
        with _open_task(self.task) as raw:
            text = self._open_text(raw)
            lineno = self.task.first_record
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
        except json.JSONDecodeError:
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
