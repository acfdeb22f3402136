"""Text cleaning over Arrow string arrays: Unicode, markup and whitespace normalization.

Per string, in this order:

1. Line endings ``\\r\\n``, ``\\r``, VT, FF, NEL, U+2028/2029 become ``\\n``.
2. Control characters (C0 except ``\\t``/``\\n``, DEL, C1, U+FFFE/FFFF; NUL included) are
   removed; so are invisible format characters (zero-width space/joiners, word joiner,
   BOM, soft hyphen, bidi marks and embeddings) when ``remove_invisible``.
3. Unicode normalization (``normalization``, NFKC by default: full-width ASCII becomes
   half-width, ``…`` becomes ``...``, ligatures split; note that it also turns Chinese
   full-width punctuation ``，：（）`` into ASCII ``,:()`` while ``。、“”`` stay).
   ``fullwidth_to_halfwidth`` applies the full-width ASCII mapping (U+FF01..FF5E and
   U+3000) on its own, which matters only with a form that does not already do it.
4. U+FFFD (what a reader puts for invalid UTF-8 and lone surrogates, see
   :func:`dataforge.text.surrogates.replace_lone_surrogates`) is handled by ``invalid_utf8``.
5. HTML: comments, ``<script>``/``<style>`` blocks and tags of real HTML elements are
   removed (block-level tags become a line break), entities with a ``;`` are decoded.
   Only known element names count as tags, so ``<value>`` or ``a<b`` in prose survive.
6. URLs and e-mail addresses are replaced by ``url_replacement`` / ``email_replacement``
   when ``remove_urls`` / ``remove_emails``.
7. Whitespace: Unicode spaces become ASCII spaces, line ends are stripped, runs of spaces
   collapse to one (indentation kept when ``keep_indentation``), at most
   ``max_blank_lines`` consecutive blank lines, and the text is trimmed.

8. Script conversion when ``convert`` names an OpenCC config (``t2s``, ``s2t``, ``tw2s``,
   ``hk2s``...; :func:`dataforge.text.script.convert_script`): phrase-level Traditional
   <-> Simplified conversion, last (it maps characters to characters and never touches
   whitespace or markup).

Steps 1-6 repeat on the records that steps 5-6 changed, because decoding ``&amp;lt;`` or
removing a tag can reveal new markup; the op is therefore idempotent:
``clean(clean(x)) == clean(x)``. Every step is an Arrow compute kernel over the whole
column except entity decoding and the non-NFKC full-width mapping, which run in Python
only on the rows that need them.
"""

from __future__ import annotations

import dataclasses
import functools
import html
import re

import pyarrow as pa
import pyarrow.compute as pc

from dataforge.text.script import check_conversion, convert_script

__all__ = ["CleanConfig", "REPLACEMENT_CHAR", "clean_text"]

NORMALIZATION_FORMS = ("NFKC", "NFC", "NFKD", "NFD", "none")
INVALID_UTF8_POLICIES = ("remove", "replace", "drop")
REPLACEMENT_CHAR = "\ufffd"

_LINE_BREAKS = r"\r\n?|[\x0b\x0c\x{85}\x{2028}\x{2029}]"
_CONTROL = r"[\x00-\x08\x0e-\x1f\x7f-\x{9f}\x{FFFE}\x{FFFF}]"
_INVISIBLE = (
    r"[\x{AD}\x{180E}\x{200B}-\x{200F}\x{202A}-\x{202E}\x{2060}-\x{2064}\x{2066}-\x{2069}\x{FEFF}]"
)
# Every character the three passes above rewrite, as one class: rows without any skip them.
_NORMALIZE_GUARD = (
    r"[\r\x0b\x0c\x{85}\x{2028}\x{2029}"  # _LINE_BREAKS
    + _CONTROL[1:-1]
    + _INVISIBLE[1:-1]
    + "]"
)
_FULLWIDTH = r"[\x{FF01}-\x{FF5E}\x{3000}]"
_FULLWIDTH_TABLE = {0xFF01 + i: 0x21 + i for i in range(0x5E)} | {0x3000: 0x20}
_UNICODE_SPACES = r"[\x{A0}\x{1680}\x{2000}-\x{200A}\x{202F}\x{205F}\x{3000}]"

