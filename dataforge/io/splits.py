"""Input splits: a large input file becomes several tasks of about ``read.split_bytes``.

* **Line files** (uncompressed ``jsonl``, ``txt`` with ``txt_unit: line``) split at line
  boundaries: a split ends right after the first ``\\n`` at or past ``split_bytes`` from
  its start (so a ``\\r\\n`` is never cut). The planner reads the file once, counting the
  line ends before each split (``\\n``, ``\\r\\n`` and a lone ``\\r``, as the reader's
  universal newlines do), so that a split numbers its lines from ``first_record`` and
  record ids stay ``<source>/<relpath>:<line>`` of the whole file. The output therefore
  does not depend on the split size.
* **Parquet** splits by row groups: consecutive row groups up to about ``split_bytes`` of
  compressed column data; rows are numbered from the rows of the groups before.
* **WARC and WET files** (plain or gzip per record) split at record boundaries
  (:func:`dataforge.io.web_readers.warc_splits`); a whole-file gzip stays one task.
* **Compressed files** (``.gz``, ``.zst``) are one stream that can only be read from the
  start: they stay one task, whatever their size. So do ``txt`` files read per paragraph
  or per file, and files of a source whose ``encoding`` is not UTF-8 (decoding is decided
  per file).

Splits of a file get task ids ``<file task id>-<split:06d>``, which sort in file order;
a file that fits one split keeps its file task id.
"""

from __future__ import annotations

import codecs
import dataclasses
import math
from collections.abc import Sequence

import pyarrow.parquet as pq

from dataforge.io.input_config import InputConfig
from dataforge.io.readers import InputTask
from dataforge.io.web_readers import WEB_FORMATS, warc_splits

__all__ = [
    "COMPRESSED_SUFFIXES",
    "estimated_task_count",
    "split_input_tasks",
    "split_summary",
    "split_task",
    "unsplittable_reason",
]

_SCAN_BYTES = 8 << 20
COMPRESSED_SUFFIXES = (".gz", ".zst", ".zstd")


def unsplittable_reason(task: InputTask, source: InputConfig) -> str | None:
    """Why this file can only be one task (None: it can be split)."""
    if source.format in WEB_FORMATS:
        return "format: html (one page per file)" if source.format == "html" else None
    if task.path.endswith(COMPRESSED_SUFFIXES):
        return "compressed single stream"
    if source.format == "txt" and source.txt_unit != "line":
        return f"txt_unit: {source.txt_unit}"
    if source.format != "parquet" and codecs.lookup(source.encoding).name != "utf-8":
        # Decoding is decided per file (BOM, detection) and a "\n" byte need not end a
        # line in every codec (UTF-16): such a file is read whole.
        return f"encoding: {source.encoding}"
    return None


def split_input_tasks(
    tasks: list[InputTask], inputs: Sequence[InputConfig], split_bytes: int | None
) -> list[InputTask]:
    """Replace every splittable file larger than ``split_bytes`` (``read.split_bytes``)
    by its splits."""
    if split_bytes is None:
        return tasks
    sources = {s.name: s for s in inputs}
    out: list[InputTask] = []
    for task in tasks:
        out += split_task(task, sources[task.source], split_bytes)
    return out


def split_task(task: InputTask, source: InputConfig, split_bytes: int) -> list[InputTask]:
    """The splits of one file task (``[task]`` when it is small or unsplittable)."""
    if task.bytes <= split_bytes or unsplittable_reason(task, source):
        return [task]
    if source.format == "parquet":
        return _parquet_splits(task, split_bytes)
    if source.format in WEB_FORMATS:
        return warc_splits(task, split_bytes)
    return _line_splits(task, split_bytes)


def estimated_task_count(task: InputTask, source: InputConfig, split_bytes: int | None) -> int:
    """Tasks this file will become, without reading it (``validate``'s summary)."""
    if split_bytes is None or task.bytes <= split_bytes or unsplittable_reason(task, source):
        return 1
    if source.format == "parquet":
        return len(_parquet_splits(task, split_bytes))
    return math.ceil(task.bytes / split_bytes)


def split_summary(
    tasks: list[InputTask], inputs: Sequence[InputConfig], split_bytes: int | None
) -> str:
    """``validate``'s line on tasks: how many the files make, and which large files
    cannot be split (without reading the files)."""
    if split_bytes is None:
        return f"{len(tasks)} tasks (read.split_bytes: null, one task per file)"
    sources = {s.name: s for s in inputs}
    count = sum(estimated_task_count(t, sources[t.source], split_bytes) for t in tasks)
    summary = f"about {count} tasks of <= {split_bytes} bytes (read.split_bytes)"
    whole = [
        (t, reason)
        for t in tasks
        if t.bytes > split_bytes and (reason := unsplittable_reason(t, sources[t.source]))
    ]
    if whole:
        t, reason = whole[0]
        summary += (
            f"; {len(whole)} larger file(s) stay one task each, e.g. {t.path} ({reason}: "
            "write it as several files to spread it over cores)"
        )
    return summary


def _named(task: InputTask, k: int, **fields) -> InputTask:
    return dataclasses.replace(task, task_id=f"{task.task_id}-{k:06d}", **fields)


def _line_splits(task: InputTask, split_bytes: int) -> list[InputTask]:
    bounds = _line_boundaries(task.path, task.bytes, split_bytes)
    if len(bounds) == 1:
        return [task]
    ends = bounds[1:] + [task.bytes]
    lines_before = _count_line_ends(task.path, bounds[1:])
    return [
        _named(task, k, offset=start, length=end - start, first_record=lines)
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


def _parquet_splits(task: InputTask, split_bytes: int) -> list[InputTask]:
    meta = pq.ParquetFile(task.path).metadata
    groups: list[list[int]] = [[]]
    size = 0
    for i in range(meta.num_row_groups):
        rg = meta.row_group(i)
        rg_bytes = sum(rg.column(c).total_compressed_size for c in range(rg.num_columns))
        if groups[-1] and size + rg_bytes > split_bytes:
            groups.append([])
            size = 0
        groups[-1].append(i)
        size += rg_bytes
    if len(groups) == 1:
        return [task]
    splits = []
    rows = 0
    for k, group in enumerate(groups):
        splits.append(_named(task, k, row_groups=tuple(group), first_record=rows))
        rows += sum(meta.row_group(i).num_rows for i in group)
    return splits
