"""Candidate pairs from buckets and SimHash near pairs against brute force."""

from __future__ import annotations

import itertools
from collections import defaultdict

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from dataforge.ops.base import OpContext
from dataforge.ops.dedup import Dedup
from dataforge.ops.dedup import buckets as buckets_module
from dataforge.ops.dedup.buckets import (
    bucket_pair_edges,
    packed_bucket_pair_edges,
    route_edges,
    route_packed,
    unpack_edges,
)
from dataforge.ops.dedup.calls import index_calls
from dataforge.ops.dedup.config import VerifyConfig
from dataforge.ops.dedup.index import IndexShard
from dataforge.ops.dedup.method import BucketEntries
from dataforge.ops.dedup.simhash import block_masks, hamming_pairs, table_keys


def test_bucket_pair_edges_small_bucket_gives_all_pairs():
    keys = np.array([5, 5, 5, 9, 7, 7], np.uint64)
    nodes = np.array([4, 2, 8, 1, 3, 3], np.uint32)
    assert bucket_pair_edges(keys, nodes, max_partners=2).tolist() == [[4, 2], [8, 2], [8, 4]]
    assert bucket_pair_edges(keys, nodes, max_partners=1).tolist() == [[4, 2], [8, 2]]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 40)), max_size=80), st.integers(1, 5))
def test_bucket_pair_edges_match_brute_force(entries, partners):
    keys = np.array([k for k, _ in entries], np.uint64)
    nodes = np.array([n for _, n in entries], np.uint32)
    want = set()
    buckets = defaultdict(set)
    for k, n in entries:
        buckets[k].add(n)
    for members in buckets.values():
        ordered = sorted(members)  # repeated entries of one node count once... or more
        for i, node in enumerate(ordered):
            for j in {0, *range(max(i - partners + 1, 0), i)} - {i}:
                want.add((node, ordered[j]))
    got = {tuple(e) for e in bucket_pair_edges(keys, nodes, partners).tolist()}
    # Every member is paired with the smallest one, and nothing outside its bucket.
    assert {(n, min(m)) for m in buckets.values() for n in m if n != min(m)} <= got
    assert all(any(a in m and b in m for m in buckets.values()) for a, b in got)
    assert all(a > b for a, b in got)
    if all(len([1 for k, n in entries if k == key]) == len(m) for key, m in buckets.items()):
        assert got == want  # without repeated entries, exactly the partner rule


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 6), st.integers(0, 60)), max_size=120),
    st.integers(1, 5),
    st.integers(1, 9),
)
def test_bucket_pair_edges_do_not_depend_on_the_chunk_size(entries, partners, chunk):
    keys = np.array([k for k, _ in entries], np.uint64)
    nodes = np.array([n for _, n in entries], np.uint32)
    whole = bucket_pair_edges(keys, nodes, partners)
    original = buckets_module._PAIR_CHUNK
    buckets_module._PAIR_CHUNK = chunk  # buckets of any size, cut into chunks of ~chunk
    try:
        chunked = bucket_pair_edges(keys, nodes, partners)
    finally:
        buckets_module._PAIR_CHUNK = original
    assert chunked.tolist() == whole.tolist()


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
def test_packed_pair_edges_equal_unpacked(entries):
    keys = np.array([k << 7 for k, _ in entries], np.uint32)
    nodes = np.array([n for _, n in entries], np.uint32)
    packed = (keys.astype(np.uint64) << np.uint64(32)) | nodes.astype(np.uint64)
    want = bucket_pair_edges(keys, nodes, 3)
    assert unpack_edges(packed_bucket_pair_edges(packed, 3)).tolist() == want.tolist()
    assert (
        bucket_pair_edges(keys, nodes, 3, packed=True).tolist()
        == ((want[:, 0] << 32) | want[:, 1]).tolist()
    )


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3), st.integers(0, 30)), max_size=60),
    st.integers(1, 3),
)
def test_minhash_candidates_do_not_depend_on_the_shard_count(entries, partners):
    """A MinHash shard keeps the high 32 bits of a bucket key: keys that differ only in
    their low bits share a bucket, on one shard or on several (the planner's routing)."""
    op = Dedup(Dedup.Config(verify=VerifyConfig(max_partners=partners)), OpContext())
    method = op.method
    assert method.key_bits == 32
    keys = np.array([(high << 32) | low for high, low, _ in entries], np.uint64)
    nodes = np.array([n for _, _, n in entries], np.uint32)
    rows = np.arange(len(entries))
    method.bucket_keys = lambda signatures: BucketEntries(rows, keys.reshape(-1, 1))

    def candidates(count: int) -> list[tuple[int, int]]:
        shards = [IndexShard(count, method) for _ in range(count)]
        for shard, name, args in index_calls(count, op, None, nodes):
            getattr(shards[shard], name)(*args)
        routed = [np.zeros(0, np.int64)]
        for shard in shards:
            routed += shard.candidate_edges()
        edges = unpack_edges(np.concatenate(routed))
        return sorted({tuple(sorted(e)) for e in edges.tolist()})

    want = candidates(1)
    assert all(candidates(count) == want for count in (2, 3, 4))


def test_routed_edges_pack_any_integer_dtype_without_overflow():
    """Nodes up to 2^31 - 1 in 32-bit arrays still pack into one int64 per edge."""
    big = (1 << 31) - 1
    edges = np.array([[big, 3], [4, big - 1]], np.uint32)
    routed = route_edges(edges, 2)
    got = sorted(tuple(e) for part in routed for e in unpack_edges(part).tolist())
    assert got == sorted([(3, big), (4, big - 1), (big, 3), (big - 1, 4)])
    assert all(part.dtype == np.int64 for part in routed)
    # each edge's first node is owned by the shard it went to
    assert all((unpack_edges(part)[:, 0] % 2 == i).all() for i, part in enumerate(routed))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, (1 << 31) - 1), st.integers(0, (1 << 31) - 1))),
       st.integers(1, 5))  # fmt: skip
def test_packed_edges_go_both_ways_to_the_owner_of_their_first_node(pairs, shards):
    edges = np.array(pairs, np.int64).reshape(-1, 2)
    want = [[] for _ in range(shards)]
    for u, v in pairs:  # the pair as u's owner and as v's owner see it
        want[u % shards].append(u << 32 | v)
        want[v % shards].append(v << 32 | u)
    got = route_packed(edges[:, 0] << 32 | edges[:, 1], shards)
    assert [sorted(g.tolist()) for g in got] == [sorted(w) for w in want]
    assert [sorted(g.tolist()) for g in route_edges(edges, shards)] == [sorted(w) for w in want]
