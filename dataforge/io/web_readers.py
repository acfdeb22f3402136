"""Web inputs: WARC, WET and HTML files -> one row per record, HTML decoded to text.

* ``format: warc``: HTTP ``response`` records whose content type is HTML become rows whose
  text is the page's decoded HTML (the ``extract`` op turns it into main text). Other
  record types (``request``, ``metadata``, ``warcinfo``...) are dropped as
  ``warc:record_type:<type>``, responses of another content type as ``warc:not_html``.
* ``format: wet``: ``conversion`` records (Common Crawl's extracted text, UTF-8) become rows
  of plain text; other record types are dropped as for WARC.
* ``format: html``: every file is one page (``.html``/``.htm``, optionally ``.gz``).

WARC and WET files are parsed by ``warcio`` (WARC/1.0 and 1.1), gzip per record (Common
Crawl) or whole-file gzip (inflated as one stream first, see :func:`_gzip_per_record`).
Record ids are ``<source>/<relpath>:<n>``, ``n`` the record's number in the file (from 1),
so they do not depend on splits (:func:`warc_record_bounds` plans splits at record
boundaries). Rows carry ``meta.url`` (``WARC-Target-URI``; for HTML files the page's
canonical link when it has one), ``meta.warc_date``, ``meta.warc_record_id``,
``meta.charset`` and ``meta.content`` (``html`` or ``text``, what ``extract`` reads).

A page is decoded by the charset of its HTTP ``Content-Type`` header, then its ``<meta>``
charset, then the source's ``encoding`` (``auto``: :func:`dataforge.io.decoding.decide_encoding`);
the first that decodes the bytes strictly wins (GBK and GB2312 read as GB18030, Big5 as
CP950, their supersets). When none does, the last one decodes with U+FFFD and the event
``charset_replaced`` is counted; a page no codec can be decided for is ``invalid_encoding``.

A record warcio cannot parse (bad header, cut short) is one row ``warc:malformed`` at its
number; reading resumes at the next place past the last good record where a record may
start (a gzip member header, a ``WARC/1.`` line), so one bad record costs only itself.
A whole-file gzip, one stream without offsets, ends at a bad record.
"""

from __future__ import annotations

import codecs
import dataclasses
import json
import re
import zlib
from collections.abc import Generator, Iterator
from typing import TYPE_CHECKING, Any, BinaryIO

from warcio.archiveiterator import ArchiveIterator
from warcio.exceptions import ArchiveLoadFailed

from dataforge.io.decoding import decide_encoding
from dataforge.io.fs import open_input_file, open_input_stream
from dataforge.io.streams import open_binary, open_byte_range
from dataforge.io.tasks import InputTask

if TYPE_CHECKING:
    from dataforge.io.readers import TaskReader

__all__ = ["WEB_FORMATS", "decode_page", "warc_record_bounds", "warc_splits", "web_rows"]

WEB_FORMATS = ("warc", "wet", "html")
_HTML_TYPES = ("text/html", "application/xhtml+xml")
_META_SCAN_BYTES = 4096
_FIRST_MEMBER_BYTES = 1 << 20
_CHARSET_PARAM = re.compile(r"charset\s*=\s*[\"']?([A-Za-z0-9_.:-]+)", re.IGNORECASE)
_META_CHARSET = re.compile(rb"<meta[^>]+charset\s*=\s*[\"']?\s*([A-Za-z0-9_.:-]+)", re.IGNORECASE)
_CANONICAL = re.compile(
    r"<link[^>]+rel=[\"']canonical[\"'][^>]*href=[\"']([^\"']+)[\"']", re.IGNORECASE
)
# Labels pages use for a codec whose superset decodes the same bytes and more.
_SUPERSETS = {"gb2312": "gb18030", "gbk": "gb18030", "big5": "cp950"}


def _codec(label: str | None) -> str | None:
    if not label:
        return None
    try:
        name = codecs.lookup(label.strip().lower()).name
    except LookupError:
        return None
    return _SUPERSETS.get(name, name)