_BLOCK_TAGS = (
    "address|article|aside|blockquote|br|dd|details|div|dl|dt|figcaption|figure|footer|form|"
    "h[1-6]|header|hr|li|main|nav|ol|p|pre|section|summary|table|tbody|td|tfoot|th|thead|tr|ul"
)
_INLINE_TAGS = (
    "a|abbr|area|audio|b|base|bdi|bdo|body|button|canvas|caption|center|cite|code|col|"
    "colgroup|data|datalist|del|dfn|dialog|em|embed|fieldset|font|frame|frameset|head|html|"
    "i|iframe|img|input|ins|kbd|label|legend|link|map|mark|meta|meter|noscript|object|"
    "optgroup|option|output|param|path|picture|progress|q|rp|rt|ruby|s|samp|select|small|"
    "source|span|strike|strong|sub|sup|svg|template|textarea|time|title|track|tt|u|var|"
    "video|wbr"
)
_TAG_TAIL = r"(?:\s[^<>]*)?/?>"
_HTML_RULES = (
    (r"(?s)<!--.*?-->", ""),
    (r"(?is)<script\b[^>]*>.*?</script\s*>", ""),
    (r"(?is)<style\b[^>]*>.*?</style\s*>", ""),
    (rf"(?i)</?(?:{_BLOCK_TAGS}){_TAG_TAIL}", "\n"),
    (rf"(?i)</?(?:{_INLINE_TAGS}){_TAG_TAIL}", ""),
)
_ENTITY = r"&(?:#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});"
_ENTITY_RE = re.compile(_ENTITY)
_URL = (
    r"(?i)\b(?:https?://|ftp://|www\.)[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]*"
    r"[A-Za-z0-9\-_~/#@$&*+=%]"
)
_EMAIL = r"\b[A-Za-z0-9._%+\-]+@[A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)*\.[A-Za-z]{2,}\b"
_MAX_ROUNDS = 8


def _replace(arr: pa.Array, pattern: str, replacement: str) -> pa.Array:
    return pc.replace_substring_regex(arr, pattern=pattern, replacement=replacement)


def _on_rows(arr: pa.Array, guard: str, fn) -> pa.Array:
    """``fn(arr)`` computed only for the rows that match regex ``guard`` (what every row
    ``fn`` changes matches): on most batches a cheap match pass instead of several
    rewriting passes over every row."""
    mask = pc.match_substring_regex(arr, pattern=guard)
    hits = pc.sum(mask).as_py() or 0
    if hits == 0:
        return arr
    if hits == len(arr):
        return fn(arr)
    return pc.replace_with_mask(arr, mask, fn(arr.filter(mask)))


def _map_rows(arr: pa.Array, pattern: str, fn) -> pa.Array:
    """Apply a Python ``fn`` only to the rows matching ``pattern``."""
    mask = pc.match_substring_regex(arr, pattern=pattern)
    if not pc.any(mask).as_py():
        return arr
    values = [fn(s) for s in arr.filter(mask).to_pylist()]
    return pc.replace_with_mask(arr, mask, pa.array(values, pa.string()))


def _decode_entities(text: str) -> str:
    return _ENTITY_RE.sub(lambda m: html.unescape(m.group(0)), text)


@dataclasses.dataclass(frozen=True)
class CleanConfig:
    """Settings of :func:`clean_text` (the ``clean`` op's parameters)."""

    normalization: str = "NFKC"
    """Unicode normalization form: NFKC, NFC, NFKD, NFD or none."""
    fullwidth_to_halfwidth: bool = True
    """Map full-width ASCII (U+FF01..FF5E) and the ideographic space to ASCII."""
    remove_invisible: bool = True
    """Remove zero-width and other invisible format characters (ZWSP, ZWJ, BOM...)."""
    invalid_utf8: str = "remove"
    """U+FFFD handling: remove (delete, count), replace (keep, count), drop (reason)."""
    strip_html: bool = True
    """Remove HTML comments, script/style blocks and tags; decode HTML entities."""
    remove_urls: bool = False
    """Replace http(s)/ftp/www URLs with ``url_replacement``."""
    url_replacement: str = ""
    """What a removed URL becomes (e.g. ``"[URL]"``); must not itself look like one."""
    remove_emails: bool = False
    """Replace e-mail addresses with ``email_replacement``."""
    email_replacement: str = ""
    """What a removed e-mail address becomes; must not itself look like one."""
    normalize_whitespace: bool = True
    """Strip line ends, collapse space runs, limit blank lines, trim the text."""
    keep_indentation: bool = True
    """When collapsing spaces, keep leading indentation (code, tables)."""
    max_blank_lines: int = 1
    """Most consecutive blank lines kept (0: none) when normalizing whitespace."""
    convert: str | None = None
    """OpenCC script conversion (``t2s``, ``s2t``, ``tw2s``, ``hk2s``, ``s2tw``...); null: none."""

    def __post_init__(self) -> None:
        if self.normalization not in NORMALIZATION_FORMS:
            raise ValueError(
                f"clean.normalization={self.normalization!r}; valid: {', '.join(NORMALIZATION_FORMS)}"
            )
        if self.invalid_utf8 not in INVALID_UTF8_POLICIES:
            raise ValueError(
                f"clean.invalid_utf8={self.invalid_utf8!r}; valid: {', '.join(INVALID_UTF8_POLICIES)}"
            )
        if self.convert is not None:
            check_conversion(self.convert)
        if not isinstance(self.max_blank_lines, int) or self.max_blank_lines < 0:
            raise ValueError(f"clean.max_blank_lines={self.max_blank_lines!r}; must be an int >= 0")
        for field, pattern in (("url_replacement", _URL), ("email_replacement", _EMAIL)):
            value = getattr(self, field)
            if not isinstance(value, str):
                raise ValueError(f"clean.{field}={value!r}; must be a string")
            if re.search(pattern.removeprefix("(?i)"), value, re.IGNORECASE):
                raise ValueError(f"clean.{field}={value!r} would itself be removed")


