"""``iter_documents``: the usable documents of a path or glob, through the pipeline's readers.

What ``lm train`` and ``tokenizer train`` read. Files are found and named by
:mod:`dataforge.io.files` (the same rule as a pipeline's inputs), their format follows the
suffix (a format's ``suffixes``), and each file is read by the pipeline's own :class:`~dataforge.io.readers.TaskReader`,
so ids and repairs (invalid UTF-8, lone surrogates) match a ``dataforge run`` of the same
files. Records the reader would drop (malformed, empty, missing text or id) are skipped.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc

from dataforge.io.files import match_files
from dataforge.io.formats.registry import FORMATS, format_for_suffix
from dataforge.io.input_config import InputConfig, ReadConfig
from dataforge.io.readers import InputTask, TaskReader

__all__ = ["iter_documents"]


def iter_documents(
    pattern: str,
    *,
    source: str,
    text_key: str = "text",
    id_key: str | None = "id",
    batch_rows: int = 1000,
) -> Iterator[pa.Table]:
    """Yield batches (columns ``id``, ``text``) of the usable documents under ``pattern``.

    Args:
        pattern: a file path or a (recursive) glob.
        source: the id prefix: ids are ``<source>/<id>``, or ``<source>/<relpath>:<line>``
            without ``id_key`` (and always for ``.txt``, which has no keys).
        text_key: JSON / parquet key of the text.
        id_key: key of a stable id, or None to derive ids from the file and line.
        batch_rows: records read per batch (before the unusable ones are removed).

    Raises:
        FileNotFoundError: nothing matches ``pattern``.
        ValueError: a matched file has an unknown suffix.
        dataforge.io.readers.ReadError: a file is corrupt or truncated.
    """
    files = match_files(pattern)
    formats = [format_for_suffix(f.path) for f in files]  # all checked before any reading
    read = ReadConfig(batch_rows=batch_rows)
    for file, fmt in zip(files, formats, strict=True):
        config = InputConfig(
            name=source,
            path=file.path,
            format=fmt,
            text_key=text_key,
            id_key=id_key if FORMATS[fmt].keyed else None,
        )
        task = InputTask(
            task_id=file.relpath,
            source=source,
            path=file.path,
            relpath=file.relpath,
            bytes=file.bytes,
        )
        for batch in TaskReader(task, config, read).batches():
            usable = batch.filter(pc.is_null(batch.column("drop")))
            if usable.num_rows:
                yield usable.select(["id", "text"])
