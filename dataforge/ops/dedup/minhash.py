"""MinHash signatures (vectorized over a batch) and LSH banding.

Permutation i maps a 64-bit shingle hash ``h`` to ``a_i * h + b_i mod 2^64`` (``a_i`` odd,
so each map is a bijection; multiply-add keeps the high bits well mixed, and shingle hashes
are already uniform after splitmix64). A document's signature value i is the high 32 bits
of the minimum over its shingles. The whole batch is one matrix op per chunk of shingles:
``(chunk[:, None] * a + b)`` then ``np.minimum.reduceat`` over document boundaries.

Banding: with ``b`` bands of ``r`` rows, a pair with Jaccard ``s`` becomes a candidate with
probability ``P(s) = 1 - (1 - s^r)^b``. For a threshold ``t`` we pick ``(b, r)`` with
``b * r <= num_perm`` that minimizes::

    w_fp * integral_0^t P(s) ds  +  w_fn * integral_t^1 (1 - P(s)) ds

(the area of false positives below ``t`` plus false negatives above it; the same objective
as datasketch's ``_optimal_param``; integrals by the trapezoid rule on 1001 points).
"""

from __future__ import annotations

import array
import functools
import itertools
import math
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dataforge.ops.dedup.method import BucketEntries, DedupMethod
from dataforge.ops.dedup.shingles import ShingleSet, mix64

__all__ = [
    "EMPTY_SIGNATURE_VALUE",
    "MAX_DERIVED_BANDS",
    "MinHashMethod",
    "band_keys",
    "minhash_signatures",
    "optimal_bands",
    "permutations",
    "signature_jaccard",
]

EMPTY_SIGNATURE_VALUE = np.uint32(0xFFFFFFFF)
# An index entry is 8 bytes (uint32 bucket key + uint32 document key) per band: derived
# banding stays within 200 bytes per document.
MAX_DERIVED_BANDS = 25
_CHUNK_CELLS = 1 << 20  # shingles x permutations per matrix op (8 MiB of uint64)


