"""WARC records from warcio, with every record's cost bounded and every header lie caught.

warcio parses well-formed files; on hostile ones it reads a header line whole however
long it is, trusts ``Content-Length`` (a record that claims too much swallows the records
after it, one that claims too little leaves its tail to be read as blank lines), ends
quietly at a gzip member cut short, and raises whatever its parser meets
(``AttributeError`` for a ``response`` without ``WARC-Target-URI``). :class:`WarcRecords`
wraps its :class:`~warcio.archiveiterator.ArchiveIterator` so that

* the header lines of one record (WARC and HTTP, and the blank lines before them) are at
  most :data:`MAX_HEADER_BYTES` (:class:`MalformedRecord` past it), whatever the
  inflation ratio of the gzip member holding them;
* a record whose headers repeat a field a record has once (two records spliced into one
  header block by lost bytes: the first ``WARC-Type`` would hide the second record),
  whose ``Content-Length`` is missing or not a decimal number, whose block ends
  before that length, that is not followed by a blank line, or whose block holds the
  start of another record (``\r\n\r\nWARC/1.``) while what follows it is not one (its
  length lies), raises :class:`MalformedRecord` instead of being read with a wrong end.

This is the one module that uses warcio past its iteration API: the iterator's
``reader`` (its ``decompressor``), ``err_count`` and ``next_line`` attributes and a
record's ``raw_stream``.
Reading the payload is :mod:`dataforge.io.http_payload`'s job.
"""

from __future__ import annotations

import re
from typing import Any, BinaryIO

from warcio.archiveiterator import ArchiveIterator
from warcio.bufferedreaders import DecompressingBufferedReader
from warcio.utils import BUFF_SIZE

__all__ = ["MAX_HEADER_BYTES", "MalformedRecord", "WarcRecords"]

MAX_HEADER_BYTES = 1 << 20
"""Header bytes one record may use: real WARC + HTTP headers are under 64 KB."""
_DECIMAL = re.compile(r"[0-9]{1,18}")  # 18 digits: past any real file, inside an int64
_RECORD_START = b"\r\n\r\nWARC/1."
_ONCE_PER_RECORD = (
    "warc-type", "warc-record-id", "warc-date", "content-length", "content-type",
    "warc-target-uri", "warc-block-digest", "warc-payload-digest",
)  # fmt: skip
"""Fields WARC 1.1 does not let a record repeat (unlike ``WARC-Concurrent-To``)."""


class MalformedRecord(ValueError):
    """A record whose framing cannot be trusted; ``kind`` names why (an event suffix)."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind


class _BudgetedLines(DecompressingBufferedReader):
    """warcio's reader whose ``readline`` stops at ``budget`` bytes in all (None: no
    budget) and then raises: warcio reads header lines with no length."""

    budget: int | None = None

    def readline(self, length: int | None = None) -> bytes:
        budget = self.budget
        if budget is None:
            return _readline(self, length)
        line = _readline(self, budget + 1 if length is None or length > budget else length)
        self.budget = budget = budget - len(line)
        if budget < 0:
            raise MalformedRecord("header_too_long", f"headers past {MAX_HEADER_BYTES} bytes")
        return line


_readline = DecompressingBufferedReader.readline  # no super() lookup per header line


class _WatchedBlock:
    """A record's block stream that notes whether the start of a record passes through."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._tail = b""
        self.holds_record_start = False

    @property
    def limit(self) -> int:
        return self._stream.limit

    def read(self, length: int | None = None) -> bytes:
        return self._seen(self._stream.read(length))

    def readline(self, length: int | None = None) -> bytes:
        return self._seen(self._stream.readline(length))

    def tell(self) -> int:
        return self._stream.tell()

    def _seen(self, data: bytes) -> bytes:
        if data and not self.holds_record_start:
            keep = len(_RECORD_START) - 1  # a start cut by the edge between two reads
            self.holds_record_start = (
                _RECORD_START in data or _RECORD_START in self._tail + data[:keep]
            )
            self._tail = (self._tail + data[-keep:])[-keep:]
        return data


class WarcRecords:
    """The records of ``stream``: :meth:`next` parses one, :meth:`finish` reads it to its
    end and says where it lies; both raise :class:`MalformedRecord` (or whatever warcio
    raises) for a record that cannot be trusted, after which this object is spent."""

    def __init__(self, stream: BinaryIO) -> None:
        self._records = ArchiveIterator(stream, arc2warc=False, ensure_http_headers=False)
        # Replaced before the first read: warcio builds its reader in __init__ and reads
        # through self.reader only once iteration starts.
        self._lines = _BudgetedLines(self._records.fh, block_size=BUFF_SIZE)
        self._records.reader = self._lines
        self._iterator = iter(self._records)
        self._record: Any = None

    def next(self) -> Any | None:
        """The next record (its headers parsed, its block unread); None at the end."""
        self._lines.budget = MAX_HEADER_BYTES
        try:
            record = next(self._iterator, None)
        finally:
            self._lines.budget = None
        self._record = record
        if record is not None:
            _check_once_per_record(record.rec_headers.headers)
            length = record.rec_headers.get_header("Content-Length")
            if length is None or not _DECIMAL.fullmatch(length.strip()):
                raise MalformedRecord("content_length", f"Content-Length {length!r:.40}")
            record.raw_stream = _WatchedBlock(record.raw_stream)
        return record

    def finish(self) -> tuple[int, int]:
        """Read the current record to its end (in pieces: memory stays bounded); returns
        its (start, end) in the stream, the blank lines after it included for gzip
        members, not for plain files (warcio's record offset and length)."""
        errors = self._records.err_count
        self._lines.budget = MAX_HEADER_BYTES  # the blank lines after the record
        try:
            start = self._records.get_record_offset()
            length = self._records.get_record_length()
        finally:
            self._lines.budget = None
        inflating = self._lines.decompressor
        if inflating is not None and not inflating.eof:  # its member is cut short
            raise MalformedRecord("truncated", "gzip member ends before its end of stream")
        left = getattr(self._record.raw_stream, "limit", 0)
        if left > 0:
            raise MalformedRecord("truncated", f"block ends {left} bytes before its length")
        if self._records.err_count != errors:
            raise MalformedRecord("content_length", "record not followed by a blank line")
        after = self._records.next_line
        if after and not after.startswith(b"WARC/") and self._record.raw_stream.holds_record_start:
            raise MalformedRecord("content_length", "record holds the start of the next one")
        if start < 0 or length <= 0:
            raise MalformedRecord("content_length", f"record at {start} of length {length}")
        return start, start + length


def _check_once_per_record(headers: list[tuple[str, str]]) -> None:
    names = [name.strip().lower() for name, _ in headers]
    for name in _ONCE_PER_RECORD:
        if names.count(name) > 1:
            raise MalformedRecord("repeated_header", f"{name} {names.count(name)} times")
