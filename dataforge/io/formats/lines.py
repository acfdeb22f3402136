"""What line formats share (``jsonl``, ``txt``): a record per line, splits at line ends.

An uncompressed file of a UTF-8 source splits at line boundaries: a split ends right after
the first ``\\n`` at or past ``split_bytes`` from its start (so a ``\\r\\n`` is never
cut). The planner reads the file once, counting the line ends before each split (``\\n``,
``\\r\\n`` and a lone ``\\r``, as the reader's universal newlines do), so that a split
numbers its lines from ``first_record`` and record ids stay ``<source>/<relpath>:<line>``
of the whole file. A compressed file, or one of a source whose ``encoding`` is not UTF-8
(decoding is decided per file), stays one task.
"""

from __future__ import annotations

import codecs
import dataclasses
from collections.abc import Iterator
from typing import Any

from dataforge.io.formats.base import COMPRESSED_SUFFIXES, InputFormat, RowReader, Source
from dataforge.io.tasks import InputTask

__all__ = ["LineFormat", "named_split"]

_SCAN_BYTES = 8 << 20


class LineFormat(InputFormat):
    """A record per line of decoded text (:meth:`line_row` makes its row)."""

    def unsplittable_reason(self, task: InputTask, source: Source) -> str | None:
        if task.path.endswith(COMPRESSED_SUFFIXES):
            return "compressed single stream"
        if codecs.lookup(source.encoding).name != "utf-8":
            # Decoding is decided per file (BOM, detection) and a "\n" byte need not end a
            # line in every codec (UTF-16): such a file is read whole.
            return f"encoding: {source.encoding}"
        return None

    def split(self, task: InputTask, source: Source, split_bytes: int) -> list[InputTask]:
        return _line_splits(task, split_bytes)

    def rows(self, reader: RowReader) -> Iterator[dict[str, Any]]:
        for line in reader.lines():
            yield reader.line_row(*line)


def named_split(task: InputTask, k: int, **fields: Any) -> InputTask:
    """Split ``k`` of ``task``: task id ``<file task id>-<k:06d>`` (sorts in file order)."""
    return dataclasses.replace(task, task_id=f"{task.task_id}-{k:06d}", **fields)


def _line_splits(task: InputTask, split_bytes: int) -> list[InputTask]:
    bounds = _line_boundaries(task.path, task.bytes, split_bytes)
    if len(bounds) == 1:
        return [task]
    ends = bounds[1:] + [task.bytes]
    lines_before = _count_line_ends(task.path, bounds[1:])
    return [
        named_split(task, k, offset=start, length=end - start, first_record=lines)
        for k, (start, end, lines) in enumerate(zip(bounds, ends, [0, *lines_before], strict=True))
    ]


def _line_boundaries(path: str, size: int, split_bytes: int) -> list[int]:
    """Split start offsets: 0, then just after the first ``\\n`` at or past each target."""
    starts = [0]
    with open(path, "rb") as f:
        while starts[-1] + split_bytes < size:
            pos = starts[-1] + split_bytes - 1
            f.seek(pos)
            while True:
                block = f.read(1 << 20)
                if not block:
                    return starts
                idx = block.find(b"\n")
                if idx >= 0:
                    break
                pos += len(block)
            boundary = pos + idx + 1
            if boundary >= size:
                return starts
            starts.append(boundary)
    return starts


def _count_line_ends(path: str, offsets: list[int]) -> list[int]:
    """Line ends before each offset (each just after a ``\\n``), as universal newlines
    count them: ``\\n``, ``\\r\\n`` and a lone ``\\r`` are one line end each."""
    counts = []
    total = 0
    pos = 0
    carry_cr = False  # the previous block ended with \r
    with open(path, "rb") as f:
        for target in offsets:
            while pos < target:
                block = f.read(min(_SCAN_BYTES, target - pos))
                pos += len(block)
                total += block.count(b"\n")
                crs = block.count(b"\r")
                if crs:
                    total += crs - block.count(b"\r\n")
                if carry_cr and block.startswith(b"\n"):
                    total -= 1  # that \r and this \n are one \r\n, counted twice
                carry_cr = block.endswith(b"\r")
            counts.append(total)
    return counts
