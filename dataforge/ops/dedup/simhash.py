"""64-bit SimHash fingerprints (vectorized over a batch) and permuted-block tables.

Fingerprint: every distinct shingle hash of a document is a feature with a weight
(``tf``: its count, ``log_tf``: ``1 + ln(count)``, ``binary``: 1); bit ``j`` of the
fingerprint is 1 when the weighted vote ``sum(w * (+1 if bit j of h else -1)) > 0``. The
bits of all features of a chunk of documents are one ``(64, features)`` matrix, summed per
document with ``np.add.reduceat``.

Near pairs (Manku, Jain, Das Sarma, "Detecting near-duplicates for web crawling", WWW
2007): split the 64 bits into ``B`` blocks; two fingerprints within Hamming distance ``k``
differ in at most ``k`` blocks, so they agree on at least one choice of ``B - k`` blocks.
There is one table per choice (``C(B, k)`` tables) keyed by those blocks' bits; pairs that
share a key in some table are candidates, kept when ``popcount(x ^ y) <= k``. Nothing is
compared pairwise across the whole corpus. Default ``B = k + 2``: ``C(k + 2, 2)`` tables
keyed by two blocks (k=6: 28 tables, 16-bit keys; k=3: 10 tables, ~26-bit keys). Larger
``B`` means longer keys (smaller buckets, fewer comparisons) but more tables (memory).
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pyarrow as pa

from dataforge.ops.dedup.method import BucketEntries, DedupMethod
from dataforge.ops.dedup.shingles import ShingleSet, mix64

__all__ = [
    "WEIGHTINGS",
    "SimHashMethod",
    "block_masks",
    "hamming_pairs",
    "simhash_fingerprints",
    "table_keys",
]

WEIGHTINGS = ("tf", "log_tf", "binary")
_CHUNK_FEATURES = 1 << 15
_BIT_SHIFTS = np.arange(64, dtype=np.uint64)


def _feature_weights(shingles: ShingleSet, weighting: str) -> tuple[np.ndarray, ...]:
    """Distinct (doc, hash) features with their weights, sorted by doc."""
    doc = shingles.doc_index()
    order = np.lexsort((shingles.hashes, doc))
    doc, h = doc[order], shingles.hashes[order]
    first = np.concatenate([[True], (h[1:] != h[:-1]) | (doc[1:] != doc[:-1])])
    starts = np.flatnonzero(first)
    counts = np.diff(np.append(starts, len(h))).astype(np.float64)
    if weighting == "tf":
        weights = counts
    elif weighting == "log_tf":
        weights = 1.0 + np.log(counts)
    elif weighting == "binary":
        weights = np.ones_like(counts)
    else:
        raise ValueError(f"weighting {weighting!r}; valid: {', '.join(WEIGHTINGS)}")
    return doc[starts], h[starts], weights


def simhash_fingerprints(shingles: ShingleSet, weighting: str = "tf") -> np.ndarray:
    """One uint64 fingerprint per document (0 for a document without shingles)."""
    n_docs = len(shingles.offsets) - 1
    out = np.zeros(n_docs, dtype=np.uint64)
    doc, h, w = _feature_weights(shingles, weighting)
    if len(h) == 0:
        return out
    doc_starts = np.flatnonzero(np.concatenate([[True], doc[1:] != doc[:-1]]))
    i = 0
    while i < len(doc_starts):
        lo = int(doc_starts[i])
        j = int(np.searchsorted(doc_starts, lo + _CHUNK_FEATURES, side="right"))
        j = max(j, i + 1)
        hi = int(doc_starts[j]) if j < len(doc_starts) else len(h)
        bits = ((h[None, lo:hi] >> _BIT_SHIFTS[:, None]) & np.uint64(1)).astype(np.float64)
        votes = (2.0 * bits - 1.0) * w[None, lo:hi]
        sums = np.add.reduceat(votes, doc_starts[i:j] - lo, axis=1)
        fingerprint = ((sums > 0).astype(np.uint64) << _BIT_SHIFTS[:, None]).sum(
            axis=0, dtype=np.uint64
        )
        out[doc[doc_starts[i:j]]] = fingerprint
        i = j
    return out


def block_masks(max_hamming: int, blocks: int) -> list[np.uint64]:
    """One 64-bit mask per table: the bits of ``blocks - max_hamming`` of the ``blocks``."""
    if not 0 <= max_hamming < blocks <= 64:
        raise ValueError(f"need 0 <= max_hamming < blocks <= 64, got {max_hamming}, {blocks}")
    edges = np.linspace(0, 64, blocks + 1).round().astype(int)
    block = [sum(1 << b for b in range(edges[i], edges[i + 1])) for i in range(blocks)]
    return [
        np.uint64(sum(block[i] for i in chosen))
        for chosen in itertools.combinations(range(blocks), blocks - max_hamming)
    ]


def table_keys(fingerprints: np.ndarray, masks: list[np.uint64]) -> np.ndarray:
    """``(docs, tables)`` uint64 bucket keys (masked bits, mixed with the table index)."""
    mask_arr = np.array(masks, dtype=np.uint64)
    table_ids = np.arange(len(masks), dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    return mix64((fingerprints[:, None] & mask_arr[None, :]) ^ table_ids[None, :])


def hamming_pairs(
    bucket_keys: np.ndarray, fingerprints: np.ndarray, nodes: np.ndarray, max_hamming: int
) -> np.ndarray:
    """Edges between entries of the same bucket within ``max_hamming`` bits.

    Entries with identical fingerprints in a bucket are first collapsed onto their
    smallest node (so a bucket of 10^5 exact copies costs 10^5, not 10^10 comparisons);
    then every pair of distinct fingerprints in a bucket is compared, vectorized.

    Returns:
        ``(k, 2)`` int64 node pairs (unsorted, may repeat).
    """
    if len(nodes) == 0:
        return np.zeros((0, 2), dtype=np.int64)
    nodes = nodes.astype(np.int64, copy=False)
    order = np.lexsort((nodes, fingerprints, bucket_keys))
    keys, fps, nodes = bucket_keys[order], fingerprints[order], nodes[order]
    new_fp = np.concatenate([[True], (keys[1:] != keys[:-1]) | (fps[1:] != fps[:-1])])
    fp_starts = np.flatnonzero(new_fp)
    head = np.repeat(nodes[fp_starts], np.diff(np.append(fp_starts, len(nodes))))
    same = np.stack([nodes[head != nodes], head[head != nodes]], axis=1)
    keys, fps, nodes = keys[fp_starts], fps[fp_starts], nodes[fp_starts]
    starts = np.flatnonzero(np.concatenate([[True], keys[1:] != keys[:-1]]))
    sizes = np.diff(np.append(starts, len(keys)))
    # Pair entry p (local index l in a group of size s) with the s - 1 - l entries after it.
    group = np.repeat(np.arange(len(starts)), sizes)
    local = np.arange(len(keys)) - starts[group]
    later = sizes[group] - 1 - local
    left = np.repeat(np.arange(len(keys)), later)
    first = np.cumsum(later) - later
    right = left + 1 + (np.arange(len(left)) - np.repeat(first, later))
    close = np.bitwise_count(fps[left] ^ fps[right]) <= max_hamming
    near = np.stack([nodes[left[close]], nodes[right[close]]], axis=1)
    return np.concatenate([same, near])


class SimHashMethod(DedupMethod):
    """64-bit SimHash, permuted-block tables; candidates within ``max_hamming`` bits are
    verified on the shingle sets."""

    name = "simhash"

    def signature_params(self) -> dict[str, Any]:
        # Flat names, as published beside the signatures of earlier runs.
        return {"bits": self.config.simhash.bits, "weighting": self.config.simhash.weighting}

    def signatures(self, shingles: ShingleSet | None, points: Any) -> np.ndarray:
        return simhash_fingerprints(shingles, self.config.simhash.weighting)

    def bucket_keys(self, signatures: pa.Array) -> BucketEntries:
        rows, fingerprints = self.values(signatures)
        masks = block_masks(self.config.simhash.max_hamming, self.config.simhash.block_count())
        return BucketEntries(rows, table_keys(fingerprints, masks), fingerprints)

    def max_hamming(self) -> int | None:
        return self.config.simhash.max_hamming

    def signature_similarity(self, left: np.ndarray, right: np.ndarray) -> np.ndarray:
        """1 - Hamming distance / 64 (a pair from the tables is already within
        ``max_hamming``; against a published fingerprint that is the only evidence)."""
        distance = np.bitwise_count(np.asarray(left, np.uint64) ^ np.asarray(right, np.uint64))
        return np.where(distance <= self.config.simhash.max_hamming, 1.0, 0.0) * (
            1.0 - distance / 64
        )
