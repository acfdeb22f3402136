"""Streaming readers: one input file (a task) -> Arrow batches in the record schema.

The task's format (:mod:`dataforge.io.formats`, by ``inputs[].format``) turns its bytes
into rows through this module's public hook (``new_row``, ``line_row``, ``with_text``,
``finish_row``...); what the hook does is the same for every format: ids, drop reasons,
decoding and repairs, duplicate ids.

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
import json
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any, BinaryIO, TextIO

import numpy as np
import pyarrow as pa
import zstandard

from dataforge.io.decoding import Decision, file_report, mostly_replacement, open_decoded
from dataforge.io.formats.base import ReadError
from dataforge.io.formats.registry import input_format
from dataforge.io.input_config import InputConfig, ReadConfig
from dataforge.io.tasks import InputTask, open_task, plan_input_tasks
from dataforge.records import BASE_SCHEMA
from dataforge.text.surrogates import has_surrogates, replace_lone_surrogates

__all__ = ["InputTask", "ReadError", "TaskReader", "plan_input_tasks"]

# The decoding layer maps each undecodable byte to U+DC00..U+DCFF: finding one means the
# line held bytes its codec cannot decode.
_ESCAPED_BYTES = re.compile("[\udc00-\udcff]+")


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
        self.format = input_format(source.format)
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
        """How this task's file was decoded (None where its format decodes no text: parquet,
        the web formats); see :func:`file_report`."""
        if self.decision is None:
            return None
        return file_report(self.decision, self._ord_counter + 1, self._repaired_records)

    def batches(self) -> Iterator[pa.Table]:
        """The task's rows in batches of ``read.batch_rows`` (its format's reading).

        Raises:
            ReadError: the file is corrupt or truncated (its stream cannot be read on).
        """
        try:
            yield from self.format.batches(self)
        except (zstandard.ZstdError, EOFError, gzip.BadGzipFile, OSError) as exc:
            raise ReadError(
                f"{self.task.path}: corrupt or truncated input ({type(exc).__name__}: {exc})"
            ) from exc

    # -- the hook formats read through ---------------------------------------------------
    def row_batches(self, rows: Iterable[dict[str, Any]]) -> Iterator[pa.Table]:
        """``rows`` in tables of ``read.batch_rows`` rows."""
        batch: list[dict[str, Any]] = []
        for row in rows:
            batch.append(row)
            if len(batch) >= self.read.batch_rows:
                yield pa.Table.from_pylist(batch, schema=BASE_SCHEMA)
                batch = []
        if batch:
            yield pa.Table.from_pylist(batch, schema=BASE_SCHEMA)

    # -- what the fast path shares (jsonl_fast.LineRows) ---------------------------------
    def rows_from_lines(self, lines: list[tuple[int, str, bool]]) -> list[dict[str, Any]]:
        return [self.line_row(*line) for line in lines]

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
    def open_text(self, raw: BinaryIO) -> TextIO:
        """``raw`` decoded as the source's ``encoding`` decides for this file."""
        text, self.decision = open_decoded(raw, self.source.encoding)
        transcoded = self.decision.transcoded
        self._transcoded_event = f"transcoded:{self.decision.encoding}" if transcoded else None
        if self.decision.bom:
            self.events["bom_stripped"] += 1
        return text

    def line_limit(self) -> int:
        """Characters of a line read at once (the format's)."""
        return self.format.line_limit(self.read)

    def lines(self) -> Iterator[tuple[int, str, bool]]:
        """:meth:`lines_of` the task's decoded text."""
        with open_task(self.task) as raw:
            yield from self.lines_of(self.open_text(raw), self.task.first_record)

    def lines_of(self, text: TextIO, lineno: int) -> Iterator[tuple[int, str, bool]]:
        """(line number, line without its end, too long) of ``text``, numbered after
        ``lineno``; a line of the limit's characters or more is read in pieces, dropped."""
        limit = self.line_limit()
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

    def new_row(self, record_id: str, drop: str | None = None) -> dict[str, Any]:
        """A row of this task with id ``<source>/<relpath>:<record_id>`` and no text."""
        return {
            "id": f"{self.source.name}/{self.task.relpath}:{record_id}",
            "text": "",
            "source": self.source.name,
            "lang": self.source.lang,
            "meta": "{}",
            "drop": drop,
            "_ord": 0,
        }

    def finish_row(self, row: dict[str, Any]) -> dict[str, Any]:
        """``row`` numbered, its file's decoding applied (events, ``invalid_encoding``)
        and a repeated id dropped as ``duplicate_id``: every row passes here once."""
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

    def repaired(self, text: str) -> tuple[str, str | None]:
        """(``text`` with its undecodable bytes as U+FFFD, None) or ("", ``invalid_utf8``)
        under ``read.invalid_utf8: drop``."""
        # Undecodable bytes are escaped as surrogates: a line without any (almost every
        # line) is told by one C pass, without the regex.
        if not has_surrogates(text) or not _ESCAPED_BYTES.search(text):
            return text, None
        self._repaired_records += 1
        self._repaired = True  # until finish_row: U+FFFD in this record came from its bytes
        if self.read.invalid_utf8 == "drop":
            return "", "invalid_utf8"
        self.events["invalid_utf8_replaced"] += 1
        return _ESCAPED_BYTES.sub("\ufffd", text), None

    def line_row(self, lineno: int, line: str, too_long: bool) -> dict[str, Any]:
        """The finished row of line ``lineno`` (its format's ``line_row`` reads it)."""
        row = self.new_row(str(lineno))
        if too_long:
            row["drop"] = "too_long"
            return self.finish_row(row)
        line, bad = self.repaired(line)
        if bad:
            row["drop"] = bad
            return self.finish_row(row)
        return self.finish_row(self.format.line_row(self, row, line))

    def object_row(self, row: dict[str, Any], obj: dict[str, Any]) -> dict[str, Any]:
        """``row`` from a keyed record: its id (``id_key``), ``meta_keys`` and text."""
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
        return self.with_text(row, fixed)

    def with_text(self, row: dict[str, Any], text: str) -> dict[str, Any]:
        """``row`` with ``text``, or dropped as ``too_long``, ``empty`` or (mostly U+FFFD
        after repairs) ``invalid_utf8``."""
        if len(text) > self.read.max_doc_chars:
            row["drop"] = "too_long"
        elif not text.strip():
            row["drop"] = "empty"
        elif self._repaired and mostly_replacement(text):
            row["drop"] = "invalid_utf8"
        else:
            row["text"] = text
        return row