def decode_page(body: bytes, content_type: str | None, fallback: str) -> tuple[str, str] | None:
    """``(text, codec)`` of a page's bytes (see the module docstring); None: undecidable.

    Args:
        body: the page's bytes (transfer and content encodings already removed).
        content_type: the HTTP ``Content-Type`` header, if any.
        fallback: the source's ``encoding`` (``auto`` or a codec name).
    """
    header = _CHARSET_PARAM.search(content_type or "")
    meta = _META_CHARSET.search(body[:_META_SCAN_BYTES])
    declared = [
        _codec(header.group(1) if header else None),
        _codec(meta.group(1).decode("ascii") if meta else None),
    ]
    tried = list(dict.fromkeys(c for c in declared if c))
    for codec in tried:
        try:
            return body.decode(codec), codec
        except UnicodeDecodeError:
            continue
    last = _fallback_codec(body, fallback)  # only when no declared charset decodes
    if last is not None and last not in tried:
        try:
            return body.decode(last), last
        except UnicodeDecodeError:
            tried.append(last)
    if not tried:
        return None
    return body.decode(tried[-1], errors="replace"), f"{tried[-1]}:replaced"


def _fallback_codec(body: bytes, fallback: str) -> str | None:
    if fallback != "auto":
        return _codec(fallback)
    decision = decide_encoding(body, "auto", at_eof=True)
    return None if decision.undecodable else _codec(decision.encoding)


def warc_record_bounds(path: str) -> list[int]:
    """Byte offsets of a WARC file's records (compressed offsets in a gzip-per-record file),
    then the offset where the last one ends, for splits at record boundaries.

    Raises:
        ArchiveLoadFailed: the file cannot be parsed record by record (a whole-file gzip).
    """
    bounds = []
    with open(path, "rb") as f:
        records = ArchiveIterator(f)
        for _ in records:
            bounds.append(records.get_record_offset())
            end = records.get_record_offset() + records.get_record_length()
    return [*bounds, end] if bounds else [0]


def warc_splits(task: InputTask, split_bytes: int) -> list[InputTask]:
    """Splits of about ``split_bytes`` of a WARC/WET task, each starting at a record and
    numbering its records after those before it; a file that cannot be parsed record by
    record (a whole-file gzip, a bad record) stays one task. Planning reads the whole file
    once (inflating a gzip), in the driver: worth it for a few large files, not for many
    (``read.split_bytes: null``)."""
    try:
        bounds = warc_record_bounds(task.path)
    except (ArchiveLoadFailed, EOFError, OSError, ValueError, zlib.error):
        return [task]
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
    """Whether a gzip stream's first member ends early (a member per record, which warcio
    reads member by member) rather than holding the whole file (read through a gzip
    stream instead). A first member of more than :data:`_FIRST_MEMBER_BYTES` counts as
    the whole file; either way every record is read, only a truncation's reach differs."""
    member = zlib.decompressobj(wbits=31)
    produced = 0
    while produced <= _FIRST_MEMBER_BYTES:
        chunk = raw.read(1 << 16)
        if not chunk:
            return False
        try:
            produced += len(member.decompress(chunk, _FIRST_MEMBER_BYTES))
        except zlib.error:
            return False
        if member.eof:
            return bool(member.unused_data) or bool(raw.read(1))
    return False


def _whole_file_gzip(path: str) -> bool:
    if not path.endswith(".gz"):
        return False
    with open_input_stream(path) as probe:
        return not _gzip_per_record(probe)


def web_rows(reader: TaskReader) -> Iterator[dict[str, Any]]:
    """The rows of one WARC, WET or HTML task."""
    if reader.source.format == "html":
        yield from _html_file_rows(reader)
        return
    task = reader.task
    if task.length is None and _whole_file_gzip(task.path):
        with open_binary(task.path) as stream:  # inflated: no offsets to resume from
            yield from _records(reader, stream, task.first_record, 0)
        return
    offset, end = task.offset, task.offset + task.length if task.length is not None else None
    number = task.first_record
    while offset is not None:
        with _open_from(task.path, offset, end) as stream:
            number, failed_after = yield from _records(reader, stream, number, offset)
        offset = None if failed_after is None else _next_record(task.path, failed_after, end)


def _open_from(path: str, offset: int, end: int | None) -> BinaryIO:
    if end is not None:
        return open_byte_range(path, offset, end - offset)  # a split (local files only)
    raw = open_input_file(path)
    raw.seek(offset)
    return raw


def _next_record(path: str, after: int, end: int | None) -> int | None:
    """Offset of the first place past ``after`` where a record may start: a gzip member
    header or a ``WARC/1.`` line; None: none before ``end``."""
    marker = b"\x1f\x8b\x08" if path.endswith(".gz") else b"\nWARC/1."
    skip = 0 if marker.startswith(b"\x1f") else 1
    with open_input_file(path) as raw:
        raw.seek(after + 1)
        pos, tail = after + 1, b""
        while end is None or pos < end:
            block = raw.read(1 << 20)
            if not block:
                return None
            found = (tail + block).find(marker)
            if found >= 0:
                start = pos - len(tail) + found + skip
                return start if end is None or start < end else None
            tail = block[-len(marker) :]
            pos += len(block)
    return None


