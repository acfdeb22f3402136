"""``format: warc``: HTTP ``response`` records whose content type is HTML become rows whose
text is the page's decoded HTML (the ``extract`` op turns it into main text). Other record
types (``request``, ``metadata``, ``warcinfo``...) are dropped as
``warc:record_type:<type>`` (``<type>`` one of :data:`WARC_TYPES`, else ``other``),
responses of another content type as ``warc:not_html``. ``format: wet``
(:mod:`dataforge.io.formats.wet`) reads the same files' ``conversion`` records.

WARC and WET files are parsed by ``warcio`` (WARC/1.0 and 1.1), gzip per record (Common
Crawl) or whole-file gzip (inflated as one stream, see :func:`_gzip_per_record`).
Record ids are ``<source>/<relpath>:<n>``, ``n`` the record's number in the file (from 1),
so they do not depend on splits (:func:`warc_record_bounds` plans splits at record
boundaries). Rows carry ``meta.url`` (``WARC-Target-URI``; for HTML files the page's
canonical link when it has one), ``meta.warc_date``, ``meta.warc_record_id``,
``meta.charset`` and ``meta.content`` (``html`` or ``text``, what ``extract`` reads).
Pages are decoded by :func:`dataforge.io.formats.web.decoded_page`.

Every record costs bounded memory: its headers are at most
:data:`~dataforge.io.warc_stream.MAX_HEADER_BYTES`; a payload is read (transfer and content
codings removed) only for a record that can be kept, to at most ``4 * read.max_doc_chars``
bytes, past which it is ``too_long``; the rest of a record is read in pieces and
discarded.

A record that cannot be trusted (warcio cannot parse it; it is cut short; its
``Content-Length`` is missing or lies; its headers pass the cap; its content coding is
damaged) is one row ``warc:malformed`` at its number, with the event
``warc_malformed:<why>``. Reading resumes at the next place past it where a record may
start (a gzip member header, ``WARC/1.``), so one bad record costs only itself, and
bytes that are left unparsed at the end (a cut gzip member) are one ``warc:malformed``
too. A whole-file gzip, one stream without offsets, ends at a bad record.
"""

from __future__ import annotations

import dataclasses
import json
import re
import zlib
from collections.abc import Generator, Iterator
from typing import Any, BinaryIO

from dataforge.io.formats.base import InputFormat, RowReader, Source
from dataforge.io.formats.web import decoded_page, malformed_row
from dataforge.io.fs import open_input_file, open_input_stream
from dataforge.io.http_payload import PayloadError, read_payload
from dataforge.io.streams import open_binary, open_byte_range
from dataforge.io.tasks import InputTask
from dataforge.io.warc_stream import MAX_HEADER_BYTES, MalformedRecord, WarcRecords

__all__ = ["WARC_TYPES", "WarcFormat", "record_type_drop", "warc_record_bounds", "warc_splits"]

WARC_TYPES = frozenset(
    ("warcinfo", "response", "resource", "request", "metadata", "revisit", "conversion",
     "continuation")
)  # fmt: skip
"""The record types of WARC 1.1; any other ``WARC-Type`` is dropped as ``other``."""
_HTML_TYPES = ("text/html", "application/xhtml+xml")
_BLANK_LINES_SLACK = 64  # bytes a writer may put after a record in its member
_CONTENT_LENGTH = re.compile(rb"\r\nContent-Length:[ \t]*([0-9]{1,18})[ \t]*\r\n", re.IGNORECASE)
_BLANK_TAIL_BYTES = 1 << 16


class WarcFormat(InputFormat):
    """WARC files: one row per record, HTML ``response`` records kept."""

    name = "warc"
    record_type = "response"
    """The ``WARC-Type`` of the records that can be kept."""

    def unsplittable_reason(self, task: InputTask, source: Source) -> str | None:
        return None  # a whole-file gzip is found while splitting, and stays whole

    def split(self, task: InputTask, source: Source, split_bytes: int) -> list[InputTask]:
        return warc_splits(task, split_bytes)

    def rows(self, reader: RowReader) -> Iterator[dict[str, Any]]:
        return _warc_rows(self, reader)

    def early_drop(self, record: Any) -> str | None:
        """The drop reason of a record known from its headers, before its payload is read."""
        reason = record_type_drop(record, self.record_type)
        if reason is not None:
            return reason
        content_type = (
            record.http_headers.get_header("Content-Type") if record.http_headers else None
        )
        if not content_type or content_type.split(";")[0].strip().lower() not in _HTML_TYPES:
            return "warc:not_html"
        return None

    def page(self, reader: RowReader, record: Any, body: bytes) -> tuple[str, dict] | None:
        """(text, its ``meta`` keys) of a kept record's payload; None: ``invalid_encoding``."""
        decoded = decoded_page(reader, body, record.http_headers.get_header("Content-Type"))
        if decoded is None:
            return None
        text, charset = decoded
        return text, {"charset": charset, "content": "html"}