def clean_text(text: pa.Array, config: CleanConfig) -> pa.Array:
    """Clean a string array (no nulls); the whole pipeline of the module docstring."""
    text = _normalize(text, config)
    rewritten = _strip_markup(text, config)
    for _ in range(_MAX_ROUNDS):
        changed = pc.not_equal(rewritten, text)
        if not pc.any(changed).as_py():
            break
        # Decoding or removing markup can reveal new markup or unnormalized text.
        again = _strip_markup(_normalize(rewritten.filter(changed), config), config)
        text = rewritten
        rewritten = pc.replace_with_mask(rewritten, changed, again)
    if config.normalize_whitespace:
        rewritten = _tidy_whitespace(rewritten, config)
    if config.convert is not None:
        rewritten = convert_script(rewritten, config.convert)
    return rewritten


def _normalize(text: pa.Array, cfg: CleanConfig) -> pa.Array:
    text = _on_rows(text, _NORMALIZE_GUARD, functools.partial(_breaks_and_controls, cfg=cfg))
    # Before normalization, so that "Ａ" + U+0300 composes like "A" + U+0300 under NFC.
    if cfg.fullwidth_to_halfwidth and cfg.normalization not in ("NFKC", "NFKD"):
        text = _map_rows(text, _FULLWIDTH, lambda s: s.translate(_FULLWIDTH_TABLE))
    if cfg.normalization != "none":
        text = pc.utf8_normalize(text, form=cfg.normalization)
    if cfg.invalid_utf8 == "remove":
        text = pc.replace_substring(text, REPLACEMENT_CHAR, "")
    return text


def _breaks_and_controls(text: pa.Array, cfg: CleanConfig) -> pa.Array:
    text = _replace(text, _LINE_BREAKS, "\n")
    text = _replace(text, _CONTROL, "")
    if cfg.remove_invisible:
        text = _replace(text, _INVISIBLE, "")
    return text


def _strip_markup(text: pa.Array, cfg: CleanConfig) -> pa.Array:
    if cfg.strip_html:
        for pattern, replacement in _HTML_RULES:
            text = _replace(text, pattern, replacement)
        text = _map_rows(text, _ENTITY, _decode_entities)
    if cfg.remove_urls:
        text = _replace(text, _URL, cfg.url_replacement.replace("\\", "\\\\"))
    if cfg.remove_emails:
        text = _replace(text, _EMAIL, cfg.email_replacement.replace("\\", "\\\\"))
    return text


def _tidy_whitespace(text: pa.Array, cfg: CleanConfig) -> pa.Array:
    # What every rewrite below needs in a row: a Unicode space, a line end after a blank,
    # two spaces, or one blank line more than kept.
    keep = cfg.max_blank_lines + 1
    guard = "|".join((_UNICODE_SPACES, r"[ \t]\n", "  ", "\n" * (keep + 1)))
    text = _on_rows(text, guard, functools.partial(_rewrite_spaces, cfg=cfg))
    return pc.utf8_trim(text, characters=" \t\n")


def _rewrite_spaces(text: pa.Array, cfg: CleanConfig) -> pa.Array:
    text = _replace(text, _UNICODE_SPACES, " ")
    text = _replace(text, r"[ \t]+\n", "\n")
    if cfg.keep_indentation:
        text = _replace(text, r"([^ \t\n])  +", r"\1 ")
    else:
        text = _replace(text, r"  +", " ")
    keep = cfg.max_blank_lines + 1
    return _replace(text, f"\n{{{keep + 1},}}", "\n" * keep)
