"""One HTML page's bytes -> its text (the charset decided as below) and its canonical URL.

A page is decoded by, in order: its byte-order mark; the charset of its HTTP
``Content-Type`` header; its ``<meta>`` charset; the source's ``encoding`` (``auto``:
:func:`dataforge.io.decoding.decide_encoding`). The first that decodes the bytes
strictly wins (GBK and GB2312 read as GB18030, Big5 as CP950, their supersets). When none
does, the last one decodes with U+FFFD (the codec then reads ``<codec>:replaced``); a
page no codec can be decided for is undecidable (None).

A declared label counts only when the WHATWG Encoding Standard lists it (the labels
browsers know, by resiliparse's table): ``rot13``, ``base64``, ``zlib``, ``undefined``,
``unicode_escape``, ``utf-7`` and other names Python or a server may know are ignored.
A UTF-16 or UTF-32 label counts only through the BOM that starts such a page (a page
whose markup the label was read from in ASCII is not UTF-16), as browsers do. A counted
label decodes with Python's codec of that name, or the standard's where Python has none.
"""

from __future__ import annotations

import codecs
import functools
import html
import re

from resiliparse.parse.encoding import map_encoding_to_html5

from dataforge.io.decoding import decide_encoding
from dataforge.text.surrogates import has_surrogates, replace_lone_surrogates

__all__ = ["canonical_url", "decode_page"]

_META_SCAN_BYTES = 4096
_CANONICAL_SCAN_CHARS = 65536
# [^<>] keeps every scan inside one tag, so each pattern is linear in the page.
_CHARSET_PARAM = re.compile(r"charset\s*=\s*[\"']?([A-Za-z0-9_.:-]{1,40})", re.IGNORECASE)
_META_CHARSET = re.compile(
    rb"<meta\b[^<>]*?charset\s*=\s*[\"']?\s*([A-Za-z0-9_.:-]{1,40})", re.IGNORECASE
)
_LINK_TAG = re.compile(r"<link\b[^<>]*+", re.IGNORECASE)
# name, then an optional value: every branch ends without backtracking into the name
_ATTRIBUTE = re.compile(r"""([^\s"'<>/=]++)(?:\s*+=\s*+("[^"]*+"?|'[^']*+'?|[^\s>]*+))?""")
# Labels pages use for a codec whose superset decodes the same bytes and more.
_SUPERSETS = {"gb2312": "gb18030", "gbk": "gb18030", "big5": "cp950"}
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),  # before UTF-16 LE, whose BOM starts it
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)


def _text_codec(name: str) -> str | None:
    """Python's canonical name of a text codec (None: unknown, or bytes to bytes)."""
    try:
        "".encode(name)  # LookupError for bytes codecs (base64, zlib) and unknown names
        return codecs.lookup(name).name
    except LookupError:
        return None


@functools.lru_cache(maxsize=1024)
def declared_codec(label: str | None) -> str | None:
    """The codec a page's charset label stands for (see the module docstring); None: the
    label does not count."""
    if not label:
        return None
    label = label.strip().lower()
    standard = map_encoding_to_html5(label, fallback_utf8=False)
    if standard is None:
        return None
    name = _text_codec(label) or _text_codec(standard)
    if name is None or name.startswith(("utf-16", "utf-32")):
        return None
    return _SUPERSETS.get(name, name)


def _decoded(body: bytes, codec: str, errors: str = "strict") -> str | None:
    try:
        text = body.decode(codec, errors)
    except (UnicodeError, LookupError):
        return None
    # a codec may decode to lone surrogates, which Arrow cannot hold
    return replace_lone_surrogates(text) if has_surrogates(text) else text


def decode_page(body: bytes, content_type: str | None, fallback: str) -> tuple[str, str] | None:
    """``(text, codec)`` of a page's bytes (see the module docstring); None: undecidable.

    Args:
        body: the page's bytes (transfer and content encodings already removed).
        content_type: the HTTP ``Content-Type`` header, if any.
        fallback: the source's ``encoding`` (``auto`` or a codec name).
    """
    bom = next((b for b in _BOMS if body.startswith(b[0])), None)
    header = _CHARSET_PARAM.search(content_type or "")
    meta = _META_CHARSET.search(body[:_META_SCAN_BYTES])
    declared = [
        declared_codec(header.group(1) if header else None),
        declared_codec(meta.group(1).decode("ascii") if meta else None),
    ]
    tried = list(dict.fromkeys(c for c in declared if c))
    if bom is not None:
        body, tried = body[len(bom[0]) :], [bom[1], *tried]
    for codec in tried:
        text = _decoded(body, codec)
        if text is not None:
            return text, codec
    last = _fallback_codec(body, fallback)  # only when no declared charset decodes
    if last is not None and last not in tried:
        text = _decoded(body, last)
        if text is not None:
            return text, last
        tried.append(last)
    for codec in reversed(tried):
        text = _decoded(body, codec, errors="replace")
        if text is not None:
            return text, f"{codec}:replaced"
    return None


def _fallback_codec(body: bytes, fallback: str) -> str | None:
    if fallback != "auto":
        name = _text_codec(fallback)
    else:
        decision = decide_encoding(body, "auto", at_eof=True)
        name = None if decision.undecodable else _text_codec(decision.encoding)
    return _SUPERSETS.get(name, name) if name else None


def canonical_url(page: str) -> str | None:
    """The ``href`` of the first ``<link rel="canonical">`` in the page's first 64K
    characters (entities unescaped); None if there is none."""
    for tag in _LINK_TAG.finditer(page, 0, _CANONICAL_SCAN_CHARS):
        rel, href = None, None
        for name, value in _ATTRIBUTE.findall(tag.group()):
            name = name.lower()
            if value[:1] in ("'", '"'):
                value = value[1:].removesuffix(value[0])
            if name == "rel" and rel is None:
                rel = value
            elif name == "href" and href is None:
                href = value
        if rel and href and "canonical" in rel.lower().split():
            return html.unescape(href)
    return None