def record_type_drop(record: Any, wanted: str) -> str | None:
    """``warc:record_type:<type>`` for a record of another type than ``wanted``."""
    if record.rec_type == wanted:
        return None
    return f"warc:record_type:{record.rec_type if record.rec_type in WARC_TYPES else 'other'}"


def warc_record_bounds(path: str) -> list[int]:
    """Byte offsets of a WARC file's records (compressed offsets in a gzip-per-record file),
    then the offset where the last one ends, for splits at record boundaries.

    Raises:
        MalformedRecord: a record cannot be trusted (see :mod:`dataforge.io.warc_stream`);
            warcio's own errors (a whole-file gzip: ``ArchiveLoadFailed``) pass through.
    """
    bounds = []
    with open(path, "rb") as f:
        records = WarcRecords(f)
        while records.next() is not None:
            start, end = records.finish()
            bounds.append(start)
    return [*bounds, end] if bounds else [0]


def warc_splits(task: InputTask, split_bytes: int) -> list[InputTask]:
    """Splits of about ``split_bytes`` of a WARC/WET task, each starting at a record and
    numbering its records after those before it; a file that cannot be parsed record by
    record (a whole-file gzip, a bad record) stays one task. Planning reads the whole file
    once (inflating a gzip), in the driver: worth it for a few large files, not for many
    (``read.split_bytes: null``)."""
    try:
        bounds = warc_record_bounds(task.path)
    except Exception:  # noqa: BLE001 - warcio raises whatever a hostile file makes it
        return [task]  # the reader counts what it cannot read
    starts = [0]  # indexes into bounds of the records that start a split
    for i, offset in enumerate(bounds[:-1]):
        if offset - bounds[starts[-1]] >= split_bytes:
            starts.append(i)
    if len(starts) == 1:
        return [task]
    ends = [*starts[1:], len(bounds) - 1]
    return [
        dataclasses.replace(
            task,
            task_id=f"{task.task_id}-{k:06d}",
            offset=bounds[first],
            length=(bounds[last] if last < len(bounds) - 1 else task.bytes) - bounds[first],
            first_record=first,
        )
        for k, (first, last) in enumerate(zip(starts, ends, strict=True))
    ]


def _gzip_per_record(raw: BinaryIO) -> bool:
    """Whether a gzip stream holds a member per record (warcio reads it member by member,
    resuming past a bad one) rather than the whole file in one member (read through a
    gzip stream instead, which ends at a bad record). The first member is inflated to the
    end of its first record, its output discarded as it goes: in a member per record file,
    the member ends there. A member cut short is read as a whole file (every record before
    the cut is kept); one that does not inflate or parse is read member by member (the
    members after it are found)."""
    inflate = zlib.decompressobj(wbits=31)
    head, produced, record_end = b"", 0, None
    data = raw.read(1 << 16)
    while data:
        try:
            out = inflate.decompress(data, 1 << 16)
        except zlib.error:
            return True
        produced += len(out)
        if record_end is None:
            head += out
            record_end = _first_record_end(head)
            if record_end is not None and record_end < 0:
                return True
        if inflate.eof:
            return bool(inflate.unused_data) or bool(raw.read(1))
        if record_end is not None and produced > record_end + _BLANK_LINES_SLACK:
            return False  # the member goes on past its first record
        data = inflate.unconsumed_tail or raw.read(1 << 16)
    return False


def _first_record_end(head: bytes) -> int | None:
    """Where the record that ``head`` starts ends (its blank lines not included); None:
    its header is not complete yet; -1: a header without a Content-Length or too long."""
    header_end = head.find(b"\r\n\r\n")
    if header_end < 0:
        return None if len(head) <= MAX_HEADER_BYTES else -1
    length = _CONTENT_LENGTH.search(head, 0, header_end + 2)
    return header_end + 4 + int(length.group(1)) if length else -1


def _whole_file_gzip(path: str) -> bool:
    if not path.endswith(".gz"):
        return False
    with open_input_stream(path) as probe:
        return not _gzip_per_record(probe)


def _warc_rows(fmt: WarcFormat, reader: RowReader) -> Iterator[dict[str, Any]]:
    """The rows of one WARC or WET task."""
    task = reader.task
    if task.length is None and _whole_file_gzip(task.path):
        with open_binary(task.path) as stream:  # inflated: no offsets to resume from
            yield from _records(fmt, reader, _Unswallowed(stream), task.first_record, 0)
        return
    offset, end = task.offset, task.offset + task.length if task.length is not None else None
    number = task.first_record
    while True:
        with _open_from(task.path, offset, end) as stream:
            number, good_end, failed = yield from _records(fmt, reader, stream, number, offset)
        if not failed and _blank_after(task.path, good_end, end):
            return
        if not failed:  # warcio ended quietly before the end (a cut gzip member)
            number += 1
            yield malformed_row(reader, number, "unparsed_bytes")
        next_offset = _next_record(task.path, good_end, end)
        if next_offset is None:
            return
        offset = next_offset


