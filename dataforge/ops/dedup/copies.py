"""Exact copies before near-duplicate search: one head per normalized text.

MinHash and SimHash pair every member of a bucket with up to ``max_partners`` others and
verify each pair on the texts, so ``k`` copies of one text cost ``16 k`` verifications,
and a copy that is paired with neither the representative nor an earlier copy of it can
start a cluster of its own. Before candidate generation the planner therefore groups the
records by the exact hash of their normalized text (``_text_hash``, made by ``prepare``
with the hash exact dedup trusts: 64 bits, any false collision among ``n`` distinct texts
~``n^2 / 2^65``), routed by hash to the index shards (:func:`copy_pairs` on each: a group
is whole on one shard, whatever the shard count). Only each group's head, its smallest
key (the record ``keep`` prefers), is indexed, screened and verified; every copy then
takes its head's place in the star clusters (:func:`join_heads`): dropped for the
head's representative with the head's similarity to it, or for the head itself (1.0).
Equal normalized texts have equal shingles, so verification would find the same.
"""

from __future__ import annotations

import numpy as np

__all__ = ["copy_pairs", "join_heads"]


def copy_pairs(text_hashes: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    """``(copy, head)`` for every record whose text hash an earlier (smaller) node has:
    the head is the smallest node of that hash.

    Returns:
        ``(k, 2)`` int64, sorted by copy.
    """
    hashes = np.asarray(text_hashes, np.uint64)
    nodes = np.asarray(nodes, np.int64)
    order = np.lexsort((nodes, hashes))
    hashes, nodes = hashes[order], nodes[order]
    first = np.ones(len(nodes), dtype=bool)
    np.not_equal(hashes[1:], hashes[:-1], out=first[1:])
    head = nodes[np.maximum.accumulate(np.where(first, np.arange(len(nodes)), 0))]
    pairs = np.stack([nodes[~first], head[~first]], axis=1)
    return pairs[np.argsort(pairs[:, 0], kind="stable")]


def join_heads(
    stars: tuple[np.ndarray, np.ndarray, np.ndarray], copies: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The star clusters of the heads (``(nodes, representatives, similarity)`` of
    :func:`dataforge.ops.dedup.star.star_clusters`) with every copy in its head's cluster;
    a head outside them becomes a representative of its copies."""
    nodes, reps, sims = stars
    if len(copies) == 0:
        return stars
    copy, head = copies[:, 0], copies[:, 1]
    pos = np.minimum(np.searchsorted(nodes, head), max(len(nodes) - 1, 0))
    found = nodes[pos] == head if len(nodes) else np.zeros(len(head), bool)
    # A representative's own similarity is 1.0: its copies are dropped at 1.0.
    copy_rep = np.where(found, reps[pos] if len(nodes) else 0, head)
    copy_sim = np.where(found, sims[pos] if len(nodes) else 0.0, 1.0)
    lone = np.unique(head[~found])
    all_nodes = np.concatenate([nodes, copy, lone])
    order = np.argsort(all_nodes, kind="stable")
    return (
        all_nodes[order],
        np.concatenate([reps, copy_rep, lone])[order],
        np.concatenate([sims, copy_sim, np.ones(len(lone))])[order],
    )
