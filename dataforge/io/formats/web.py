"""What the web formats (``warc``, ``wet``, ``html``) share: the ``warc:malformed`` row of
bytes that cannot be trusted, and a page decoded with its event counted."""

from __future__ import annotations

from typing import Any

from dataforge.io.formats.base import RowReader
from dataforge.io.web_pages import decode_page

__all__ = ["MALFORMED", "decoded_page", "malformed_row"]

MALFORMED = "warc:malformed"


def malformed_row(reader: RowReader, number: int, kind: str) -> dict[str, Any]:
    """The ``warc:malformed`` row at record ``number``, counting ``warc_malformed:<kind>``."""
    reader.events[f"warc_malformed:{kind}"] += 1
    return reader.finish_row(reader.new_row(str(number), drop=MALFORMED))


def decoded_page(
    reader: RowReader, body: bytes, content_type: str | None
) -> tuple[str, str] | None:
    """(text, charset) of a page (:func:`~dataforge.io.web_pages.decode_page`); a page
    decoded with U+FFFD counts the event ``charset_replaced``; None: no codec can be
    decided (``invalid_encoding``)."""
    decoded = decode_page(body, content_type, reader.source.encoding)
    if decoded is not None and decoded[1].endswith(":replaced"):
        reader.events["charset_replaced"] += 1
    return decoded
