"""Star clusters over verified duplicate edges: every member is near its representative.

Connected components chain: A ~ B and B ~ C put A and C together even when they share
nothing, and one document similar to two unrelated ones joins their clusters. Here a
cluster is a star instead, built greedily in key order (the pivot rule of KwikCluster,
Ailon, Charikar, Newman, JACM 2008, with a fixed order instead of a random one): walking
the nodes from the smallest key up, a node with a verified edge to an earlier
*representative* joins the most similar one (ties: the smallest key); otherwise it becomes
a representative itself. The smallest key is the preferred record (``prefer_source``,
then id), so the representative of every cluster is the record ``keep`` asks for, and
every dropped record was verified against the record that replaced it.

The walk is computed in rounds, vectorized: a node decides once all its smaller
neighbours have decided (round 1: nodes without smaller neighbours become
representatives). The number of rounds is the longest chain of edges with decreasing
keys among undecided nodes: a handful for real duplicates.
"""

from __future__ import annotations

import numpy as np

__all__ = ["star_clusters"]


def star_clusters(
    edges: np.ndarray, similarity: np.ndarray, fixed_representatives: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Greedy star clustering of an undirected edge list.

    Args:
        edges: ``(k, 2)`` int64 node keys (any order, may repeat; self loops ignored).
        similarity: the verified similarity of each edge.
        fixed_representatives: nodes with a key below this are representatives from the
            start (records of ``against`` runs: never dropped, always matchable).

    Returns:
        ``(nodes, representatives, similarity)``: every node that has an edge, sorted;
        its representative (itself for a representative); the similarity to it (1.0 for a
        representative).
    """
    edges = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    sim = np.asarray(similarity, dtype=np.float64)
    keep = edges[:, 0] != edges[:, 1]
    edges, sim = edges[keep], sim[keep]
    nodes = np.unique(edges)
    if len(nodes) == 0:
        return nodes, nodes.copy(), np.zeros(0)
    # Dense ranks preserve key order; edges point from the larger to the smaller node.
    a, b = np.searchsorted(nodes, edges[:, 0]), np.searchsorted(nodes, edges[:, 1])
    big, small = np.maximum(a, b), np.minimum(a, b)
    # Best edge first: by node, then similarity descending, then smaller neighbour.
    order = np.lexsort((small, -sim, big))
    big, small, sim = big[order], small[order], sim[order]
    state = np.zeros(len(nodes), dtype=np.int8)  # 0 undecided, 1 representative, 2 member
    state[nodes < fixed_representatives] = 1
    rep = np.arange(len(nodes))
    rep_sim = np.ones(len(nodes))
    while (state == 0).any():
        live = state[big] == 0
        big, small, sim = big[live], small[live], sim[live]
        waiting = np.bincount(big[state[small] == 0], minlength=len(nodes)) > 0
        ready = (state == 0) & ~waiting
        to_rep = ready[big] & (state[small] == 1)
        # First (best) edge to a representative per ready node.
        cand_big, cand_small, cand_sim = big[to_rep], small[to_rep], sim[to_rep]
        first = np.concatenate([[True], cand_big[1:] != cand_big[:-1]]) if len(cand_big) else []
        joined = cand_big[first]
        state[ready] = 1
        state[joined] = 2
        rep[joined] = cand_small[first]
        rep_sim[joined] = cand_sim[first]
    return nodes, nodes[rep], rep_sim
