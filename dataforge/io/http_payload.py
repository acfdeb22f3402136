"""The payload of an HTTP response record, transfer and content codings removed, read to
at most a given number of bytes whatever its compression ratio.

warcio's ``record.content_stream()`` inflates a whole block of input at once (a brotli
block can inflate to gigabytes) and holds a whole ``chunked`` chunk (up to 2 GB) in
memory; :func:`read_payload` decodes the same codings (``Transfer-Encoding: chunked``,
``Content-Encoding`` ``gzip``, ``x-gzip``, ``deflate``, ``br``) piece by piece with
bounded output and stops one byte past the limit. Like warcio, a body that a declared
content coding cannot decode from its first bytes (for gzip: without its magic number) is
taken as not encoded, and a ``chunked`` body whose size line does not parse is read as it
is from there on.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO

import brotli

__all__ = ["PayloadError", "read_payload"]

_PIECE = 1 << 16
"""Bytes read, or inflated, at a time."""
_ERRORS = (zlib.error, brotli.error)
Inflate = Callable[[bytes], Iterator[bytes]]
"""Compressed bytes in, output pieces of at most :data:`_PIECE` bytes out."""
_CHUNK_SIZE = re.compile(rb"([0-9a-fA-F]{1,16})[ \t]*(?:;[^\r\n]*)?\r?\n")


class PayloadError(ValueError):
    """A payload whose content coding breaks after its first bytes (damaged data)."""


def read_payload(record: Any, limit: int) -> bytes | None:
    """The decoded payload of ``record`` (a warcio record, its headers parsed); None when
    it is longer than ``limit`` bytes (then at most about ``limit`` bytes were decoded).

    Raises:
        PayloadError: the content coding fails past its first bytes.
    """
    raw = record.raw_stream
    headers = record.http_headers
    chunked = coding = ""
    if headers is not None:
        chunked = (headers.get_header("Transfer-Encoding") or "").strip().lower()
        coding = (headers.get_header("Content-Encoding") or "").strip().lower()
    if chunked != "chunked" and coding not in _INFLATERS:  # as stored (most pages)
        data = raw.read(limit + 1)
        return data if len(data) <= limit else None
    pieces = _dechunked(raw) if chunked == "chunked" else _pieces(raw)
    if coding in _INFLATERS:
        pieces = _decoded(pieces, coding)
    out, size = [], 0
    for piece in pieces:
        out.append(piece)
        size += len(piece)
        if size > limit:
            return None
    return b"".join(out)


def _pieces(stream: BinaryIO) -> Iterator[bytes]:
    while piece := stream.read(_PIECE):
        yield piece


def _dechunked(stream: BinaryIO) -> Iterator[bytes]:
    while True:
        line = stream.readline(64)
        size = _CHUNK_SIZE.fullmatch(line)
        if size is None:  # not chunked after all, as some servers send it
            yield line
            yield from _pieces(stream)
            return
        left = int(size.group(1), 16)
        if left == 0:
            return
        while left:
            piece = stream.read(min(left, _PIECE))
            if not piece:
                return
            left -= len(piece)
            yield piece
        stream.readline(64)  # the CRLF after the chunk


def _decoded(pieces: Iterator[bytes], coding: str) -> Iterator[bytes]:
    """``pieces`` inflated, each output piece at most :data:`_PIECE` bytes."""
    first = next(pieces, b"")
    gzip_magic = coding in ("gzip", "x-gzip") and first.startswith(b"\x1f\x8b")
    for make in _INFLATERS[coding]:
        inflate = make()
        outputs = inflate(first)
        try:
            head = next(outputs, b"")
        except _ERRORS as exc:
            if gzip_magic:  # gzip all right, damaged
                raise PayloadError(f"Content-Encoding {coding}: {exc}") from exc
            continue
        break
    else:  # the first bytes do not decode: not encoded after all
        yield first
        yield from pieces
        return
    try:
        yield head
        yield from outputs
        for piece in pieces:
            yield from inflate(piece)
    except _ERRORS as exc:
        raise PayloadError(f"Content-Encoding {coding}: {exc}") from exc


def _zlib(wbits: int) -> Callable[[], Inflate]:
    def make() -> Inflate:
        inflater = zlib.decompressobj(wbits)

        def inflate(data: bytes) -> Iterator[bytes]:
            while not inflater.eof:
                out = inflater.decompress(data, _PIECE)
                data = inflater.unconsumed_tail
                if out:
                    yield out
                if not data and len(out) < _PIECE:  # a full piece may leave output pending
                    return

        return inflate

    return make


def _brotli() -> Inflate:
    inflater = brotli.Decompressor()

    def inflate(data: bytes) -> Iterator[bytes]:
        if inflater.is_finished():
            return
        out = inflater.process(data, output_buffer_limit=_PIECE)
        while out:  # output pending, can_accept_more_data() or not
            yield out
            out = (
                b"" if inflater.is_finished() else inflater.process(b"", output_buffer_limit=_PIECE)
            )

    return inflate


_INFLATERS: dict[str, tuple[Callable[[], Inflate], ...]] = {
    "gzip": (_zlib(16 + zlib.MAX_WBITS),),
    "x-gzip": (_zlib(16 + zlib.MAX_WBITS),),
    "deflate": (_zlib(zlib.MAX_WBITS), _zlib(-zlib.MAX_WBITS)),  # zlib-wrapped, else raw
    "br": (_brotli,),
}
