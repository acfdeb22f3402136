"""CCNet text normalization (``cc_net/text_normalizer.py::normalize``), batched.

CCNet normalizes each line before sentencepiece and KenLM, in this order:

1. strip surrounding whitespace (an empty line stays empty);
2. lowercase;
3. strip accents: NFD, then drop every combining mark (category ``Mn``);
4. every Unicode decimal digit (``\\d``: ASCII and e.g. fullwidth) becomes ``0``;
5. map unicode punctuation to ASCII (:data:`UNICODE_PUNCT`, CCNet's ``punct=1``);
6. remove non-printing characters U+0000..U+001F and U+007F..U+009F.

Steps 3 to 6 are per-character maps whose outputs are never inputs of a later step, so we
fold them into one code point lookup table (a digit wins over the punctuation map, as in
CCNet where ``１`` becomes ``0`` before punctuation is mapped). The batch is processed as
one ``"\\n"``-joined string: ``lower`` and NFD run once per batch in C, then the strip
and the table run in numpy over its UTF-32 code points; no Python loop per line or per
character. Like CCNet, the NFD output is not recomposed (Hangul syllables stay decomposed
into jamo).
"""

from __future__ import annotations

import functools
import sys
import unicodedata
from collections.abc import Sequence

import numpy as np

__all__ = [
    "NORMALIZATION",
    "UNICODE_PUNCT",
    "normalize_line",
    "normalize_lines",
    "normalize_documents",
]

NORMALIZATION = "ccnet-v1"
"""Recorded in model cards; bump when the rules change (old models then need retraining)."""

UNICODE_PUNCT: dict[str, str] = {
    "，": ",",
    "。": ".",
    "、": ",",
    "„": '"',
    "”": '"',
    "“": '"',
    "«": '"',
    "»": '"',
    "１": '"',
    "」": '"',
    "「": '"',
    "《": '"',
    "》": '"',
    "´": "'",
    "∶": ":",
    "：": ":",
    "？": "?",
    "！": "!",
    "（": "(",
    "）": ")",
    "；": ";",
    "–": "-",
    "—": " - ",
    "．": ". ",
    "～": "~",
    "’": "'",
    "…": "...",
    "━": "-",
    "〈": "<",
    "〉": ">",
    "【": "[",
    "】": "]",
    "％": "%",
    "►": "-",
}

_NON_PRINTING = [*range(0, 32), *range(127, 160)]
_NEWLINE = ord("\n")
_EXPANSIONS = {
    ord(k): np.array([ord(c) for c in v], np.uint32) for k, v in UNICODE_PUNCT.items() if len(v) > 1
}


@functools.cache  # ~0.5 s to scan all code points: paid on first use, not on import
def _tables() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Code point lookup tables: ``first`` (first output code point), ``length`` (0 removes,
    >1 expands, see ``_EXPANSIONS``) and ``space`` (``str.isspace``, which ``str.strip``
    uses)."""
    size = sys.maxunicode + 1
    first = np.arange(size, dtype=np.uint32)
    length = np.ones(size, np.uint8)
    space = np.zeros(size, bool)
    for cp in range(size):
        char = chr(cp)
        category = unicodedata.category(char)
        if category == "Mn":
            length[cp] = 0
        elif category == "Nd":  # what Python's re ``\d`` matches in CCNet's DIGIT_RE
            first[cp] = ord("0")
        elif char in UNICODE_PUNCT:  # "１" is Nd: a digit before it is punctuation
            mapped = UNICODE_PUNCT[char]
            first[cp], length[cp] = ord(mapped[0]), len(mapped)
        space[cp] = char.isspace()
    length[_NON_PRINTING] = 0
    length[_NEWLINE] = 1  # the line separator of the joined batch; never inside a line
    return first, length, space


def normalize_line(line: str) -> str:
    """Normalize one line exactly as CCNet's ``normalize(line)`` with default options.

    Args:
        line: text without ``"\\n"`` (other control characters are removed).
    """
    return normalize_lines([line])[0]


def normalize_lines(lines: Sequence[str]) -> list[str]:
    """Normalize many lines at once; ``result[i]`` is CCNet's ``normalize(lines[i])``.

    Raises:
        ValueError: a line contains ``"\\n"`` (split documents with
            :func:`normalize_documents`).
    """
    if not lines:
        return []
    joined = "\n".join(lines)
    out = _normalize_joined(joined).split("\n")
    if len(out) != len(lines):
        raise ValueError("normalize_lines: a line contains '\\n'; split documents into lines first")
    return out


def normalize_documents(texts: Sequence[str]) -> tuple[list[str], list[int]]:
    """Split documents on ``"\\n"`` and normalize every line.

    Returns:
        ``(lines, counts)``: all normalized lines in order (empty lines included) and the
        number of lines of each document (``text.count("\\n") + 1``; an empty text has one
        empty line).
    """
    if not texts:
        return [], []
    joined = "\n".join(texts)
    lines = _normalize_joined(joined).split("\n")
    counts = [t.count("\n") + 1 for t in texts]
    assert sum(counts) == len(lines)
    return lines, counts


def _normalize_joined(joined: str) -> str:
    """CCNet per line of a ``"\n"``-joined batch, over a UTF-32 code point array."""
    first, length, space = _tables()
    # lower() and NFD never change whether a line edge is whitespace, so stripping after
    # them equals CCNet's strip-first order; removals (Mn, controls) come after the strip,
    # as in CCNet (a line "\x01 a" keeps its inner space).
    text = unicodedata.normalize("NFD", joined.lower())
    cps = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), np.uint32)
    keep = _inside_lines(cps, space)
    out_len = np.where(keep, length[cps], 0).astype(np.int64)
    if out_len.max(initial=0) <= 1:
        out = first[cps[out_len == 1]]
    else:  # a few punctuation marks become several characters ("—" -> " - ")
        src = cps[np.repeat(np.arange(len(cps)), out_len)]
        out = first[src]
        offset = np.arange(len(src)) - np.repeat(np.cumsum(out_len) - out_len, out_len)
        for cp, mapped in _EXPANSIONS.items():
            at = src == cp
            out[at] = mapped[offset[at]]
    return out.astype(np.uint32).tobytes().decode("utf-32-le", "surrogatepass")


def _inside_lines(cps: np.ndarray, space: np.ndarray) -> np.ndarray:
    """Mask of code points that survive ``str.strip`` of their line (newlines kept)."""
    n = len(cps)
    idx = np.arange(n)
    newline = cps == _NEWLINE
    content = ~space[cps]
    # last content / newline at or before i; first content / newline at or after i
    last_content = np.maximum.accumulate(np.where(content, idx, -1))
    last_newline = np.maximum.accumulate(np.where(newline, idx, -1))
    next_content = np.minimum.accumulate(np.where(content, idx, n)[::-1])[::-1]
    next_newline = np.minimum.accumulate(np.where(newline, idx, n)[::-1])[::-1]
    return newline | content | ((last_content > last_newline) & (next_content < next_newline))
