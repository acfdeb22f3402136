"""Input splits: a large input file becomes several tasks of about ``read.split_bytes``.

Each format decides (:class:`~dataforge.io.formats.base.InputFormat`'s
``unsplittable_reason`` and ``split``):

* **Line files** (uncompressed ``jsonl``, ``txt`` with ``txt_unit: line``) split at line
  boundaries, numbering lines from the lines before
  (:mod:`dataforge.io.formats.lines`); the output does not depend on the split size.
* **Parquet** splits by row groups (:mod:`dataforge.io.formats.parquet`).
* **WARC and WET files** (plain or gzip per record) split at record boundaries
  (:func:`dataforge.io.formats.warc.warc_splits`); a whole-file gzip stays one task.
* **Compressed files** (``.gz``, ``.zst``) are one stream that can only be read from the
  start: they stay one task, whatever their size. So do ``txt`` files read per paragraph
  or per file, files of a source whose ``encoding`` is not UTF-8 (decoding is decided
  per file), HTML pages, and files of a format that does not split.

Splits of a file get task ids ``<file task id>-<split:06d>``, which sort in file order;
a file that fits one split keeps its file task id.
"""

from __future__ import annotations

from collections.abc import Sequence

from dataforge.io.formats.base import COMPRESSED_SUFFIXES
from dataforge.io.formats.registry import input_format
from dataforge.io.input_config import InputConfig
from dataforge.io.tasks import InputTask

__all__ = [
    "COMPRESSED_SUFFIXES",
    "estimated_task_count",
    "split_input_tasks",
    "split_summary",
    "split_task",
    "unsplittable_reason",
]


def unsplittable_reason(task: InputTask, source: InputConfig) -> str | None:
    """Why this file can only be one task (None: it can be split)."""
    return input_format(source.format).unsplittable_reason(task, source)


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
    return input_format(source.format).split(task, source, split_bytes)


def estimated_task_count(task: InputTask, source: InputConfig, split_bytes: int | None) -> int:
    """Tasks this file will become, without reading it (``validate``'s summary)."""
    if split_bytes is None or task.bytes <= split_bytes or unsplittable_reason(task, source):
        return 1
    return input_format(source.format).estimated_splits(task, split_bytes)


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
