"""The key at a given rank among keys read in parts, in memory bounded by a row count.

A key is a (float64 score, uint64 tie) pair ordered by score, then tie. Scores map to
uint64 in the same order, so a key is 128 bits read as eight 16-bit digits. Each pass over
the parts counts, among the keys sharing the digits fixed so far, the next digit's values;
the bucket holding the rank fixes that digit. Once the keys sharing the prefix fit in
``max_rows``, one more pass loads them and a sort picks the key. The result is the key an
in-memory sort of all keys puts at that rank.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np

__all__ = ["KEY_BYTES", "key_at_rank"]

KEY_BYTES = 16
"""Bytes of one key held in memory (score and tie)."""
_DIGIT = 16
_DIGITS = 128 // _DIGIT
_SIGN = np.uint64(1 << 63)

Parts = Callable[[], Iterator[tuple[np.ndarray, np.ndarray]]]


def ordered(score: np.ndarray) -> np.ndarray:
    """Scores as uint64 in the same order (-0.0 counts as 0.0; no NaN)."""
    bits = (np.asarray(score, np.float64) + 0.0).view(np.uint64)
    return np.where(bits & _SIGN, ~bits, bits | _SIGN)


def _score_of(key: np.uint64) -> float:
    key = np.uint64(key)
    bits = key & ~_SIGN if key & _SIGN else ~key
    return float(np.array([bits], np.uint64).view(np.float64)[0])


def _digit(hi: np.ndarray, lo: np.ndarray, level: int) -> np.ndarray:
    """Digit ``level`` (0: the top 16 bits of the score) of each key."""
    word, at = (hi, level) if level < _DIGITS // 2 else (lo, level - _DIGITS // 2)
    return ((word >> np.uint64(64 - _DIGIT * (at + 1))) & np.uint64(0xFFFF)).astype(np.int64)


def _from_digits(digits: list[int]) -> tuple[float, int]:
    half = _DIGITS // 2
    hi = sum(d << (_DIGIT * (half - 1 - i)) for i, d in enumerate(digits[:half]))
    lo = sum(d << (_DIGIT * (half - 1 - i)) for i, d in enumerate(digits[half:]))
    return _score_of(np.uint64(hi)), lo


def _matching(hi: np.ndarray, lo: np.ndarray, prefix: list[int]) -> np.ndarray:
    keep = np.ones(len(hi), bool)
    for level, value in enumerate(prefix):
        keep &= _digit(hi, lo, level) == value
    return keep


def key_at_rank(parts: Parts, rank: int, max_rows: int) -> tuple[float, int]:
    """(score, tie) of the key at ascending ``rank`` (0-based) among the keys ``parts()``
    yields, holding at most ``max_rows`` keys (plus one part) at a time.

    Raises:
        IndexError: fewer than ``rank + 1`` keys.
    """
    prefix: list[int] = []
    count = sum(len(score) for score, _ in parts())
    if not 0 <= rank < count:
        raise IndexError(f"rank {rank} of {count} keys")
    while count > max_rows and len(prefix) < _DIGITS:
        histogram = np.zeros(1 << _DIGIT, np.int64)
        for score, tie in parts():
            hi, lo = ordered(score), np.asarray(tie, np.uint64)
            keep = _matching(hi, lo, prefix)
            histogram += np.bincount(_digit(hi[keep], lo[keep], len(prefix)), minlength=1 << _DIGIT)
        below = np.cumsum(histogram)
        bucket = int(np.searchsorted(below, rank, side="right"))
        rank -= int(below[bucket - 1]) if bucket else 0
        count = int(histogram[bucket])
        prefix.append(bucket)
    if len(prefix) == _DIGITS:  # every digit fixed: the keys left are all this one
        return _from_digits(prefix)
    his, los = [], []
    for score, tie in parts():
        hi, lo = ordered(score), np.asarray(tie, np.uint64)
        keep = _matching(hi, lo, prefix)
        his.append(hi[keep])
        los.append(lo[keep])
    hi, lo = np.concatenate(his), np.concatenate(los)
    at = np.lexsort((lo, hi))[rank]
    return _score_of(hi[at]), int(lo[at])
