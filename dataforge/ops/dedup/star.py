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

A node's smaller neighbours are ranked best first (similarity descending, then key); the
walk gives it the first one that is not a member, if that one is a representative, and
makes it a representative when all of them are members. So a node is decided as soon as
that first non-member is decided, not when all its neighbours are: in vectorized rounds,
each linear in the edges left, where an edge to a member is dropped for good. Exact copies
(every member's best edge goes to the smallest copy) take one round whatever their
number. A chain of nodes that each wait for the previous one (a path of edits in key
order) would take a round per link: once a round no longer removes a quarter of the
work left, the rest is walked node by node, so the whole costs O(nodes + edges).
"""

from __future__ import annotations

import numpy as np

__all__ = ["StarWalk", "star_clusters"]

_UNDECIDED, _REPRESENTATIVE, _MEMBER = 0, 1, 2
_MIN_PROGRESS = 0.75
"""A round must leave at most this share of the work (edges + undecided nodes) of the
previous one, else the walk finishes node by node: the rounds then cost at most
``1 / (1 - 0.75) = 4`` times the first one."""


def star_clusters(
    edges: np.ndarray, similarity: np.ndarray, fixed_representatives: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Greedy star clustering of an undirected edge list, all at once.

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
    if not keep.all():
        edges, sim = edges[keep], sim[keep]
    del keep
    big, small = edges.max(axis=1), edges.min(axis=1)
    del edges
    nodes, rep, rep_sim = _decide(big, small, sim, lambda n: np.zeros(len(n), bool), 0,
                                  fixed_representatives)  # fmt: skip
    return nodes, nodes[rep], rep_sim


class StarWalk:
    """The same star clusters, decided range by range of the larger node, in key order.

    A node's decision needs only the final state of its smaller neighbours, so the edges
    can come a range of larger nodes at a time (``decide``, ranges in increasing order):
    the nodes of earlier ranges are final, and of them only which ones are members is
    kept, one bit per key below ``key_count``. Returns, per range, the members decided in
    it; a node with an edge that is not a member is a representative.
    """

    def __init__(self, key_count: int, fixed_representatives: int = 0) -> None:
        self.fixed = fixed_representatives
        self._member_bits = np.zeros((max(key_count, 0) + 7) // 8, np.uint8)
        self._next = 0

    def _is_member(self, nodes: np.ndarray) -> np.ndarray:
        return (self._member_bits[nodes >> 3] >> (nodes & 7).astype(np.uint8)) & 1 == 1

    def decide(
        self, big: np.ndarray, small: np.ndarray, similarity: np.ndarray, lo: int, hi: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Decide the nodes in ``[lo, hi)`` from the edges whose larger node ``big`` is in
        it (``small < big``). Returns ``(members, representatives, similarity)`` of the
        nodes of the range that joined a representative, sorted by node."""
        if lo < self._next:
            raise ValueError(f"StarWalk.decide: range [{lo}, {hi}) before {self._next}")
        self._next = hi
        big = np.asarray(big, np.int64)
        small = np.asarray(small, np.int64)
        keep = small != big
        big, small, sim = big[keep], small[keep], np.asarray(similarity, np.float64)[keep]
        if len(big) and (big.min() < lo or big.max() >= hi or (small > big).any()):
            raise ValueError(f"StarWalk.decide: an edge outside the range [{lo}, {hi})")
        nodes, rep, rep_sim = _decide(big, small, sim, self._is_member, lo, self.fixed)
        joined = (nodes >= lo) & (rep != np.arange(len(nodes)))
        members = nodes[joined]
        np.bitwise_or.at(self._member_bits, members >> 3, (1 << (members & 7)).astype(np.uint8))
        return members, nodes[rep[joined]], rep_sim[joined]


def _decide(big, small, sim, is_member, lo: int, fixed: int):
    """The walk over edges ``big > small``: the nodes below ``lo`` are final (members
    where ``is_member``, else representatives), nodes below ``fixed`` representatives.
    Returns ``(nodes, rank of the representative, similarity to it)``, nodes sorted."""
    nodes = np.unique(np.concatenate([big, small]))
    if len(nodes) == 0:
        return nodes, np.zeros(0, np.int64), np.zeros(0)
    # Dense ranks preserve key order; edges point from the larger to the smaller node.
    # Ranks fit int32 (nodes < 2^31): half the bytes of every per-edge array below.
    big = np.searchsorted(nodes, big).astype(np.int32)
    small = np.searchsorted(nodes, small).astype(np.int32)
    # Best edge first: by node, then similarity descending, then smaller neighbour.
    order = np.lexsort((small, -sim, big))
    big, small, sim = big[order], small[order], sim[order]
    del order
    state = np.full(len(nodes), _UNDECIDED, dtype=np.int8)
    earlier = nodes < lo
    if earlier.any():
        state[earlier] = np.where(is_member(nodes[earlier]), _MEMBER, _REPRESENTATIVE)
    state[nodes < fixed] = _REPRESENTATIVE
    rep = np.arange(len(nodes))
    rep_sim = np.ones(len(nodes))
    live = state[big] == _UNDECIDED
    big, small, sim = big[live], small[live], sim[live]
    undecided = np.flatnonzero(state == _UNDECIDED)
    work = len(big) + len(undecided)
    while len(undecided):
        big, small, sim, undecided = _round(big, small, sim, undecided, state, rep, rep_sim)
        left = len(big) + len(undecided)
        if left > _MIN_PROGRESS * work:
            _walk(big, small, sim, undecided, state, rep, rep_sim)
            break
        work = left
    return nodes, rep, rep_sim


def _round(big, small, sim, undecided, state, rep, rep_sim):
    """Decide every node whose first non-member neighbour is decided; returns the edges
    and nodes still undecided (edges to members dropped)."""
    useful = state[small] != _MEMBER  # an edge to a member never decides anything
    big, small, sim = big[useful], small[useful], sim[useful]
    first = np.ones(len(big), dtype=bool)
    np.not_equal(big[1:], big[:-1], out=first[1:])
    # No neighbour left but members: a representative (before the members of this round,
    # which may join it).
    at = np.minimum(np.searchsorted(big, undecided), max(len(big) - 1, 0))
    alone = big[at] != undecided if len(big) else np.ones(len(undecided), dtype=bool)
    state[undecided[alone]] = _REPRESENTATIVE
    head_big, head_small, head_sim = big[first], small[first], sim[first]
    joins = state[head_small] == _REPRESENTATIVE
    joined = head_big[joins]
    state[joined] = _MEMBER
    rep[joined] = head_small[joins]
    rep_sim[joined] = head_sim[joins]
    still = state[big] == _UNDECIDED
    undecided = undecided[state[undecided] == _UNDECIDED]
    return big[still], small[still], sim[still], undecided


def _walk(big, small, sim, undecided, state, rep, rep_sim) -> None:
    """The greedy walk itself over the undecided nodes, in key order (each one's smaller
    neighbours are decided when it comes)."""
    starts = np.searchsorted(big, undecided).tolist()
    stops = np.searchsorted(big, undecided, side="right").tolist()
    small_list, states = small.tolist(), state.tolist()
    for node, lo, hi in zip(undecided.tolist(), starts, stops, strict=True):
        states[node] = _REPRESENTATIVE
        for edge in range(lo, hi):
            neighbour = small_list[edge]
            if states[neighbour] == _REPRESENTATIVE:
                states[node] = _MEMBER
                rep[node] = neighbour
                rep_sim[node] = sim[edge]
                break
    state[:] = states