def permutations(num_perm: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``(a, b)`` multipliers/offsets of ``num_perm`` permutations (a odd)."""
    rng = np.random.default_rng(np.random.SeedSequence([0xDED0, seed]))
    a = rng.integers(0, 1 << 63, size=num_perm, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    b = rng.integers(0, 1 << 63, size=num_perm, dtype=np.uint64)
    return a, b


def minhash_signatures(shingles: ShingleSet, num_perm: int, seed: int) -> np.ndarray:
    """``(docs, num_perm)`` uint32 signatures; documents without shingles get all
    ``EMPTY_SIGNATURE_VALUE`` (the planner never clusters them)."""
    a, b = permutations(num_perm, seed)
    counts = shingles.counts
    n_docs = len(counts)
    out = np.full((n_docs, num_perm), EMPTY_SIGNATURE_VALUE, dtype=np.uint32)
    nonempty = np.flatnonzero(counts > 0)
    if len(nonempty) == 0:
        return out
    # Chunks of whole documents with about _CHUNK_CELLS cells each (a capped document has
    # at most max_shingles hashes, so one document never exceeds a chunk by much).
    max_rows = max(_CHUNK_CELLS // num_perm, 1)
    ends = shingles.offsets[nonempty + 1]
    starts = shingles.offsets[nonempty]
    i = 0
    # Permutations on axis 0: reduceat along the contiguous axis is ~4x faster.
    buf = np.empty((num_perm, 0), dtype=np.uint64)
    while i < len(nonempty):
        j = int(np.searchsorted(ends, starts[i] + max_rows, side="right"))
        j = max(j, i + 1)
        lo, hi = int(starts[i]), int(ends[j - 1])
        if buf.shape[1] < hi - lo:
            buf = np.empty((num_perm, hi - lo), dtype=np.uint64)
        cells = buf[:, : hi - lo]
        with np.errstate(over="ignore"):
            np.multiply(a[:, None], shingles.hashes[None, lo:hi], out=cells)
            np.add(cells, b[:, None], out=cells)
        mins = np.minimum.reduceat(cells, starts[i:j] - lo, axis=1)
        out[nonempty[i:j]] = (mins >> np.uint64(32)).astype(np.uint32).T
        i = j
    return out


def _band_probabilities(bands: np.ndarray, rows: np.ndarray, s: np.ndarray) -> np.ndarray:
    return 1.0 - (1.0 - s[None, :] ** rows[:, None]) ** bands[:, None]


@functools.lru_cache(maxsize=64)
def optimal_bands(
    threshold: float,
    num_perm: int,
    fp_weight: float = 0.5,
    fn_weight: float = 0.5,
    max_bands: int | None = None,
) -> tuple[int, int]:
    """``(bands, rows)`` minimizing the weighted false positive + false negative area,
    with at most ``max_bands`` bands (the index holds one entry per band and document)."""
    if not 0.0 < threshold < 1.0:
        raise ValueError(f"threshold must be in (0, 1), got {threshold}")
    top = min(num_perm, max_bands or num_perm)
    pairs = np.array([(b, r) for b in range(1, top + 1) for r in range(1, num_perm // b + 1)])
    s = np.linspace(0.0, 1.0, 1001)
    prob = _band_probabilities(pairs[:, 0], pairs[:, 1], s)
    below = s <= threshold
    fp = np.trapezoid(np.where(below, prob, 0.0), s, axis=1)
    fn = np.trapezoid(np.where(below, 0.0, 1.0 - prob), s, axis=1)
    best = int(np.argmin(fp_weight * fp + fn_weight * fn))
    return int(pairs[best, 0]), int(pairs[best, 1])


def band_keys(signatures: np.ndarray, bands: int, rows: int, seed: int = 0) -> np.ndarray:
    """``(docs, bands)`` uint64 bucket keys: a random linear hash of each band's rows, mixed
    with the band index (so equal rows in different bands never share a bucket)."""
    n = signatures.shape[0]
    if bands * rows > signatures.shape[1]:
        raise ValueError(f"bands*rows={bands * rows} exceeds num_perm={signatures.shape[1]}")
    rng = np.random.default_rng(np.random.SeedSequence([0xBA4D, seed]))
    mult = rng.integers(0, 1 << 63, size=rows, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    cells = signatures[:, : bands * rows].reshape(n, bands, rows).astype(np.uint64)
    with np.errstate(over="ignore"):
        linear = (cells * mult[None, None, :]).sum(axis=2, dtype=np.uint64)
        band_ids = np.arange(bands, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    return mix64(linear ^ band_ids[None, :])


def signature_jaccard(sig_a: np.ndarray, sig_b: np.ndarray) -> np.ndarray:
    """Estimated Jaccard similarity of row-aligned signature pairs."""
    equal = np.asarray(sig_a) == np.asarray(sig_b)
    # A count over the row length: the mean's value, without a float copy of every cell.
    return np.count_nonzero(equal, axis=-1) / equal.shape[-1]


class MinHashMethod(DedupMethod):
    """MinHash signatures, LSH band keys; candidates verified on the shingle sets."""

    name = "minhash"
    key_bits = 32

    def problems(self) -> list[str]:
        if self.config.minhash.engine == "rensa":
            try:
                import rensa  # noqa: F401
            except ImportError:
                return [
                    "dedup.minhash.engine: rensa is not installed (or use minhash.engine: numpy)"
                ]
        return []

    def signature_type(self) -> pa.DataType:
        return pa.binary(4 * self.config.minhash.num_perm)

    def signature_params(self) -> dict[str, Any]:
        # Flat names, as published beside the signatures of earlier runs.
        return {
            "num_perm": self.config.minhash.num_perm,
            "engine": _engine_version(self.config.minhash.engine),
        }

    def bands_rows(self) -> tuple[int, int]:
        """``(bands, rows)``: configured, or derived from ``threshold`` (with at most
        ``MAX_DERIVED_BANDS``: the index holds 8 bytes per band and document)."""
        cfg = self.config.minhash
        if cfg.bands is not None:
            return cfg.bands, cfg.rows
        return optimal_bands(self.config.threshold, cfg.num_perm, max_bands=MAX_DERIVED_BANDS)

    def summary(self) -> dict[str, Any]:
        bands, rows = self.bands_rows()
        return {"bands": bands, "rows": rows}

    def signatures(self, shingles: ShingleSet | None, points: Any) -> np.ndarray:
        cfg = self.config.minhash
        if cfg.engine == "numpy":
            return minhash_signatures(shingles, cfg.num_perm, cfg.hash_seed)
        import rensa

        matrix = rensa.RMinHash.digest_matrix_from_flat_token_hashes(
            shingles.hashes, shingles.offsets.astype(np.uint64), cfg.num_perm, cfg.hash_seed
        )
        # array.array over the flattened rows is ~2x faster than np.array(list of lists).
        flat = array.array("I", itertools.chain.from_iterable(matrix.to_rows()))
        return np.frombuffer(flat, dtype=np.uint32).reshape(-1, cfg.num_perm)

    def values(self, signatures: pa.Array) -> tuple[np.ndarray, np.ndarray]:
        valid = pc.is_valid(signatures)
        rows = np.flatnonzero(valid.to_numpy(zero_copy_only=False))
        present = signatures.filter(valid)
        num_perm = self.config.minhash.num_perm
        raw = np.frombuffer(present.buffers()[1], dtype=np.uint32)
        start = present.offset * num_perm
        return rows, raw[start : start + len(present) * num_perm].reshape(-1, num_perm)

    def bucket_keys(self, signatures: pa.Array) -> BucketEntries:
        rows, sigs = self.values(signatures)
        bands, band_rows = self.bands_rows()
        return BucketEntries(rows, band_keys(sigs, bands, band_rows, self.config.minhash.hash_seed))

    def screen_floor(self) -> float | None:
        """Four standard deviations of the signature estimate below ``threshold``
        (0.23 for 0.4 with 128 permutations): a pair there is a chance collision of its
        bands, not a duplicate (a true pair at the threshold lands below with p ~ 3e-5)."""
        t = self.config.threshold
        return t - 4.0 * math.sqrt(t * (1.0 - t) / self.config.minhash.num_perm)

    def signature_similarity(self, left: np.ndarray, right: np.ndarray) -> np.ndarray:
        return signature_jaccard(left, right)


def _engine_version(engine: str) -> str:
    if engine == "rensa":
        import rensa

        return f"rensa-alg{rensa.RMinHash.ALGORITHM_VERSION}"
    return "numpy-v1"
