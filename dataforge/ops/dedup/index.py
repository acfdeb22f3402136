"""One index shard: bucket entries for a slice of the bucket-key space, then an edge shard.

The planner (``dataforge.runtime.barriers.dedup``) runs ``shards`` of these, in-process or
as Ray actors (this module has no ray import). Lifecycle of a shard:

1. ``add`` bucket entries whose key it owns (``key % shards``): MinHash band keys, exact
   hashes, or SimHash table keys with the fingerprint. Stored per entry: the uint32 document
   key and the bucket key: for MinHash only its high 32 bits (the low bits chose the shard;
   a false 32-bit match only makes a candidate, which verification rejects), packed with
   the document key into one uint64, so a MinHash document with ``b`` bands costs ``8 * b``
   bytes spread over the shards; exact keeps 64 bits, SimHash keeps 64 bits plus the
   uint64 fingerprint.
2. ``candidate_edges``: sort the entries, turn every bucket into star edges (each member ->
   smallest member; SimHash: pairs within ``max_hamming``), free the entries, and return
   the edges routed to the shard that owns their first node.
3. MinHash only, verification: ``receive_candidates``; ``add_signatures`` keeps the full
   signatures of the owned nodes that have a candidate edge; ``forward`` sends
   ``(u, v, sig(u))`` to the owner of ``v``; ``verify`` keeps the pairs whose estimated
   Jaccard (equal signature values / num_perm) reaches the threshold; ``emit_verified``.
4. ``receive`` / ``large_star`` / ``small_star`` / ``roots``: the sharded connected
   components of :mod:`dataforge.ops.dedup.unionfind`.
"""

from __future__ import annotations

import os
import resource

import numpy as np

from dataforge.ops.dedup.simhash import hamming_pairs
from dataforge.ops.dedup.unionfind import (
    EdgeShard,
    bucket_star_edges,
    packed_bucket_star_edges,
    route_edges,
)

__all__ = ["IndexShard"]


class IndexShard:
    """Bucket entries, then edges, of one shard."""

    def __init__(
        self,
        shards: int,
        max_hamming: int | None = None,
        verify_threshold: float | None = None,
    ) -> None:
        self.shards = shards
        self.max_hamming = max_hamming
        self.verify_threshold = verify_threshold
        self._key_dtype = np.uint32 if verify_threshold is not None else np.uint64
        self._candidates = np.zeros((0, 2), dtype=np.int64)
        self._sig_nodes = np.zeros(0, dtype=np.int64)
        self._sigs: np.ndarray | None = None
        self._verified: list[np.ndarray] = []
        self._keys: list[np.ndarray] = []
        self._nodes: list[np.ndarray] = []
        self._fingerprints: list[np.ndarray] = []
        self._edges = EdgeShard()

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
        if self._key_dtype == np.uint32:
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
        """Edges found in this shard's buckets, routed by owner; frees the entries."""
        if self._key_dtype == np.uint32:
            packed = np.concatenate(self._keys) if self._keys else np.zeros(0, np.uint64)
            self._keys = []  # free the pieces before sorting
            return route_edges(packed_bucket_star_edges(packed), self.shards)
        keys = np.concatenate(self._keys) if self._keys else np.zeros(0, self._key_dtype)
        nodes = np.concatenate(self._nodes) if self._nodes else np.zeros(0, np.uint32)
        if self.max_hamming is None:
            edges = bucket_star_edges(keys, nodes)
        else:
            fps = (
                np.concatenate(self._fingerprints) if self._fingerprints else np.zeros(0, np.uint64)
            )
            edges = hamming_pairs(keys, fps, nodes, self.max_hamming)
        self._keys, self._nodes, self._fingerprints = [], [], []
        return route_edges(edges, self.shards)

    # -- verification (MinHash) ------------------------------------------------------------

    def receive_candidates(self, *parts: np.ndarray | list[np.ndarray]) -> int:
        """Keep the candidate edges of the owned nodes; returns how many."""
        flat = [p for part in parts for p in (part if isinstance(part, list) else [part])]
        shard = EdgeShard()
        shard.receive(flat)
        self._candidates = shard.edges
        return len(self._candidates)

    def candidate_nodes(self) -> np.ndarray:
        """The owned nodes that have a candidate edge (their signatures are needed)."""
        return np.unique(self._candidates[:, 0])

    def add_signatures(self, nodes: np.ndarray, signatures: np.ndarray) -> int:
        """Keep the signatures of owned nodes that have a candidate edge."""
        wanted = np.isin(nodes, self._candidates[:, 0])
        if not wanted.any():
            return 0
        nodes, signatures = nodes[wanted].astype(np.int64), signatures[wanted]
        if self._sigs is None:
            self._sig_nodes, self._sigs = nodes, signatures
        else:
            self._sig_nodes = np.concatenate([self._sig_nodes, nodes])
            self._sigs = np.concatenate([self._sigs, signatures])
        return int(wanted.sum())

    def _signatures_of(self, nodes: np.ndarray) -> np.ndarray:
        order = np.argsort(self._sig_nodes)
        pos = order[np.searchsorted(self._sig_nodes, nodes, sorter=order)]
        return self._sigs[pos]

    def forward(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """``(edges (u, v) with u < v, sig(u))`` routed to the owner of ``v``."""
        edges = self._candidates[self._candidates[:, 0] < self._candidates[:, 1]]
        sigs = self._signatures_of(edges[:, 0]) if len(edges) else np.zeros((0, 0), np.uint32)
        owner = edges[:, 1] % self.shards
        return [(edges[owner == i], sigs[owner == i]) for i in range(self.shards)]

    def verify(self, *parts: tuple[np.ndarray, np.ndarray] | list) -> int:
        """Keep the forwarded pairs whose estimated Jaccard reaches the threshold."""
        flat = [p for part in parts for p in (part if isinstance(part, list) else [part])]
        flat = [p for p in flat if len(p[0])]
        if not flat:
            return 0
        edges = np.concatenate([p[0] for p in flat])
        sig_u = np.concatenate([p[1] for p in flat])
        sig_v = self._signatures_of(edges[:, 1])
        similar = (sig_u == sig_v).mean(axis=1) >= self.verify_threshold
        self._verified.append(edges[similar])
        return int(similar.sum())

    def emit_verified(self) -> list[np.ndarray]:
        """Verified edges, routed for the components; frees the verification state."""
        edges = np.concatenate(self._verified) if self._verified else np.zeros((0, 2), np.int64)
        self._candidates, self._sigs, self._verified = np.zeros((0, 2), np.int64), None, []
        return route_edges(edges, self.shards)

    # -- connected components ---------------------------------------------------------------

    def receive(self, *parts: np.ndarray | list[np.ndarray]) -> bool:
        """Take this shard's edges from every sender; True if the edge set changed."""
        flat = [p for part in parts for p in (part if isinstance(part, list) else [part])]
        return self._edges.receive(flat)

    def large_star(self) -> list[np.ndarray]:
        return route_edges(self._edges.large_star(), self.shards)

    def small_star(self) -> list[np.ndarray]:
        return route_edges(self._edges.small_star(), self.shards)

    def roots(self) -> tuple[np.ndarray, np.ndarray]:
        return self._edges.roots()
