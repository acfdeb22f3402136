"""``format: html``: every file is one page (``.html``/``.htm``, optionally ``.gz``), its
decoded HTML the row's text (``meta.content: html``, for ``extract``), ``meta.url`` the
page's canonical link when it has one. A cut or corrupt ``.gz`` page is one
``warc:malformed`` row."""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from dataforge.io.formats.base import InputFormat, RowReader, Source
from dataforge.io.formats.web import decoded_page, malformed_row
from dataforge.io.streams import open_binary
from dataforge.io.web_pages import canonical_url

if TYPE_CHECKING:
    from dataforge.io.tasks import InputTask

__all__ = ["HtmlFormat"]


class HtmlFormat(InputFormat):
    name = "html"

    def unsplittable_reason(self, task: InputTask, source: Source) -> str | None:
        return "format: html (one page per file)"

    def rows(self, reader: RowReader) -> Iterator[dict[str, Any]]:
        max_bytes = reader.read.max_doc_chars * 4
        try:
            with open_binary(reader.task.path) as raw:
                body = raw.read(max_bytes + 1)
        except (EOFError, gzip.BadGzipFile, zlib.error) as exc:  # a cut or corrupt .gz page
            yield malformed_row(reader, 0, type(exc).__name__)
            return
        row = reader.new_row("0")
        if len(body) > max_bytes:
            row["drop"] = "too_long"
            yield reader.finish_row(row)
            return
        yield reader.finish_row(_page_row(reader, row, body))


def _page_row(reader: RowReader, row: dict[str, Any], body: bytes) -> dict[str, Any]:
    decoded = decoded_page(reader, body, None)
    if decoded is None:
        row["drop"] = "invalid_encoding"
        return row
    text, charset = decoded
    meta: dict[str, Any] = {"charset": charset, "content": "html", "path": reader.task.relpath}
    url = canonical_url(text)
    if url is not None:
        meta["url"] = url
    row["meta"] = json.dumps(meta, ensure_ascii=False, sort_keys=True)
    return reader.with_text(row, text)
