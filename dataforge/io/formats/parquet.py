"""``format: parquet``: a row per table row, its ``text_key`` (and ``id_key``,
``meta_keys``) columns read; files split by row groups (consecutive groups up to about
``split_bytes`` of compressed column data, rows numbered from the rows of the groups
before)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow.parquet as pq

from dataforge.io.formats.base import COMPRESSED_SUFFIXES, InputFormat, ReadError, RowReader, Source
from dataforge.io.formats.lines import named_split
from dataforge.io.fs import open_input_file
from dataforge.io.tasks import InputTask

__all__ = ["ParquetFormat"]


class ParquetFormat(InputFormat):
    name = "parquet"
    suffixes = (".parquet",)

    def check_source(self, source: Source) -> None:
        if source.encoding != "utf-8":
            raise ValueError(
                f"encoding {source.encoding!r} applies to jsonl and txt; parquet strings are UTF-8"
            )

    def unsplittable_reason(self, task: InputTask, source: Source) -> str | None:
        return "compressed single stream" if task.path.endswith(COMPRESSED_SUFFIXES) else None

    def split(self, task: InputTask, source: Source, split_bytes: int) -> list[InputTask]:
        return _parquet_splits(task, split_bytes)

    def estimated_splits(self, task: InputTask, split_bytes: int) -> int:
        return len(_parquet_splits(task, split_bytes))

    def rows(self, reader: RowReader) -> Iterator[dict[str, Any]]:
        source, task = reader.source, reader.task
        pf = pq.ParquetFile(open_input_file(task.path))
        names = set(pf.schema_arrow.names)
        wanted = [source.text_key]
        if source.id_key:
            wanted.append(source.id_key)
        wanted += [k for k in source.meta_keys if k in names]
        missing = [k for k in wanted if k not in names]
        if missing:
            raise ReadError(
                f"{task.path}: parquet file has no column(s) {missing}; columns: {sorted(names)}"
            )
        index = task.first_record
        batches = pf.iter_batches(
            batch_size=reader.read.batch_rows,
            columns=sorted(set(wanted)),
            row_groups=task.row_groups,
        )
        for batch in batches:
            for obj in batch.to_pylist():
                row = reader.new_row(str(index))
                index += 1
                yield reader.finish_row(_object_row(reader, row, obj))


def _object_row(reader: RowReader, row: dict[str, Any], obj: dict[str, Any]) -> dict[str, Any]:
    text = obj.get(reader.source.text_key)
    if isinstance(text, str):
        obj[reader.source.text_key], bad = reader.repaired(text)
        if bad:
            row["drop"] = bad
            return row
    return reader.object_row(row, obj)


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
        splits.append(named_split(task, k, row_groups=tuple(group), first_record=rows))
        rows += sum(meta.row_group(i).num_rows for i in group)
    return splits
