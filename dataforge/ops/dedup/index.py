"""One index shard: bucket entries for a slice of the key space, then verification.

The planner (``dataforge.runtime.barriers.dedup``) runs ``shards`` of these, in-process or
as Ray actors (this module has no ray import). Lifecycle of a shard:

1. ``add`` bucket entries whose key it owns (``key % shards``). Stored per entry: the
   uint32 document key and the bucket key: with ``key_bits == 32`` (MinHash) only its high
   32 bits (the low bits chose the shard; a false 32-bit match only makes a candidate,
   which verification rejects), packed with the document key into one uint64, so a MinHash
   document with ``b`` bands costs ``8 * b`` bytes spread over the shards; exact keeps 64
   bits, SimHash 64 bits plus the uint64 fingerprint.
2. ``candidate_edges``: sort the entries, turn every bucket into candidate pairs
   (:func:`dataforge.ops.dedup.buckets.bucket_pair_edges`; SimHash: pairs within
   ``max_hamming``), free the entries, route each pair to the owner of its first node.
3. Verified methods: ``receive_candidates``; ``add_payload`` keeps the shingle sequences
   (and signatures) of the owned candidate nodes; ``forward`` sends each pair ``(u, v)``
   with the shingles of ``u`` to the owner of ``v``, whose ``verify`` scores the pair
   (:mod:`dataforge.ops.dedup.verify`: exact Jaccard and own content) and keeps the
   duplicates.
   A pair with a record of an ``against`` run (key below ``fixed``: its text is gone) is
   judged on the signatures instead.
4. ``edges``: the decided pairs and their similarity, for the star clustering on the
   driver (:mod:`dataforge.ops.dedup.star`).
"""

from __future__ import annotations

import os
import resource

import numpy as np

from dataforge.ops.dedup.buckets import (
    bucket_pair_edges,
    packed_bucket_pair_edges,
    route_edges,
    unique_edges,
)
from dataforge.ops.dedup.method import DedupMethod
from dataforge.ops.dedup.simhash import hamming_pairs
from dataforge.ops.dedup.verify import Texts, verify_pairs

__all__ = ["IndexShard"]


def _flatten(parts) -> list:
    return [p for part in parts for p in (part if isinstance(part, list) else [part])]


