"""``format: txt``: plain text, one document per line (``txt_unit: line``, split like any
line file), per blank-line-separated paragraph (``paragraph``) or per file (``file``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from dataforge.io.formats.base import COMPRESSED_SUFFIXES, RowReader, Source
from dataforge.io.formats.lines import LineFormat
from dataforge.io.streams import open_binary

if TYPE_CHECKING:
    from dataforge.io.tasks import InputTask

__all__ = ["TxtFormat"]


class TxtFormat(LineFormat):
    name = "txt"
    suffixes = (".txt",)
    keyed = False

    def unsplittable_reason(self, task: InputTask, source: Source) -> str | None:
        if source.txt_unit != "line" and not task.path.endswith(COMPRESSED_SUFFIXES):
            return f"txt_unit: {source.txt_unit}"
        return super().unsplittable_reason(task, source)

    def line_row(self, reader: RowReader, row: dict[str, Any], line: str) -> dict[str, Any]:
        return reader.with_text(row, line)

    def rows(self, reader: RowReader) -> Iterator[dict[str, Any]]:
        unit = reader.source.txt_unit
        if unit == "file":
            return _file_row(reader)
        if unit == "paragraph":
            return _paragraph_rows(reader)
        return super().rows(reader)


def _file_row(reader: RowReader) -> Iterator[dict[str, Any]]:
    max_chars = reader.read.max_doc_chars
    with open_binary(reader.task.path) as raw:
        data = reader.open_text(raw).read(max_chars + 1)
    row = reader.new_row("0")
    if len(data) > max_chars:
        row["drop"] = "too_long"
        yield reader.finish_row(row)
        return
    text, bad = reader.repaired(data)
    if bad:
        row["drop"] = bad
        yield reader.finish_row(row)
        return
    yield reader.finish_row(reader.with_text(row, text))


def _paragraph_rows(reader: RowReader) -> Iterator[dict[str, Any]]:
    para: list[str] = []
    start = 0
    for lineno, line, too_long in reader.lines():
        if too_long:
            if para:
                yield reader.line_row(start, "\n".join(para), False)
                para = []
            yield reader.line_row(lineno, "", True)
        elif line.strip():
            if not para:
                start = lineno
            para.append(line)
        elif para:
            yield reader.line_row(start, "\n".join(para), False)
            para = []
    if para:
        yield reader.line_row(start, "\n".join(para), False)