class _Unswallowed:
    """A stream whose damage (a cut or corrupt gzip stream) raises :class:`MalformedRecord`:
    warcio takes an ``EOFError`` from its input for the end of the file."""

    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream

    def read(self, size: int = -1) -> bytes:
        try:
            return self._stream.read(size)
        except (EOFError, OSError, zlib.error) as exc:
            raise MalformedRecord("damaged_stream", f"{type(exc).__name__}: {exc}") from exc


def _open_from(path: str, offset: int, end: int | None) -> BinaryIO:
    if end is not None:
        return open_byte_range(path, offset, end - offset)  # a split (local files only)
    raw = open_input_file(path)
    raw.seek(offset)
    return raw


def _blank_after(path: str, start: int, end: int | None) -> bool:
    """Whether the bytes from ``start`` to ``end`` (None: the end of the file) hold no
    record: only whitespace, or gzip members of whitespace only (a writer's padding)."""
    with _open_from(path, start, end) as raw:
        tail = raw.read(_BLANK_TAIL_BYTES + 1)
    if not tail.strip():
        return True
    if len(tail) > _BLANK_TAIL_BYTES or not tail.startswith(b"\x1f\x8b"):
        return False
    inflated = []
    try:
        while tail:
            member = zlib.decompressobj(wbits=31)
            inflated.append(member.decompress(tail, _BLANK_TAIL_BYTES))
            if not member.eof:
                return False
            tail = member.unused_data
    except zlib.error:
        return False
    return not b"".join(inflated).strip()


def _next_record(path: str, after: int, end: int | None) -> int | None:
    """Offset of the first place where a record may start (a gzip member header or
    ``WARC/1.``, at a line's start or not: lost bytes may have taken the line end before
    it) past the first non-blank byte from ``after`` (where the bad record or the unparsed
    bytes begin); None: none before ``end``."""
    marker = b"\x1f\x8b\x08" if path.endswith(".gz") else b"WARC/1."
    with open_input_file(path) as raw:
        raw.seek(after)
        pos, tail, started = after, b"", False
        while end is None or pos < end:
            block = raw.read(1 << 20)
            if not block:
                return None
            if not started:  # find the bad bytes first, then search past their start
                stripped = block.lstrip()
                if not stripped:
                    pos += len(block)
                    continue
                pos += len(block) - len(stripped) + 1
                block, started = stripped[1:], True
            found = (tail + block).find(marker)
            if found >= 0:
                start = pos - len(tail) + found
                return start if end is None or start < end else None
            tail = block[-len(marker) :]
            pos += len(block)
    return None


def _records(
    fmt: WarcFormat, reader: RowReader, stream: BinaryIO, number: int, base: int
) -> Generator[dict[str, Any], None, tuple[int, int, bool]]:
    """Rows of the records in ``stream`` (which starts at file offset ``base``), numbered
    after ``number``; returns (the last number, the file offset where the last good record
    ends, whether reading stopped at a record that could not be trusted, one
    ``warc:malformed`` row)."""
    records = WarcRecords(stream)
    good_end = base
    while True:
        number += 1
        try:
            record = records.next()
            if record is None:
                return number - 1, good_end, False
            reason = fmt.early_drop(record)
            body = None if reason else read_payload(record, reader.read.max_doc_chars * 4)
            start, end = records.finish()
            if base + start < good_end:
                raise MalformedRecord("content_length", f"record at {start} overlaps")
        except Exception as exc:  # noqa: BLE001 - warcio raises whatever hostile bytes make it
            kind = exc.kind if isinstance(exc, MalformedRecord) else type(exc).__name__
            kind = "content_encoding" if isinstance(exc, PayloadError) else kind
            yield malformed_row(reader, number, kind)
            return number, good_end, True
        good_end = base + end
        yield reader.finish_row(_record_row(fmt, reader, record, number, reason, body))


def _record_row(
    fmt: WarcFormat,
    reader: RowReader,
    record: Any,
    number: int,
    reason: str | None,
    body: bytes | None,
) -> dict[str, Any]:
    row = reader.new_row(str(number))
    if reason is not None or body is None:
        row["drop"] = reason or "too_long"
        return row
    page = fmt.page(reader, record, body)
    if page is None:
        row["drop"] = "invalid_encoding"
        return row
    text, page_meta = page
    headers = record.rec_headers
    meta = {
        "url": headers.get_header("WARC-Target-URI"),
        "warc_date": headers.get_header("WARC-Date"),
        "warc_record_id": headers.get_header("WARC-Record-ID"),
        **page_meta,
    }
    row["meta"] = json.dumps(meta, ensure_ascii=False, sort_keys=True)
    return reader.with_text(row, text)