class IndexShard:
    """Bucket entries, then candidate pairs and their verification, of one shard."""

    def __init__(self, shards: int, method: DedupMethod, fixed: int = 0) -> None:
        self.shards = shards
        self.method = method
        self.config = method.config
        self.fixed = fixed
        self._packed = method.key_bits == 32
        self._keys: list[np.ndarray] = []
        self._nodes: list[np.ndarray] = []
        self._fingerprints: list[np.ndarray] = []
        self._candidates = np.zeros((0, 2), dtype=np.int64)
        self._payload_nodes = np.zeros(0, dtype=np.int64)
        self._texts = Texts.empty()
        self._sigs: np.ndarray | None = None
        self._decided: list[tuple[np.ndarray, np.ndarray]] = []

    def ping(self) -> int:
        return os.getpid()

    def peak_rss_mb(self) -> float:
        """Peak resident memory of this process (MiB), for the stage summary."""
        return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)

    def add(
        self, keys: np.ndarray, nodes: np.ndarray, fingerprints: np.ndarray | None = None
    ) -> int:
        """Store bucket entries; returns the number stored so far."""
        keys = np.asarray(keys, dtype=np.uint64)
        nodes = np.asarray(nodes, dtype=np.uint32)
        if self._packed:
            # One uint64 per entry: high 32 key bits (the low bits chose the shard) | node.
            self._keys.append((keys & np.uint64(0xFFFFFFFF00000000)) | nodes.astype(np.uint64))
        else:
            self._keys.append(keys)
            self._nodes.append(nodes)
        if fingerprints is not None:
            self._fingerprints.append(np.asarray(fingerprints, dtype=np.uint64))
        return sum(len(k) for k in self._keys)

    def index_bytes(self) -> int:
        """Bytes held by the bucket entries."""
        return sum(a.nbytes for a in (*self._keys, *self._nodes, *self._fingerprints))

    def candidate_edges(self) -> list[np.ndarray]:
        """Candidate pairs of this shard's buckets, routed by owner; frees the entries."""
        partners = self.config.max_partners
        if self._packed:
            packed = np.concatenate(self._keys) if self._keys else np.zeros(0, np.uint64)
            self._keys = []  # free the pieces before sorting
            return route_edges(packed_bucket_pair_edges(packed, partners), self.shards)
        keys = np.concatenate(self._keys) if self._keys else np.zeros(0, np.uint64)
        nodes = np.concatenate(self._nodes) if self._nodes else np.zeros(0, np.uint32)
        max_hamming = self.method.max_hamming()
        if max_hamming is None:
            edges = bucket_pair_edges(keys, nodes, partners)
        else:
            fps = np.concatenate(self._fingerprints) if self._fingerprints else keys[:0]
            edges = hamming_pairs(keys, fps, nodes, max_hamming)
        self._keys, self._nodes, self._fingerprints = [], [], []
        return route_edges(edges, self.shards)

    # -- verification ----------------------------------------------------------------------

    def receive_candidates(self, *parts: np.ndarray | list[np.ndarray]) -> int:
        """Keep the candidate pairs of the owned nodes (both directions); returns how many."""
        flat = _flatten(parts)
        edges = np.concatenate(flat) if flat else np.zeros((0, 2), np.int64)
        edges = unique_edges(edges[edges[:, 0] != edges[:, 1]])
        # Pairs between two records of against runs are never decided here.
        self._candidates = edges[(edges[:, 0] >= self.fixed) | (edges[:, 1] >= self.fixed)]
        return len(self._candidates)

    def candidate_nodes(self) -> np.ndarray:
        """The owned nodes that have a candidate pair (their payload is needed)."""
        return np.unique(self._candidates[:, 0])

    def add_payload(self, nodes: np.ndarray, signatures: np.ndarray, texts: Texts | None) -> int:
        """Keep the signatures and shingle sequences of owned candidate nodes (``sets``:
        None for records of against runs); returns the number of nodes held."""
        nodes = np.asarray(nodes, dtype=np.int64)
        texts = Texts.empty(len(nodes)) if texts is None else texts
        self._texts = Texts.concat([self._texts, texts])
        self._payload_nodes = np.concatenate([self._payload_nodes, nodes])
        self._sigs = signatures if self._sigs is None else np.concatenate([self._sigs, signatures])
        return len(self._payload_nodes)

    def _rows_of(self, nodes: np.ndarray) -> np.ndarray:
        order = np.argsort(self._payload_nodes, kind="stable")
        return order[np.searchsorted(self._payload_nodes, nodes, sorter=order)]

    def forward(self) -> list[tuple[np.ndarray, np.ndarray, Texts]]:
        """``(pairs (u, v) with u < v, sig(u), texts(u))`` routed to the owner of ``v``."""
        edges = self._candidates[self._candidates[:, 0] < self._candidates[:, 1]]
        owner = edges[:, 1] % self.shards
        out = []
        for i in range(self.shards):
            part = edges[owner == i]
            rows = self._rows_of(part[:, 0])
            out.append((part, self._sigs[rows] if len(rows) else None, self._texts.take(rows)))
        return out

    def verify(self, *parts) -> int:
        """Similarity of the forwarded pairs; keeps those that reach the threshold."""
        flat = [p for p in _flatten(parts) if len(p[0])]
        if not flat:
            return 0
        edges = np.concatenate([p[0] for p in flat])
        left = Texts.concat([p[2] for p in flat])
        rows = self._rows_of(edges[:, 1])
        cfg = self.config
        right = self._texts.take(rows)
        sim, keep = verify_pairs(left, right, cfg.threshold, cfg.block, cfg.max_own)
        fixed = edges[:, 0] < self.fixed
        if fixed.any():
            sig_u = np.concatenate([p[1] for p in flat])[fixed]
            sim[fixed] = self.method.signature_similarity(sig_u, self._sigs[rows[fixed]])
            keep[fixed] = sim[fixed] >= cfg.threshold
        self._decided.append((edges[keep], sim[keep]))
        return int(keep.sum())

    def edges(self) -> tuple[np.ndarray, np.ndarray]:
        """The decided pairs and their similarity; frees the verification state.
        Unverified methods: every candidate pair, similarity 1.0."""
        if not self.method.verified:
            edges = self._candidates[self._candidates[:, 0] < self._candidates[:, 1]]
            self._candidates = np.zeros((0, 2), np.int64)
            return edges, np.ones(len(edges))
        decided = self._decided
        self._decided, self._sigs = [], None
        self._texts = Texts.empty()
        if not decided:
            return np.zeros((0, 2), np.int64), np.zeros(0)
        return np.concatenate([d[0] for d in decided]), np.concatenate([d[1] for d in decided])
