"""Byte streams of input files: decompression (gzip, zstd with truncation detected) and
byte ranges of uncompressed files (splits), for :mod:`dataforge.io.readers`."""

from __future__ import annotations

import gzip
import io
from typing import BinaryIO

import zstandard

from dataforge.io.fs import open_input_stream

__all__ = ["open_binary", "open_byte_range"]


def open_binary(path: str) -> BinaryIO:
    """The decompressed bytes of ``path`` (``.gz``, ``.zst``/``.zstd`` or plain), buffered,
    through the filesystem seam (local paths and object storage)."""
    if path.endswith(".gz"):
        return _GzipStream(path)
    if path.endswith(".zst") or path.endswith(".zstd"):
        return io.BufferedReader(_ZstdFrames(path), buffer_size=1 << 20)
    raw = open_input_stream(path)
    return raw if isinstance(raw, io.IOBase) else io.BufferedReader(raw, buffer_size=1 << 20)


class _GzipStream(gzip.GzipFile):
    """``gzip.open`` over the filesystem seam (closes the stream it opened)."""

    def __init__(self, path: str) -> None:
        self._stream = open_input_stream(path)
        super().__init__(fileobj=self._stream, mode="rb")

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._stream.close()


class _ByteRange(io.RawIOBase):
    """``length`` bytes of an uncompressed file from ``offset`` (one split)."""

    def __init__(self, path: str, offset: int, length: int) -> None:
        self._file = open(path, "rb")  # noqa: SIM115 - closed in close()
        self._file.seek(offset)
        self._left = length

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[override]
        view = memoryview(buffer)[: self._left]
        n = self._file.readinto(view)
        self._left -= n
        return n

    def close(self) -> None:
        self._file.close()
        super().close()


class _ZstdFrames(io.RawIOBase):
    """Streaming zstd decompression that raises on a truncated stream.

    ``zstandard``'s own stream_reader returns a clean EOF when the input ends mid-frame;
    a corpus file cut short by a failed copy must be an error, not silently fewer records.
    """

    def __init__(self, path: str) -> None:
        self._file = open_input_stream(path)  # closed in close()
        self._path = path
        self._dobj = zstandard.ZstdDecompressor().decompressobj()
        self._pending = b""
        self._in_frame = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[override]
        while not self._pending:
            chunk = self._file.read(1 << 20)
            if not chunk:
                if self._in_frame:
                    raise EOFError(
                        f"{self._path}: zstd stream ends in the middle of a frame (truncated)"
                    )
                return 0
            self._feed(chunk)
        n = min(len(buffer), len(self._pending))
        buffer[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        return n

    def _feed(self, chunk: bytes) -> None:
        out = []
        while chunk:
            self._in_frame = True
            out.append(self._dobj.decompress(chunk))
            if self._dobj.eof:
                chunk = self._dobj.unused_data
                self._dobj = zstandard.ZstdDecompressor().decompressobj()
                self._in_frame = False
            else:
                chunk = b""
        self._pending += b"".join(out)

    def close(self) -> None:
        self._file.close()
        super().close()


def open_byte_range(path: str, offset: int, length: int) -> BinaryIO:
    """``length`` bytes of an uncompressed local file from ``offset``, buffered (a split)."""
    return io.BufferedReader(_ByteRange(path, offset, length), 1 << 20)
