"""N-grams of evaluation text, and finding them in documents, for ``decontaminate``.

Both sides are normalized the same way (:func:`normalize`): NFKC (full-width letters,
digits and punctuation fold to their ASCII forms), traditional -> simplified Chinese
(OpenCC ``t2s``), lowercase. Then a text is **one stream of tokens** (:func:`tokens`): each
CJK ideograph is a token, and so is each run of other letters and digits (a word, a
number); punctuation, symbols and whitespace only separate. Chinese needs no word
segmentation (a passage and its context would be segmented differently), mixed zh/en text
keeps both its parts, and spacing changes (``使用Python编写`` / ``使用 Python 编写``) give
the same tokens.

An item gives the hashes of its windows of ``n`` tokens: ``char_ngram`` when at least half
its tokens are ideographs, else ``word_ngram`` (:func:`item_ngrams`). An item shorter than
its ``n`` is one n-gram of its own length when it weighs at least ``min_item_words`` words
(an ideograph weighs half a word), as GPT-3's decontamination did for short items; shorter
ones (an answer letter, a four-character idiom) give none. A document is searched with
windows of every length the items used. Window hashes are polynomial hashes over per-token
hashes, taken from prefix sums, so each length costs a few vector operations.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import re
import unicodedata
from collections.abc import Iterable

import numpy as np

from dataforge.text.cjk import CJK_RANGES, has_cjk

__all__ = [
    "Units",
    "item_ngrams",
    "ngram_hashes",
    "normalize",
    "span_text",
    "tokens",
    "units",
    "windows_of_documents",
    "word_values",
]

_CJK_CLASS = "".join(f"{chr(lo)}-{chr(hi)}" for lo, hi in CJK_RANGES)
_CJK = re.compile(f"[{_CJK_CLASS}]")
_TOKEN = re.compile(f"[{_CJK_CLASS}]|[^\\W_{_CJK_CLASS}]+")
# str.translate table: ASCII punctuation, symbols and spaces -> " " (the fast path of
# ASCII text; other text goes through the Unicode-aware regex)
_ASCII_SEPARATORS = {c: " " for c in range(128) if not chr(c).isalnum()}
_BASE = 0x100000001B3  # the FNV-1a 64-bit prime: odd, so invertible modulo 2**64
_INVERSE = pow(_BASE, -1, 2**64)


@functools.cache
def _t2s():
    import opencc

    return opencc.OpenCC("t2s")


def normalize(text: str) -> str:
    """NFKC, traditional -> simplified (only when there is Chinese), lowercase."""
    if text.isascii():
        return text.lower()
    text = unicodedata.normalize("NFKC", text)
    if has_cjk(text):
        text = _t2s().convert(text)
    return text.lower()


def tokens(text: str) -> list[str]:
    """The tokens of normalized ``text``: each CJK ideograph, each run of other letters
    and digits."""
    if text.isascii():
        return text.translate(_ASCII_SEPARATORS).split()
    return _TOKEN.findall(text)


def _is_ideograph(token: str) -> bool:
    return len(token) == 1 and _CJK.match(token) is not None


def span_text(unit_texts: list[str]) -> str:
    """Tokens joined for display: a space between two words, none beside an ideograph."""
    out: list[str] = []
    for prev, token in zip([None, *unit_texts], unit_texts, strict=False):
        if prev is not None and not _is_ideograph(prev) and not _is_ideograph(token):
            out.append(" ")
        out.append(token)
    return "".join(out)


@dataclasses.dataclass(frozen=True)
class Units:
    """The tokens of a normalized text and the line each sits on."""

    tokens: list[str]
    lines: np.ndarray


def units(text: str) -> Units:
    """Split normalized ``text`` into tokens, each with its line number."""
    per_line = [tokens(line) for line in text.split("\n")]
    counts = np.fromiter(map(len, per_line), np.int64, len(per_line))
    return Units(
        list(itertools.chain.from_iterable(per_line)), np.repeat(np.arange(len(per_line)), counts)
    )


def item_ngrams(
    text: str, word_ngram: int, char_ngram: int, min_item_words: float
) -> tuple[np.ndarray, int]:
    """The n-gram hashes of one evaluation field and their length in tokens (see the
    module docstring); no hashes for a field too short to count."""
    toks = tokens(normalize(text))
    ideographs = sum(map(_is_ideograph, toks))
    words = len(toks) - ideographs
    n = char_ngram if ideographs >= words else word_ngram
    if len(toks) < n:
        if not toks or words + ideographs / 2 < min_item_words:
            return np.zeros(0, np.uint64), n
        n = len(toks)
    return ngram_hashes(word_values(toks), n), n


def _powers(base: int, count: int) -> np.ndarray:
    """``base ** i`` modulo 2**64 for ``i < count``."""
    out = np.full(count, base, np.uint64)
    if count:
        out[0] = 1
    with np.errstate(over="ignore"):
        return np.cumprod(out, dtype=np.uint64)


def _prefix(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Prefix sums of ``values[i] * BASE**i`` and the inverse powers that make a window's
    sum independent of where it starts."""
    with np.errstate(over="ignore"):
        sums = np.cumsum(values * _powers(_BASE, len(values)), dtype=np.uint64)
    return np.concatenate([np.zeros(1, np.uint64), sums]), _powers(_INVERSE, len(values))


