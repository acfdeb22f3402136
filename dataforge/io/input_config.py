"""What a reader needs to know about one input source, and reader limits.

Part of the pipeline YAML (``inputs:`` and ``read:``), defined here, next to the readers
that use them, so that ``io`` depends on no higher layer; :mod:`dataforge.config` builds
them from YAML with the rest of the pipeline.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from dataforge.io.decoding import check_encoding
from dataforge.io.formats.registry import FORMATS
from dataforge.typed_config import check_choices, check_range, choice_field

__all__ = ["INPUT_FORMATS", "MIN_SPLIT_BYTES", "InputConfig", "ReadConfig"]

INPUT_FORMATS: tuple[str, ...] = tuple(FORMATS)
"""The formats this package registers (:data:`dataforge.io.formats.registry.FORMATS`)."""
MIN_SPLIT_BYTES = 1024


def _is_folder_name(name: str) -> bool:
    return name not in ("", ".", "..") and not any(c in "/\\" or not c.isprintable() for c in name)


@dataclasses.dataclass(frozen=True)
class InputConfig:
    """One named source."""

    name: str
    path: str
    """File path or glob; relative paths resolve against the pipeline file's directory."""
    format: str = choice_field("jsonl", lambda: FORMATS)
    """A name in :data:`dataforge.io.formats.registry.FORMATS`. ``jsonl`` also reads
    ``.jsonl.gz`` and ``.jsonl.zst`` (by suffix); ``warc``, ``wet`` and ``html``: web pages
    (:mod:`dataforge.io.formats.warc`)."""
    lang: str = "en"
    text_key: str = "text"
    id_key: str | None = None
    """Key holding a stable id; None derives ``<source>/<relpath>:<line>``."""
    meta_keys: tuple[str, ...] = ()
    """Input keys copied into the record's ``meta``."""
    txt_unit: Literal["line", "file", "paragraph"] = "line"
    """For ``txt``: one document per line, per file, or per blank-line-separated paragraph."""
    encoding: str = "utf-8"
    """jsonl/txt bytes: ``utf-8``, ``auto`` (decided per file: BOM, strict UTF-8, then a
    detector preferring GB18030), or a codec name (``gb18030``, ``big5``, ``utf-16``...).
    A byte-order mark always wins. See :mod:`dataforge.io.decoding`."""

    def __post_init__(self) -> None:
        if not _is_folder_name(self.name):
            raise ValueError(
                f"name={self.name!r}: a source name is an id prefix and a folder name "
                "(output.split_by_source): non-empty, not '.' or '..', without '/', '\\' "
                "or control characters"
            )
        check_choices(self)
        check_encoding(self.encoding)
        FORMATS[self.format].check_source(self)


MAX_BATCH_ROWS = 1 << 22
MAX_DOC_CHARS = 1 << 28  # a jsonl line may hold 12x this (worst JSON escaping)


@dataclasses.dataclass(frozen=True)
class ReadConfig:
    """Reader limits shared by all sources."""

    batch_rows: int = 1000
    """Records per batch handed to the ops."""
    max_doc_chars: int = 1_000_000
    """Longer documents are dropped with reason ``too_long`` without being held in memory."""
    invalid_utf8: Literal["replace", "drop"] = "replace"
    """``replace``: U+FFFD and count ``invalid_utf8_replaced``; ``drop``: reason ``invalid_utf8``."""
    split_bytes: int | None = 128 << 20
    """Uncompressed JSONL/txt files larger than this are split into tasks of about this
    many bytes at line boundaries, parquet files by row groups; null: one task per file.
    Compressed files are always one task. The output does not depend on it."""

    def __post_init__(self) -> None:
        check_range("read.batch_rows", self.batch_rows, 1, MAX_BATCH_ROWS)
        check_range("read.max_doc_chars", self.max_doc_chars, 1, MAX_DOC_CHARS)
        # null: no splits (one task per file)
        check_range("read.split_bytes", self.split_bytes, MIN_SPLIT_BYTES)
        check_choices(self)
