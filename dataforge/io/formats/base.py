"""What an input format decides: which file names imply it, how a file splits into tasks,
and how a task's bytes become rows.

A format reads through the public hook of :class:`~dataforge.io.readers.TaskReader`
(:class:`RowReader`: ``new_row``, ``with_text``, ``finish_row``, ``row_batches``...), which keeps
what every format shares: ids, the ``drop`` accounting, decoding, duplicate ids. A new
format is a subclass in its own module and one line in
:data:`dataforge.io.formats.registry.FORMATS`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any, BinaryIO, ClassVar, Protocol, TextIO

import pyarrow as pa

from dataforge.io.decoding import Decision
from dataforge.io.tasks import InputTask

__all__ = [
    "COMPRESSED_SUFFIXES",
    "InputFormat",
    "ReadError",
    "ReadLimits",
    "RowReader",
    "Source",
]

COMPRESSED_SUFFIXES = (".gz", ".zst", ".zstd")
"""Suffixes of files that are one compressed stream, read only from its start."""


class ReadError(RuntimeError):
    """An input file that cannot be read to the end (truncated or corrupt stream)."""


class Source(Protocol):
    """What a format reads of its ``inputs[]`` entry
    (:class:`~dataforge.io.input_config.InputConfig`, which validates ``format`` against
    the registry: formats see it through this protocol, so nothing imports in a circle)."""

    @property
    def name(self) -> str: ...
    @property
    def lang(self) -> str: ...
    @property
    def encoding(self) -> str: ...
    @property
    def text_key(self) -> str: ...
    @property
    def id_key(self) -> str | None: ...
    @property
    def meta_keys(self) -> tuple[str, ...]: ...
    @property
    def txt_unit(self) -> str: ...


class ReadLimits(Protocol):
    """What a format reads of ``read:`` (:class:`~dataforge.io.input_config.ReadConfig`)."""

    @property
    def batch_rows(self) -> int: ...
    @property
    def max_doc_chars(self) -> int: ...


class RowReader(Protocol):
    """The hook of :class:`~dataforge.io.readers.TaskReader` a format reads through."""

    task: InputTask
    source: Source
    read: ReadLimits
    events: Counter[str]
    decision: Decision | None

    def new_row(self, record_id: str, drop: str | None = None) -> dict[str, Any]: ...
    def with_text(self, row: dict[str, Any], text: str) -> dict[str, Any]: ...
    def object_row(self, row: dict[str, Any], obj: dict[str, Any]) -> dict[str, Any]: ...
    def finish_row(self, row: dict[str, Any]) -> dict[str, Any]: ...
    def repaired(self, text: str) -> tuple[str, str | None]: ...
    def open_text(self, raw: BinaryIO) -> TextIO: ...
    def line_limit(self) -> int: ...
    def lines(self) -> Iterator[tuple[int, str, bool]]: ...
    def lines_of(self, text: TextIO, lineno: int) -> Iterator[tuple[int, str, bool]]: ...
    def line_row(self, lineno: int, line: str, too_long: bool) -> dict[str, Any]: ...
    def row_batches(self, rows: Iterable[dict[str, Any]]) -> Iterator[pa.Table]: ...


class InputFormat:
    """One ``inputs[].format``. Subclasses set ``name`` and write :meth:`rows` (or
    :meth:`batches`); the defaults read a file as one task."""

    name: ClassVar[str]
    suffixes: ClassVar[tuple[str, ...]] = ()
    """File name suffixes (lower case) that imply this format where no config names one
    (``lm train``, ``tokenizer train``); empty: never implied."""
    keyed: ClassVar[bool] = True
    """Whether records have keys (``text_key``, ``id_key``, ``meta_keys`` apply)."""

    def check_source(self, source: Source) -> None:
        """Rules between this format and the source's other keys (``ValueError``)."""

    def line_limit(self, read: ReadLimits) -> int:
        """Characters of a line read at once (longer lines are ``too_long``)."""
        return read.max_doc_chars + 2

    def unsplittable_reason(self, task: InputTask, source: Source) -> str | None:
        """Why this file can only be one task (None: :meth:`split` may cut it)."""
        return f"format: {self.name} (read whole)"

    def split(self, task: InputTask, source: Source, split_bytes: int) -> list[InputTask]:
        """The splits of a file larger than ``split_bytes`` that may be split."""
        return [task]

    def estimated_splits(self, task: InputTask, split_bytes: int) -> int:
        """Tasks a splittable file becomes, without reading it (``validate``'s summary)."""
        return -(-task.bytes // split_bytes)

    def batches(self, reader: RowReader) -> Iterator[pa.Table]:
        """The task's rows in batches (:meth:`rows`, batched by the reader)."""
        return reader.row_batches(self.rows(reader))

    def rows(self, reader: RowReader) -> Iterator[dict[str, Any]]:
        """One row per physical record, each built by ``reader.new_row`` and passed
        through ``reader.finish_row``."""
        raise NotImplementedError(f"format {self.name!r} writes rows() or batches()")

    def line_row(self, reader: RowReader, row: dict[str, Any], line: str) -> dict[str, Any]:
        """The row of one line (its bytes already repaired) for line formats."""
        raise NotImplementedError(f"format {self.name!r} is not read by lines")