def _windows(prefix: np.ndarray, inverse: np.ndarray, n: int) -> np.ndarray:
    windows = len(inverse) - n + 1
    if windows <= 0:
        return np.zeros(0, np.uint64)
    with np.errstate(over="ignore"):
        return (prefix[n : n + windows] - prefix[:windows]) * inverse[:windows]


def ngram_hashes(values: np.ndarray, n: int) -> np.ndarray:
    """Hash of every window of ``n`` consecutive token hashes (``len - n + 1`` of them):
    ``sum(values[i + k] * BASE**k)`` modulo 2**64."""
    return _windows(*_prefix(values), n)


def windows_of_documents(
    token_lists: list[list[str]], lengths: Iterable[int]
) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Per window length, the hashes of many documents' windows at once and the document
    of each (windows that would cross two documents are left out)."""
    counts = np.fromiter(map(len, token_lists), np.int64, len(token_lists))
    prefix, inverse = _prefix(word_values(list(itertools.chain.from_iterable(token_lists))))
    doc_of = np.repeat(np.arange(len(counts)), counts)
    out = {}
    for n in lengths:
        hashes = _windows(prefix, inverse, n)
        doc = doc_of[: len(hashes)]
        # a window starting at token i lies in one document iff token i + n - 1 is in it too
        inside = doc == doc_of[n - 1 : n - 1 + len(hashes)]
        out[n] = (hashes[inside], doc[inside])
    return out


def _mix(values: np.ndarray) -> np.ndarray:
    """splitmix64 finalizer: well-spread 64-bit values."""
    with np.errstate(over="ignore"):
        z = values + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def word_values(words: list[str]) -> np.ndarray:
    """A 64-bit hash per token, computed for all tokens at once: the sum of each mixed code
    point times ``BASE ** position`` (mod 2**64), mixed again with the token's length."""
    if not words:
        return np.zeros(0, np.uint64)
    lengths = np.fromiter(map(len, words), np.int64, len(words))
    cps = np.frombuffer("".join(words).encode("utf-32-le"), np.uint32).astype(np.uint64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    # position of each character in its token: +1 per character, reset at each token start
    step = np.ones(len(cps), np.int64)
    step[0] = 0
    step[starts[1:]] = 1 - lengths[:-1]
    position = np.cumsum(step)
    with np.errstate(over="ignore"):
        powers = _powers(_BASE, int(lengths.max()))
        sums = np.add.reduceat(cps * powers[position], starts)
        return _mix(sums ^ lengths.astype(np.uint64))
