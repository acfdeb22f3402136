"""Exact verification of candidate pairs on the shingles of the two texts.

A candidate pair (from MinHash buckets or SimHash tables) is only a hint; the decision is
taken on the shingle sequences themselves, two measures per pair:

* **Jaccard** of the two distinct shingle sets, computed exactly; it must reach the
  threshold.
* **Own content**: the share of a document's shingle positions that lie in runs of at
  least ``block`` consecutive shingles the other document lacks. Near-duplicates differ by
  scattered edits (short runs), or by a block on *one* side only (added boilerplate, a
  truncated tail); two distinct pages of one template (sibling manual pages, reviews of one
  product, items of one news agency) each have a body of their own. A pair is kept only
  when at least one of the two documents has at most ``max_own`` own content: overlap in
  boilerplate alone never merges two documents, however long the boilerplate.

Vectorized over a chunk of pairs: every shingle is tagged with its pair's number (high
24 bits over the low 40 bits of the hash); the sorted distinct tagged values of each side
answer "does the other side have it" for every position with one ``searchsorted``; runs
are found with one pass of flags over the concatenated sequences. A wrong match needs two
shingles of one pair to agree on 40 bits (about ``n^2 / 2^41``: 2e-6 for 2,000 shingles).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from dataforge.ops.dedup.shingles import ShingleSet

__all__ = ["PairScores", "score_pairs"]

_HASH_BITS = np.uint64((1 << 40) - 1)
_MAX_PAIRS = 1 << 24
_CHUNK_ELEMENTS = 1 << 22


@dataclasses.dataclass(frozen=True)
class PairScores:
    """Per pair: exact Jaccard and the own-content share of each side."""

    jaccard: np.ndarray
    own_left: np.ndarray
    own_right: np.ndarray

    def duplicates(self, threshold: float, max_own: float) -> np.ndarray:
        """Pairs that reach ``threshold`` with one side at most ``max_own`` own content."""
        return (self.jaccard >= threshold) & (np.minimum(self.own_left, self.own_right) <= max_own)


def score_pairs(left: ShingleSet, right: ShingleSet, block: int) -> PairScores:
    """Scores of row-aligned pairs: document i of ``left`` with document i of ``right``
    (shingle hashes in text order, repeats allowed).

    Args:
        left: one shingle sequence per pair.
        right: the other sequence per pair.
        block: a run of this many consecutive shingles missing from the other side is
            content of its own.
    """
    n = len(left.offsets) - 1
    out = [np.zeros(n), np.zeros(n), np.zeros(n)]
    sizes = left.counts + right.counts
    start = 0
    while start < n:
        # Chunks of whole pairs with about _CHUNK_ELEMENTS shingles and < 2^24 pairs each.
        cum = np.cumsum(sizes[start : start + _MAX_PAIRS])
        stop = start + max(1, int(np.searchsorted(cum, _CHUNK_ELEMENTS, side="right")))
        for target, values in zip(out, _chunk_scores(left, right, start, stop, block), strict=True):
            target[start:stop] = values
        start = stop
    return PairScores(*out)


def _tagged(sets: ShingleSet, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
    """``(pair << 40 | hash)`` in text order, and its sorted distinct values."""
    lo, hi = sets.offsets[start], sets.offsets[stop]
    pair = np.repeat(np.arange(stop - start, dtype=np.uint64), sets.counts[start:stop])
    tagged = (pair << np.uint64(40)) | (sets.hashes[lo:hi] & _HASH_BITS)
    return tagged, np.unique(tagged)


def _present(sorted_values: np.ndarray, queries: np.ndarray) -> np.ndarray:
    if len(sorted_values) == 0:
        return np.zeros(len(queries), dtype=bool)
    pos = np.minimum(np.searchsorted(sorted_values, queries), len(sorted_values) - 1)
    return sorted_values[pos] == queries


def _own_share(tagged: np.ndarray, shared: np.ndarray, pairs: int, block: int) -> np.ndarray:
    """Per pair, the share of positions in runs of >= ``block`` unshared shingles."""
    pair = (tagged >> np.uint64(40)).astype(np.int64)
    if len(pair) == 0:
        return np.zeros(pairs)
    change = np.concatenate([[True], (shared[1:] != shared[:-1]) | (pair[1:] != pair[:-1])])
    run = np.cumsum(change) - 1
    long_run = (np.bincount(run) >= block)[run] & ~shared
    total = np.bincount(pair, minlength=pairs)
    own = np.bincount(pair, weights=long_run, minlength=pairs)
    return np.divide(own, total, out=np.zeros(pairs), where=total > 0)


def _chunk_scores(left, right, start, stop, block) -> tuple[np.ndarray, ...]:
    pairs = stop - start
    seq_l, set_l = _tagged(left, start, stop)
    seq_r, set_r = _tagged(right, start, stop)
    in_both = _present(set_r, set_l)
    inter = np.bincount((set_l[in_both] >> np.uint64(40)).astype(np.int64), minlength=pairs)
    size_l = np.bincount((set_l >> np.uint64(40)).astype(np.int64), minlength=pairs)
    size_r = np.bincount((set_r >> np.uint64(40)).astype(np.int64), minlength=pairs)
    union = (size_l + size_r - inter).astype(np.float64)
    jaccard = np.divide(inter, union, out=np.zeros(pairs), where=union > 0)
    own_l = _own_share(seq_l, _present(set_r, seq_l), pairs, block)
    own_r = _own_share(seq_r, _present(set_l, seq_r), pairs, block)
    return jaccard, own_l, own_r
