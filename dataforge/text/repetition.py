"""Gopher-style word n-gram repetition, for all n-gram sizes in one growing pass.

For each n-gram size n, per document: the characters of the most frequent repeated n-gram
times its count (``top``), and the characters of the words covered by n-grams that occurred
earlier in the document (``covered``; each word counted once).

The n-grams are grouped exactly, without hashing: the n-grams of size 1 are (document,
word) pairs; the group of an (n+1)-gram is the pair (group of its leading n-gram, its last
word). Two facts let every size reuse the previous one and shrink the work as n grows:

- an (n+1)-gram can only repeat if the n-grams starting at its first and second word both
  repeat, so only those start positions are carried to the next size (on real text a few
  percent survive past n = 4);
- the words covered by later occurrences are a union of intervals of n words sorted by
  start, so their characters are sums of prefix-sum differences, not a per-word mask.

Each size costs one argsort over the surviving start positions (the previous version
sorted every position once per size and built a per-word coverage mask per size). Word
lengths are integers, so every sum is exact in float64 and the result does not depend on
the order of additions.
"""

from __future__ import annotations

import numpy as np

__all__ = ["ngram_repetition"]


def ngram_repetition(
    codes: np.ndarray, lengths: np.ndarray, parents: np.ndarray, n_docs: int, sizes: set[int]
) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Per n in ``sizes``, per doc: (top repeated n-gram chars x count, covered word chars).

    Args:
        codes: word id of every flat word (equal ids = equal words).
        lengths: characters of every flat word.
        parents: document index of every flat word, non-decreasing.
        n_docs: number of documents.
        sizes: n-gram sizes wanted (>= 1).
    """
    out = {size: (np.zeros(n_docs), np.zeros(n_docs)) for size in sizes}
    total = len(codes)
    if not sizes or total == 0:
        return out
    prefix_chars = np.concatenate([[0.0], np.cumsum(lengths, dtype=np.float64)])
    vocab = int(codes.max()) + 1
    starts = np.arange(total, dtype=np.int64)
    grouped = _group(parents.astype(np.int64) * vocab + codes)
    for size in range(1, max(sizes) + 1):
        if size in sizes:
            out[size] = _size_stats(starts, grouped, parents, prefix_chars, size, n_docs)
        if size == max(sizes):
            break
        # Only n-grams that repeat can start a repeated (n+1)-gram.
        _, _, counts, group_of = grouped
        repeated = counts[group_of] >= 2
        starts, keys = _extend(
            starts[repeated], group_of[repeated], codes, parents, size + 1, vocab
        )
        if len(starts) == 0:
            break
        grouped = _group(keys)
    return out


def _extend(
    starts: np.ndarray,
    groups: np.ndarray,
    codes: np.ndarray,
    parents: np.ndarray,
    size: int,
    vocab: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Start positions and exact keys of the ``size``-grams that can repeat."""
    repeated_at = np.zeros(len(codes) + 1, dtype=bool)
    repeated_at[starts] = True
    last = starts + size - 1
    # The (n-1)-gram one word later must repeat too, and the window must stay in its doc.
    ok = repeated_at[starts + 1] & (last < len(codes))
    starts, groups, last = starts[ok], groups[ok], last[ok]
    ok = parents[last] == parents[starts]
    starts, groups, last = starts[ok], groups[ok], last[ok]
    return starts, groups * vocab + codes[last]


def _group(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Sort order, start of each group in it, group sizes, and the dense group per key."""
    order = np.argsort(keys)
    sorted_keys = keys[order]
    new_group = np.ones(len(keys), dtype=bool)
    new_group[1:] = sorted_keys[1:] != sorted_keys[:-1]
    group_start = np.flatnonzero(new_group)
    counts = np.diff(np.append(group_start, len(keys)))
    groups = np.empty(len(keys), dtype=np.int64)
    groups[order] = np.cumsum(new_group) - 1
    return order, group_start, counts, groups


def _size_stats(
    starts: np.ndarray,
    groups: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    parents: np.ndarray,
    prefix_chars: np.ndarray,
    size: int,
    n_docs: int,
) -> tuple[np.ndarray, np.ndarray]:
    order, group_start, counts, group_of = groups
    top = np.zeros(n_docs)
    positions = starts[order]
    first = positions[group_start[counts >= 2]]
    window_chars = prefix_chars[first + size] - prefix_chars[first]
    np.maximum.at(top, parents[first], counts[counts >= 2] * window_chars)
    earliest = np.minimum.reduceat(positions, group_start)
    later = starts[starts != earliest[group_of]]  # ascending, as starts are
    # Later occurrences as intervals [start, start + size) sorted by start: each covers up to
    # the next one's start, so the pieces are disjoint and their union is the covered words.
    # Intervals never cross a document, so a piece never reaches into the next document.
    ends = np.minimum(later + size, np.append(later[1:], len(prefix_chars)))
    piece_chars = prefix_chars[ends] - prefix_chars[later]
    covered = np.bincount(parents[later], weights=piece_chars, minlength=n_docs)
    return top, covered.astype(np.float64)
