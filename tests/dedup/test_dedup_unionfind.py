"""Sharded connected components and SimHash near pairs against brute force."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from dataforge.ops.dedup.simhash import block_masks, hamming_pairs, table_keys
from dataforge.ops.dedup.unionfind import (
    bucket_star_edges,
    connected_components,
    packed_bucket_star_edges,
)


def _naive_roots(edges):
    parent = {}

    def find(x):
        parent.setdefault(x, x)
        while parent[x] != x:
            x = parent[x]
        return x

    for a, b in edges:
        if a != b:
            ra, rb = find(a), find(b)
            parent[max(ra, rb)] = min(ra, rb)
    return {x: find(x) for x in parent if any(x in e and e[0] != e[1] for e in edges)}


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 60), st.integers(0, 60)), max_size=120),
    st.integers(1, 5),
)
def test_components_match_union_find(edges, shards):
    nodes, roots, _ = connected_components(np.array(edges, dtype=np.int64).reshape(-1, 2), shards)
    assert dict(zip(nodes.tolist(), roots.tolist(), strict=True)) == _naive_roots(edges)


def test_long_chain_converges_to_smallest():
    rng = np.random.default_rng(1)
    perm = rng.permutation(5001)
    chain = perm[np.stack([np.arange(5000), np.arange(1, 5001)], axis=1)]
    nodes, roots, rounds = connected_components(chain, shards=4)
    assert len(nodes) == 5001 and (roots == 0).all() and rounds < 40


def test_bucket_star_edges():
    keys = np.array([5, 5, 5, 9, 7, 7], np.uint64)
    nodes = np.array([4, 2, 8, 1, 3, 3], np.uint32)
    assert bucket_star_edges(keys, nodes).tolist() == [[4, 2], [8, 2]]


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32), st.integers(1, 5))
def test_hamming_pairs_match_brute_force(seed, k):
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 2**63, size=30, dtype=np.uint64)
    flips = [
        np.uint64(
            sum(1 << int(b) for b in rng.choice(64, size=rng.integers(0, 2 * k + 1), replace=False))
        )
        for _ in range(30)
    ]
    fps = np.concatenate([base, base ^ np.array(flips, np.uint64), base[:5]])
    nodes = np.arange(len(fps))
    masks = block_masks(k, 2 * k)
    keys = table_keys(fps, masks)
    found = hamming_pairs(
        keys.reshape(-1), np.repeat(fps, len(masks)), np.repeat(nodes, len(masks)), k
    )
    got = {tuple(sorted(p)) for p in found.tolist()}
    want = {
        (i, j)
        for i, j in itertools.combinations(range(len(fps)), 2)
        if bin(int(fps[i]) ^ int(fps[j])).count("1") <= k
    }
    # Identical fingerprints are linked to their smallest node (a star) instead of pairwise:
    # compare pairs after mapping every node to the smallest node with its fingerprint.
    head = {}
    for i, f in enumerate(fps.tolist()):
        head.setdefault(f, i)
    heads = [head[f] for f in fps.tolist()]
    assert got <= want
    assert {tuple(sorted((heads[i], heads[j]))) for i, j in want if heads[i] != heads[j]} <= {
        tuple(sorted((heads[i], heads[j]))) for i, j in got if heads[i] != heads[j]
    }
    assert all((heads[i], i) in got for i in range(len(fps)) if heads[i] != i)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 40)), max_size=60))
def test_packed_star_edges_equal_unpacked(entries):
    keys = np.array([k << 7 for k, _ in entries], np.uint32)
    nodes = np.array([n for _, n in entries], np.uint32)
    packed = (keys.astype(np.uint64) << np.uint64(32)) | nodes.astype(np.uint64)
    assert packed_bucket_star_edges(packed).tolist() == bucket_star_edges(keys, nodes).tolist()
