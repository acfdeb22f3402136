"""``format: wet``: the ``conversion`` records of a WET file (Common Crawl's extracted
text, UTF-8) become rows of plain text; other record types are dropped as for WARC, whose
reader (:mod:`dataforge.io.formats.warc`: splits, damage, bounded memory) this is."""

from __future__ import annotations

from typing import Any

from dataforge.io.formats.base import RowReader
from dataforge.io.formats.warc import WarcFormat, record_type_drop

__all__ = ["WetFormat"]


class WetFormat(WarcFormat):
    name = "wet"
    record_type = "conversion"

    def early_drop(self, record: Any) -> str | None:
        return record_type_drop(record, self.record_type)

    def page(self, reader: RowReader, record: Any, body: bytes) -> tuple[str, dict] | None:
        return body.decode("utf-8", errors="replace"), {"charset": "utf-8", "content": "text"}
