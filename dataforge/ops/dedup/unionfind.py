"""Connected components over duplicate edges, sharded so that no process needs all edges.

Scheme (the alternating large-star / small-star algorithm of Kiveris et al., "Connected
Components in MapReduce and Beyond", SoCC 2014; an equivalent of Data-Juicer's BTS
sharded union-find): node keys are integers; node ``x`` is owned by shard ``x % shards``.
Every undirected edge ``{x, y}`` is stored twice, as ``(x, y)`` at the owner of ``x`` and
``(y, x)`` at the owner of ``y``, so each shard sees the full neighbourhood ``G(u)`` of the
nodes it owns and nothing else. One round is two steps, each a local vectorized pass
(sort by node, ``np.minimum.reduceat``) followed by a shuffle of the emitted edges to
their owners:

* large-star: ``m = min(G(u) + {u})``; emit ``{v, m}`` for every neighbour ``v > u``;
* small-star: ``N = {v in G(u): v < u}``, ``m = min(N + {u})``; emit ``{v, m}`` for every
  ``v in N + {u}``, ``v != m``.

Both preserve connectivity; the graph stops changing under both steps exactly when every
component is a star around its smallest key (large-star alone has non-star fixpoints, e.g.
``{1, 3}, {2, 3}``) (O(log^2 n) rounds in the worst case, a handful in practice).
Then ``root(u) = min(u, G(u))`` is a local lookup. The same functions run in-process
(:func:`connected_components`) and on Ray actors (``dataforge.runtime.barriers.dedup``).
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "MAX_NODE",
    "EdgeShard",
    "bucket_star_edges",
    "packed_bucket_star_edges",
    "connected_components",
    "route_edges",
]


def bucket_star_edges(bucket_keys: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    """Edges ``(node, smallest node of its bucket)`` for every bucket with 2+ nodes.

    Returns:
        ``(k, 2)`` int64 array; duplicates removed; never a self loop.
    """
    if len(nodes) == 0:
        return np.zeros((0, 2), dtype=np.int64)
    nodes = nodes.astype(np.int64, copy=False)
    order = np.lexsort((nodes, bucket_keys))
    keys, nodes = bucket_keys[order], nodes[order]
    starts = np.flatnonzero(np.concatenate([[True], keys[1:] != keys[:-1]]))
    sizes = np.diff(np.append(starts, len(keys)))
    smallest = np.repeat(nodes[starts], sizes)
    mask = nodes != smallest
    return _unique_edges(np.stack([nodes[mask], smallest[mask]], axis=1))


def packed_bucket_star_edges(packed: np.ndarray) -> np.ndarray:
    """:func:`bucket_star_edges` for entries packed as ``key << 32 | node`` (uint32 each).

    Sorts ``packed`` in place (no argsort, no gathered copies: the memory peak is the
    entries plus two uint32 views) and keeps only buckets with 2+ entries before building
    edges.
    """
    if len(packed) < 2:
        return np.zeros((0, 2), dtype=np.int64)
    packed.sort()
    keys = (packed >> np.uint64(32)).astype(np.uint32)
    same = keys[1:] == keys[:-1]
    del keys
    in_bucket = np.zeros(len(packed), dtype=bool)
    in_bucket[1:] |= same
    in_bucket[:-1] |= same
    entries = packed[in_bucket]
    del in_bucket, same
    return bucket_star_edges(
        (entries >> np.uint64(32)).astype(np.uint32),
        (entries & np.uint64(0xFFFFFFFF)).astype(np.uint32),
    )


MAX_NODE = (1 << 31) - 1


def _unique_edges(edges: np.ndarray) -> np.ndarray:
    """Sorted unique rows; node keys fit 31 bits, so a row packs into one int64 (1-D
    ``np.unique`` is far faster than ``axis=0``)."""
    if len(edges) == 0:
        return np.zeros((0, 2), dtype=np.int64)
    packed = np.unique((edges[:, 0].astype(np.int64) << 32) | edges[:, 1].astype(np.int64))
    return np.stack([packed >> 32, packed & 0xFFFFFFFF], axis=1)


def route_edges(edges: np.ndarray, shards: int) -> list[np.ndarray]:
    """Both directions of each undirected edge, split by the owner of the first node."""
    both = np.concatenate([edges, edges[:, ::-1]]) if len(edges) else edges.reshape(0, 2)
    owner = both[:, 0] % shards
    order = np.argsort(owner, kind="stable")
    both, owner = both[order], owner[order]
    bounds = np.searchsorted(owner, np.arange(shards + 1))
    return [both[bounds[i] : bounds[i + 1]] for i in range(shards)]


class EdgeShard:
    """The directed edges ``(u, v)`` whose ``u`` this shard owns."""

    def __init__(self) -> None:
        self.edges = np.zeros((0, 2), dtype=np.int64)

    def receive(self, parts: list[np.ndarray]) -> bool:
        """Replace the edge set by the union of ``parts``; True if it changed."""
        new = _unique_edges(np.concatenate(parts)) if parts else np.zeros((0, 2), np.int64)
        changed = new.shape != self.edges.shape or not np.array_equal(new, self.edges)
        self.edges = new
        return changed

    def _grouped(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Edges sorted by node (``receive`` keeps them sorted) with group starts and sizes."""
        u, v = self.edges[:, 0], self.edges[:, 1]
        starts = np.flatnonzero(np.concatenate([[True], u[1:] != u[:-1]]))
        sizes = np.diff(np.append(starts, len(u)))
        return u, v, starts, sizes

    def large_star(self) -> np.ndarray:
        """Undirected edges emitted by the large-star step of the owned nodes."""
        if len(self.edges) == 0:
            return np.zeros((0, 2), dtype=np.int64)
        u, v, starts, sizes = self._grouped()
        m = np.repeat(np.minimum(u[starts], np.minimum.reduceat(v, starts)), sizes)
        mask = v > u
        return np.stack([v[mask], m[mask]], axis=1)

    def small_star(self) -> np.ndarray:
        """Undirected edges emitted by the small-star step of the owned nodes."""
        smaller = self.edges[self.edges[:, 1] < self.edges[:, 0]]
        if len(smaller) == 0:
            return np.zeros((0, 2), dtype=np.int64)
        u, v = smaller[:, 0], smaller[:, 1]
        starts = np.flatnonzero(np.concatenate([[True], u[1:] != u[:-1]]))
        sizes = np.diff(np.append(starts, len(u)))
        m_group = np.minimum.reduceat(v, starts)  # v < u, so min(N + {u}) = min(N)
        m = np.repeat(m_group, sizes)
        leaves = np.stack([v[v != m], m[v != m]], axis=1)
        owners = np.stack([u[starts], m_group], axis=1)
        return np.concatenate([leaves, owners])

    def roots(self) -> tuple[np.ndarray, np.ndarray]:
        """``(nodes, roots)`` of the owned nodes; valid once the graph has converged."""
        if len(self.edges) == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        u, v, starts, _ = self._grouped()
        return u[starts], np.minimum(u[starts], np.minimum.reduceat(v, starts))


