"""What an input format decides: which file names imply it, how a file splits into tasks,
and how a task's bytes become rows.

A format reads through the public hook of :class:`~dataforge.io.readers.TaskReader`
(``new_row``, ``with_text``, ``finish_row``, ``row_batches``, ``lines``...), which keeps
what every format shares: ids, the ``drop`` accounting, decoding, duplicate ids. A new
format is a subclass in its own module and one line in
:data:`dataforge.io.formats.registry.FORMATS`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, ClassVar

import pyarrow as pa

from dataforge.io.tasks import InputTask

if TYPE_CHECKING:  # the reader drives a format; a format only calls the reader's hook
    from dataforge.io.input_config import InputConfig, ReadConfig
    from dataforge.io.readers import TaskReader

__all__ = ["COMPRESSED_SUFFIXES", "InputFormat", "ReadError"]

COMPRESSED_SUFFIXES = (".gz", ".zst", ".zstd")
"""Suffixes of files that are one compressed stream, read only from its start."""


class ReadError(RuntimeError):
    """An input file that cannot be read to the end (truncated or corrupt stream)."""


class InputFormat:
    """One ``inputs[].format``. Subclasses set ``name`` and write :meth:`rows` (or
    :meth:`batches`); the defaults read a file as one task."""

    name: ClassVar[str]
    suffixes: ClassVar[tuple[str, ...]] = ()
    """File name suffixes (lower case) that imply this format where no config names one
    (``lm train``, ``tokenizer train``); empty: never implied."""
    keyed: ClassVar[bool] = True
    """Whether records have keys (``text_key``, ``id_key``, ``meta_keys`` apply)."""

    def check_source(self, source: InputConfig) -> None:
        """Rules between this format and the source's other keys (``ValueError``)."""

    def line_limit(self, read: ReadConfig) -> int:
        """Characters of a line read at once (longer lines are ``too_long``)."""
        return read.max_doc_chars + 2

    def unsplittable_reason(self, task: InputTask, source: InputConfig) -> str | None:
        """Why this file can only be one task (None: :meth:`split` may cut it)."""
        return f"format: {self.name} (read whole)"

    def split(self, task: InputTask, source: InputConfig, split_bytes: int) -> list[InputTask]:
        """The splits of a file larger than ``split_bytes`` that may be split."""
        return [task]

    def estimated_splits(self, task: InputTask, split_bytes: int) -> int:
        """Tasks a splittable file becomes, without reading it (``validate``'s summary)."""
        return -(-task.bytes // split_bytes)

    def batches(self, reader: TaskReader) -> Iterator[pa.Table]:
        """The task's rows in batches (:meth:`rows`, batched by the reader)."""
        return reader.row_batches(self.rows(reader))

    def rows(self, reader: TaskReader) -> Iterator[dict[str, Any]]:
        """One row per physical record, each built by ``reader.new_row`` and passed
        through ``reader.finish_row``."""
        raise NotImplementedError(f"format {self.name!r} writes rows() or batches()")

    def line_row(self, reader: TaskReader, row: dict[str, Any], line: str) -> dict[str, Any]:
        """The row of one line (its bytes already repaired) for line formats."""
        raise NotImplementedError(f"format {self.name!r} is not read by lines")
