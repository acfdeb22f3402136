"""Text from data, made safe to print: control characters shown, never obeyed.

Ids, texts, file names and drop reasons come from strangers' files. Printed raw, an ESC
starts a terminal sequence (``\\x1b[2J`` clears the screen, OSC 0 sets the window title, OSC
52 writes the clipboard), ``\\r`` overwrites what the line said, a C1 control (U+009B is a
one-character CSI) does the same on terminals that read 8-bit controls, and a bidi override
(U+202E) shows the characters after it in another order than they are stored. Each of these
is printed as its Python escape (``\\x1b``, ``\\r``, ``\\x9b``, ``\\u202e``), so the reader
sees it is there. A lone surrogate (a file name's byte that is not UTF-8, kept by
``surrogateescape``) is escaped too: a strict UTF-8 stream cannot encode it.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["printable", "printable_json"]


def _escapes() -> dict[int, str]:
    codes = [*range(0x20), 0x7F, *range(0x80, 0xA0)]  # C0, DEL, C1
    codes += [*range(0x202A, 0x202F), *range(0x2066, 0x206A)]  # bidi embeddings, overrides
    codes += [0x200E, 0x200F, 0x061C]  # bidi marks: reorder neutrals around them
    table = {c: (f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}") for c in codes}
    table.update({ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t"})
    table.update({c: f"\\u{c:04x}" for c in range(0xD800, 0xE000)})  # lone surrogates
    return table


_ONE_LINE = _escapes()
_BODY = {c: s for c, s in _ONE_LINE.items() if c not in (ord("\n"), ord("\t"))}
# json.dumps escapes C0 in strings itself (a raw \n in its output is indentation); each of
# the others may be written \uXXXX inside a JSON string: the same value, no raw control.
_JSON = {c: f"\\u{c:04x}" for c in _ONE_LINE if c >= 0x20}


def printable(text: object, multiline: bool = False) -> str:
    """``str(text)`` with every control character escaped (see the module docstring).

    Args:
        multiline: keep ``\\n`` and ``\\t`` (a document's body); otherwise they are escaped
            too, so the result is one line.
    """
    return str(text).translate(_BODY if multiline else _ONE_LINE)


def printable_json(value: Any, **dumps_kwargs: Any) -> str:
    """``json.dumps(value, ensure_ascii=False, ...)`` with no raw control character: each is
    written as its ``\\uXXXX`` escape, which JSON reads back as the same string."""
    return json.dumps(value, ensure_ascii=False, **dumps_kwargs).translate(_JSON)