def connected_components(
    edges: np.ndarray, shards: int = 1, max_rounds: int = 200
) -> tuple[np.ndarray, np.ndarray, int]:
    """In-process sharded components of an edge list.

    Returns:
        ``(nodes, roots, rounds)``: every node that has an edge, its component's smallest
        node, and the number of rounds it took.

    Raises:
        RuntimeError: no convergence within ``max_rounds`` (an internal invariant).
    """
    edges = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    edges = edges[edges[:, 0] != edges[:, 1]]
    if len(edges) and (edges.min() < 0 or edges.max() > MAX_NODE):
        raise ValueError(f"node keys must be in [0, {MAX_NODE}]")
    state = [EdgeShard() for _ in range(shards)]
    _shuffle(state, [edges], shards)
    rounds, changed = 0, True
    while changed:
        if rounds == max_rounds:
            raise RuntimeError(f"connected components did not converge in {max_rounds} rounds")
        rounds += 1
        changed = _shuffle(state, [s.large_star() for s in state], shards)
        changed |= _shuffle(state, [s.small_star() for s in state], shards)
    pairs = [s.roots() for s in state]
    nodes = np.concatenate([p[0] for p in pairs])
    roots = np.concatenate([p[1] for p in pairs])
    order = np.argsort(nodes)
    return nodes[order], roots[order], rounds


def _shuffle(state: list[EdgeShard], emitted: list[np.ndarray], shards: int) -> bool:
    routed = [route_edges(e, shards) for e in emitted]
    changed = [s.receive([r[i] for r in routed]) for i, s in enumerate(state)]
    return any(changed)
