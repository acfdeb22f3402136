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
import re
import unicodedata

import numpy as np
import xxhash

from dataforge.text.cjk import CJK_RANGES, has_cjk

__all__ = ["Units", "is_chinese", "ngram_hashes", "normalize", "units"]

_WORD = re.compile(r"[^\W_]+")
_CJK = re.compile("[" + "".join(f"{chr(lo)}-{chr(hi)}" for lo, hi in CJK_RANGES) + "]")
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
    newlines = np.array([m.start() for m in re.finditer("\n", text)], np.int64)
    chinese = has_cjk(text)
    words, word_lines = _runs(_CJK.sub(" ", text) if chinese else text, newlines)
    if not with_chars or not chinese:
        return Units(words, word_lines, np.zeros(0, np.uint64), np.zeros(0, np.int64))
    runs, run_lines = _runs(text, newlines)
    chars = np.frombuffer("".join(runs).encode("utf-32-le"), np.uint32).astype(np.uint64)
    char_lines = np.repeat(run_lines, [len(r) for r in runs])
    return Units(words, word_lines, chars, char_lines)


def _runs(text: str, newlines: np.ndarray) -> tuple[list[str], np.ndarray]:
    """The alphanumeric runs of ``text`` and the line of each."""
    runs, starts = [], []
    for m in _WORD.finditer(text):
        runs.append(m.group())
        starts.append(m.start())
    return runs, np.searchsorted(newlines, np.array(starts, np.int64), side="right")


def _mix(values: np.ndarray) -> np.ndarray:
    """splitmix64 finalizer: code points -> well-spread 64-bit values."""
    with np.errstate(over="ignore"):
        z = values + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def word_values(words: list[str]) -> np.ndarray:
    """A 64-bit hash per word."""
    return np.fromiter((xxhash.xxh64_intdigest(w) for w in words), np.uint64, len(words))


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
