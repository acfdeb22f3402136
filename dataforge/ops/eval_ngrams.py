"""N-grams of evaluation text, and finding them in documents, for ``decontaminate``.

Both sides are normalized the same way (:func:`units`): NFKC (full-width letters, digits
and punctuation fold to their ASCII forms), traditional -> simplified Chinese (OpenCC
``t2s``), lowercase; then every run of punctuation, symbols and whitespace is a separator.
Two unit streams come out of a text:

* **words**: the alphanumeric runs (a run of Chinese characters is never a word);
* **chars**: every alphanumeric character, separators removed (for Chinese, which has no
  spaces, and where word segmentation would differ between a passage and its context).

An evaluation field is Chinese when at least a third of its alphanumeric characters are CJK
ideographs: it contributes character n-grams, else word n-grams. A document contributes
word n-grams, and character n-grams when it has a CJK ideograph. N-grams are 64-bit rolling
hashes over per-unit hashes, so a document costs ``n`` vector operations per stream.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import re
import unicodedata

import numpy as np

from dataforge.text.cjk import CJK_RANGES, has_cjk

__all__ = [
    "Units",
    "alnum_runs",
    "is_chinese",
    "ngram_hashes",
    "normalize",
    "units",
    "windows_of_documents",
    "word_runs",
]

_WORD = re.compile(r"[^\W_]+")
_CJK = re.compile("[" + "".join(f"{chr(lo)}-{chr(hi)}" for lo, hi in CJK_RANGES) + "]")
# str.translate table: ASCII punctuation, symbols and spaces -> " " (the fast path of
# ASCII text; other text goes through the Unicode-aware regex)
_ASCII_SEPARATORS = {c: " " for c in range(128) if not chr(c).isalnum()}
_BASE = np.uint64(0x100000001B3)  # the FNV-1a 64-bit prime: odd, so the hash is invertible


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


def is_chinese(text: str) -> bool:
    """At least a third of the alphanumeric characters are CJK ideographs."""
    alnum = sum(len(w) for w in _WORD.findall(text))
    return alnum > 0 and 3 * len(_CJK.findall(text)) >= alnum


@dataclasses.dataclass(frozen=True)
class Units:
    """The unit streams of a normalized text and the line each unit sits on."""

    words: list[str]
    word_lines: np.ndarray
    chars: np.ndarray
    """Code points of the alphanumeric characters (uint64)."""
    char_lines: np.ndarray


def units(text: str, with_chars: bool) -> Units:
    """Split normalized ``text`` into words and (if ``with_chars`` and it has Chinese)
    characters, each with its line number."""
    lines = text.split("\n")
    chinese = has_cjk(text)
    words, word_lines = _runs([_CJK.sub(" ", line) for line in lines] if chinese else lines)
    if not with_chars or not chinese:
        return Units(words, word_lines, np.zeros(0, np.uint64), np.zeros(0, np.int64))
    runs, run_lines = _runs(lines)
    chars = np.frombuffer("".join(runs).encode("utf-32-le"), np.uint32).astype(np.uint64)
    char_lines = np.repeat(run_lines, np.fromiter(map(len, runs), np.int64, len(runs)))
    return Units(words, word_lines, chars, char_lines)


def windows_of_documents(
    runs: list[list[str]], n: int, chars: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Rolling n-gram hashes of many documents' unit runs at once, and the document of each
    window (windows that would cross two documents are left out).

    ``chars``: the runs are split into characters (their code points are the units)."""
    if chars:
        joined = ["".join(r) for r in runs]
        counts = np.fromiter(map(len, joined), np.int64, len(joined))
        values = np.frombuffer("".join(joined).encode("utf-32-le"), np.uint32).astype(np.uint64)
    else:
        counts = np.fromiter(map(len, runs), np.int64, len(runs))
        values = word_values(list(itertools.chain.from_iterable(runs)))
    hashes = ngram_hashes(values, n, chars=chars)
    doc = np.repeat(np.arange(len(counts)), counts)[: len(hashes)]
    # a window starting at unit i lies in one document iff unit i + n - 1 is in the same one
    inside = doc == np.repeat(np.arange(len(counts)), counts)[n - 1 : n - 1 + len(hashes)]
    return hashes[inside], doc[inside]


def alnum_runs(text: str) -> list[str]:
    """The runs of letters and digits of ``text`` (``[^\\W_]+``)."""
    if text.isascii():
        return text.translate(_ASCII_SEPARATORS).split()
    return _WORD.findall(text)


def word_runs(text: str) -> list[str]:
    """The words of ``text``: its alphanumeric runs with Chinese characters as separators."""
    return alnum_runs(_CJK.sub(" ", text) if has_cjk(text) else text)


def _runs(lines: list[str]) -> tuple[list[str], np.ndarray]:
    """The alphanumeric runs of the lines and the line of each."""
    per_line = [alnum_runs(line) for line in lines]
    counts = np.fromiter(map(len, per_line), np.int64, len(per_line))
    return list(itertools.chain.from_iterable(per_line)), np.repeat(np.arange(len(lines)), counts)


def _mix(values: np.ndarray) -> np.ndarray:
    """splitmix64 finalizer: code points -> well-spread 64-bit values."""
    with np.errstate(over="ignore"):
        z = values + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def word_values(words: list[str]) -> np.ndarray:
    """A 64-bit hash per word, computed for all words at once: the sum of each mixed code
    point times ``_BASE ** position`` (mod 2**64), mixed again with the word's length."""
    if not words:
        return np.zeros(0, np.uint64)
    lengths = np.fromiter(map(len, words), np.int64, len(words))
    cps = np.frombuffer("".join(words).encode("utf-32-le"), np.uint32).astype(np.uint64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    # position of each character in its word: +1 per character, reset at each word start
    step = np.ones(len(cps), np.int64)
    step[0] = 0
    step[starts[1:]] = 1 - lengths[:-1]
    position = np.cumsum(step)
    with np.errstate(over="ignore"):
        powers = np.ones(int(lengths.max()), np.uint64)
        powers[1:] = np.cumprod(np.full(len(powers) - 1, _BASE, np.uint64))
        sums = np.add.reduceat(cps * powers[position], starts)
        return _mix(sums ^ lengths.astype(np.uint64))


def ngram_hashes(values: np.ndarray, n: int, chars: bool = False) -> np.ndarray:
    """Rolling hash of every window of ``n`` consecutive units (``len - n + 1`` of them)."""
    if len(values) < n:
        return np.zeros(0, np.uint64)
    if chars:
        values = _mix(values)
    windows = len(values) - n + 1
    h = np.zeros(windows, np.uint64)
    with np.errstate(over="ignore"):
        for j in range(n):
            h = h * _BASE + values[j : j + windows]
    return h