def _records(
    reader: TaskReader, stream: BinaryIO, number: int, base: int
) -> Generator[dict[str, Any], None, tuple[int, int | None]]:
    """Rows of the records in ``stream`` (which starts at file offset ``base``), numbered
    after ``number``; returns (the last number, None at the end or the file offset of the
    last good record's end after a record that could not be parsed)."""
    records = ArchiveIterator(stream, arc2warc=False, ensure_http_headers=False)
    iterator = iter(records)
    good_end = base
    while True:
        number += 1
        try:
            row = _record_row(reader, next(iterator), number)
            good_end = base + records.get_record_offset() + records.get_record_length()
        except StopIteration:
            return number - 1, None
        except (ArchiveLoadFailed, EOFError, OSError, ValueError, zlib.error) as exc:
            reader.events[f"warc_malformed:{type(exc).__name__}"] += 1
            yield reader._finish(reader._base_row(str(number), drop="warc:malformed"))
            return number, good_end
        yield reader._finish(row)


def _record_row(reader: TaskReader, record: Any, number: int) -> dict[str, Any]:
    row = reader._base_row(str(number))
    fmt = reader.source.format
    wanted = "response" if fmt == "warc" else "conversion"
    headers = record.rec_headers
    if record.rec_type != wanted:
        record.content_stream().read()
        _check_complete(record)
        row["drop"] = f"warc:record_type:{record.rec_type}"
        return row
    meta = {
        "url": headers.get_header("WARC-Target-URI"),
        "warc_date": headers.get_header("WARC-Date"),
        "warc_record_id": headers.get_header("WARC-Record-ID"),
    }
    body = record.content_stream().read(reader.read.max_doc_chars * 4 + 1)
    if len(body) > reader.read.max_doc_chars * 4:
        record.content_stream().read()
        _check_complete(record)
        row["drop"] = "too_long"
        return row
    _check_complete(record)
    if fmt == "wet":
        meta.update(charset="utf-8", content="text")
        text = body.decode("utf-8", errors="replace")
    else:
        content_type = (
            record.http_headers.get_header("Content-Type") if record.http_headers else None
        )
        if not content_type or content_type.split(";")[0].strip().lower() not in _HTML_TYPES:
            row["drop"] = "warc:not_html"
            return row
        decoded = _decoded(reader, body, content_type)
        if decoded is None:
            row["drop"] = "invalid_encoding"
            return row
        text, meta["charset"] = decoded
        meta["content"] = "html"
    row["meta"] = json.dumps(meta, ensure_ascii=False, sort_keys=True)
    return reader._with_text(row, text)


def _check_complete(record: Any) -> None:
    """warcio ends a record cut short by the end of the file quietly: its block reader
    still expects bytes (``Content-Length`` not reached)."""
    if getattr(record.raw_stream, "limit", 0) > 0:
        raise EOFError(f"record ends {record.raw_stream.limit} bytes before its Content-Length")


def _decoded(reader: TaskReader, body: bytes, content_type: str | None) -> tuple[str, str] | None:
    decoded = decode_page(body, content_type, reader.source.encoding)
    if decoded is not None and decoded[1].endswith(":replaced"):
        reader.events["charset_replaced"] += 1
    return decoded


def _html_file_rows(reader: TaskReader) -> Iterator[dict[str, Any]]:
    with open_binary(reader.task.path) as raw:
        body = raw.read(reader.read.max_doc_chars * 4 + 1)
    row = reader._base_row("0")
    if len(body) > reader.read.max_doc_chars * 4:
        row["drop"] = "too_long"
        yield reader._finish(row)
        return
    decoded = _decoded(reader, body, None)
    if decoded is None:
        row["drop"] = "invalid_encoding"
        yield reader._finish(row)
        return
    text, charset = decoded
    meta: dict[str, Any] = {"charset": charset, "content": "html", "path": reader.task.relpath}
    canonical = _CANONICAL.search(text[:65536])
    if canonical:
        meta["url"] = canonical.group(1)
    row["meta"] = json.dumps(meta, ensure_ascii=False, sort_keys=True)
    yield reader._finish(reader._with_text(row, text))
