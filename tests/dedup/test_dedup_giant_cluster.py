"""One giant cluster (10^5 copies of an error page) costs what 10^5 distinct records cost:
copies collapsed before MinHash and SimHash, candidate pairs linear in the cluster, star clustering linear in the edges, and the same
stars as the round-per-link clustering it replaced."""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow.parquet as pq
import pytest
from dedup_testkit import kept_ids, make_table
from hypothesis import given, settings
from hypothesis import strategies as st

from dataforge.ops.dedup import runs as edge_runs
from dataforge.ops.dedup.buckets import bucket_pair_edges, repeated_buckets
from dataforge.ops.dedup.runs import EdgeRuns
from dataforge.ops.dedup.star import StarWalk, star_clusters

COPIES = 100_000
PAGE = "404 Not Found: the requested URL was not found on this server, please check the address"


def _distinct_texts(count: int, seed: int = 7) -> list[str]:
    """Short texts of 14 random pseudo-words each: no two share a word bigram by chance
    often enough to reach a Jaccard of 0.4."""
    rng = np.random.default_rng(seed)
    syllables = np.array(["ka", "lo", "mi", "ne", "ru", "ta", "vo", "shi", "pe", "gu", "zo", "bel"])
    words = ["".join(rng.choice(syllables, 3)) + str(i) for i in range(4000)]
    return [" ".join(rng.choice(words, 14)) for _ in range(count)]


@pytest.mark.parametrize("method", ["exact", "minhash", "simhash"])
def test_giant_cluster_keeps_one_copy_and_every_distinct_record(tmp_path, method):
    from dedup_testkit import run_dedup

    distinct = _distinct_texts(300)
    # Distinct records sort before, among and after the copies (keys follow ids).
    ids = [f"c{i:06d}" for i in range(COPIES)]
    ids += [("a{:06d}", "c{:06d}z", "d{:06d}")[i % 3].format(i * 300) for i in range(300)]
    texts = [PAGE] * COPIES + distinct
    table = make_table(texts, ["en"] * len(texts), ids=ids)
    summary, out, root = run_dedup(tmp_path, table, batch=25_000, method=method)
    assert kept_ids(out) == {"c000000", *ids[COPIES:]}
    assert summary["dropped"] == COPIES - 1 and summary["clusters"] == 1
    # Candidates linear in the copies: exact pairs each copy with the kept one; MinHash
    # and SimHash collapse the copies onto it before their index (one head, no pair).
    if method == "exact":
        assert summary["candidate_pairs"] == COPIES - 1
    else:
        assert summary["copies"] == COPIES - 1
        assert summary["candidate_pairs"] == summary["verified_pairs"] == 0
    audit = pq.read_table(root / "dedup" / "clusters.parquet")
    assert audit.num_rows == COPIES
    assert set(audit.column("cluster").to_pylist()) == {"c000000"}
    assert sum(audit.column("kept").to_pylist()) == 1


def _round_per_link_star(edges, similarity, fixed_representatives=0):
    """The clustering before it became linear: rounds, where a node decides once all its
    smaller neighbours have (one round per link of a chain)."""
    edges = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    sim = np.asarray(similarity, dtype=np.float64)
    keep = edges[:, 0] != edges[:, 1]
    edges, sim = edges[keep], sim[keep]
    nodes = np.unique(edges)
    if len(nodes) == 0:
        return nodes, nodes.copy(), np.zeros(0)
    a, b = np.searchsorted(nodes, edges[:, 0]), np.searchsorted(nodes, edges[:, 1])
    big, small = np.maximum(a, b), np.minimum(a, b)
    order = np.lexsort((small, -sim, big))
    big, small, sim = big[order], small[order], sim[order]
    state = np.zeros(len(nodes), dtype=np.int8)
    state[nodes < fixed_representatives] = 1
    rep = np.arange(len(nodes))
    rep_sim = np.ones(len(nodes))
    while (state == 0).any():
        live = state[big] == 0
        big, small, sim = big[live], small[live], sim[live]
        waiting = np.bincount(big[state[small] == 0], minlength=len(nodes)) > 0
        ready = (state == 0) & ~waiting
        to_rep = ready[big] & (state[small] == 1)
        cand_big, cand_small, cand_sim = big[to_rep], small[to_rep], sim[to_rep]
        first = np.concatenate([[True], cand_big[1:] != cand_big[:-1]]) if len(cand_big) else []
        joined = cand_big[first]
        state[ready] = 1
        state[joined] = 2
        rep[joined] = cand_small[first]
        rep_sim[joined] = cand_sim[first]
    return nodes, nodes[rep], rep_sim


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 30), st.integers(0, 30), st.sampled_from([0.5, 0.7, 0.9, 1.0])),
        max_size=90,
    ),
    st.integers(0, 5),
)
def test_star_clusters_equal_the_round_per_link_clustering(triples, fixed):
    edges = np.array([(u, v) for u, v, _ in triples], dtype=np.int64).reshape(-1, 2)
    sims = np.array([s for _, _, s in triples])
    got = star_clusters(edges, sims, fixed_representatives=fixed)
    want = _round_per_link_star(edges, sims, fixed_representatives=fixed)
    assert [g.tolist() for g in got] == [w.tolist() for w in want]


def _walked(edges, sims, fixed, cuts, hold=None, spill=None):
    """Star members through EdgeRuns (added in pieces, spilled past ``hold``) and a
    StarWalk over the ranges cut at ``cuts``."""
    runs = EdgeRuns(hold, spill)
    keep = edges[:, 0] != edges[:, 1]
    edges, sims = edges[keep], sims[keep]
    oriented = np.stack([edges.min(axis=1), edges.max(axis=1)], axis=1)
    # an edge listed twice counts once (the shards hold each pair once)
    _, first = np.unique(oriented, axis=0, return_index=True)
    first.sort()
    oriented, sims = oriented[first], sims[first]
    for lo in range(0, len(oriented), 7):
        runs.add(oriented[lo : lo + 7], sims[lo : lo + 7])
    walk = StarWalk(64, fixed_representatives=fixed)
    bounds = [0, *sorted(set(cuts)), 1 << 31]
    members = [walk.decide(*runs.between(lo, hi), lo, hi) for lo, hi in itertools.pairwise(bounds)]
    runs.clear()
    return [np.concatenate([np.zeros(0), *(m[i] for m in members)]).tolist() for i in range(3)]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 30), st.integers(0, 30), st.sampled_from([0.5, 0.7, 0.9, 1.0])),
        max_size=90,
        unique_by=lambda t: (min(t[0], t[1]), max(t[0], t[1])),
    ),
    st.integers(0, 5),
    st.lists(st.integers(1, 31), max_size=6),
    st.sampled_from([None, 16, 200]),
    st.sampled_from([16, 2]),
)
def test_star_walk_by_ranges_equals_star_clusters(
    tmp_path_factory, triples, fixed, cuts, hold, fan_in
):
    """Ranges of the larger node decided in turn, the edges held or in sorted runs on
    disk: the same members, representatives and similarities as all at once."""
    edges = np.array([(u, v) for u, v, _ in triples], dtype=np.int64).reshape(-1, 2)
    sims = np.array([s for _, _, s in triples])
    nodes, reps, rep_sims = star_clusters(edges, sims, fixed_representatives=fixed)
    joined = reps != nodes
    want = [nodes[joined].tolist(), reps[joined].tolist(), rep_sims[joined].tolist()]
    spill = str(tmp_path_factory.mktemp("runs"))
    # runs of any size (the shipped floor is 4096 edges); 2: merged level by level
    default = edge_runs.FAN_IN, edge_runs.MIN_RUN_ROWS
    edge_runs.FAN_IN, edge_runs.MIN_RUN_ROWS = fan_in, 1
    try:
        assert _walked(edges, sims, fixed, cuts, hold, spill) == want
    finally:
        edge_runs.FAN_IN, edge_runs.MIN_RUN_ROWS = default


@pytest.mark.parametrize("fan_in", [16, 3])
def test_edge_runs_spill_sorted_runs_and_cut_ranges(tmp_path, monkeypatch, fan_in):
    """Sorted runs on disk (with ``fan_in`` 3, merged level by level: 3 runs of a level
    become one of the next) give the held edges' histogram and ranges."""
    monkeypatch.setattr(edge_runs, "FAN_IN", fan_in)
    monkeypatch.setattr(edge_runs, "MIN_RUN_ROWS", 1)
    rng = np.random.default_rng(3)
    big = rng.integers(1, 5000, 20_000)
    small = (big * rng.random(20_000)).astype(np.int64)
    pairs = np.unique(np.stack([small, big], axis=1), axis=0)
    pairs = pairs[rng.permutation(len(pairs))]
    sims = rng.random(len(pairs))
    runs = EdgeRuns(hold_bytes=120_000, spill_root=str(tmp_path))
    for lo in range(0, len(pairs), 1000):
        runs.add(pairs[lo : lo + 1000], sims[lo : lo + 1000])
    runs.finish()
    assert runs.spilled_runs > 5 and runs.count == len(pairs)
    on_disk = sorted(p.name for p in next(tmp_path.iterdir()).iterdir())
    assert len(on_disk) == (
        runs.spilled_runs if fan_in == 16 else 3
    )  # 7 runs and 2 merges: one of level 0, two of 1
    assert runs.histogram(6, 79).tolist() == np.bincount(pairs[:, 1] >> 6, minlength=79).tolist()
    assert runs.histogram(6, 10)[-1] == (pairs[:, 1] >> 6 >= 9).sum()  # the last takes the rest
    b, s, sim = runs.between(1000, 2500)
    mine = (pairs[:, 1] >= 1000) & (pairs[:, 1] < 2500)
    order = np.lexsort((pairs[mine, 0], pairs[mine, 1]))
    assert b.tolist() == pairs[mine, 1][order].tolist()
    assert s.tolist() == pairs[mine, 0][order].tolist()
    assert sim.tolist() == sims[mine][order].tolist()
    runs.clear()
    assert list(tmp_path.iterdir()) == []  # the runs' directory is gone


def test_star_walk_refuses_ranges_out_of_order():
    walk = StarWalk(10)
    walk.decide(np.array([5]), np.array([1]), np.array([1.0]), 4, 8)
    with pytest.raises(ValueError, match="before 8"):
        walk.decide(np.array([3]), np.array([1]), np.array([1.0]), 0, 4)
    with pytest.raises(ValueError, match="outside the range"):
        walk.decide(np.array([9]), np.array([1]), np.array([1.0]), 8, 9)


@pytest.mark.parametrize("links", [1, 2, 15])
def test_chains_in_key_order_equal_the_round_per_link_clustering(links):
    """Paths of edits (each node near the few before it), the shape that took one round
    per link: long enough that the clustering walks them node by node."""
    n = 1500
    rng = np.random.default_rng(links)
    edges = np.concatenate(
        [np.stack([np.arange(d, n), np.arange(n - d)], axis=1) for d in range(1, links + 1)]
    )
    sims = rng.choice([0.6, 0.8, 1.0], size=len(edges))
    got = star_clusters(edges, sims, fixed_representatives=2)
    want = _round_per_link_star(edges, sims, fixed_representatives=2)
    assert [g.tolist() for g in got] == [w.tolist() for w in want]


def test_exact_copies_cluster_around_the_smallest():
    k = 50_000
    members = np.arange(1, k)
    edges = np.concatenate(
        [np.stack([members, np.zeros_like(members)], axis=1)]
        + [np.stack([members[members > d], members[members > d] - d], axis=1) for d in (1, 5)]
    )
    nodes, reps, sims = star_clusters(edges, np.ones(len(edges)))
    assert nodes.tolist() == list(range(k)) and not reps.any() and (sims == 1.0).all()


def _repeated_reference(nodes, starts, sizes):
    seen, out = set(), []
    for start, size in zip(starts.tolist(), sizes.tolist(), strict=True):
        members = tuple(nodes[start : start + size].tolist())
        out.append(size > 1 and members in seen)
        seen.add(members)
    return out


@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(st.integers(0, 6), max_size=5), max_size=12), st.integers(1, 4))
def test_repeated_buckets_expand_once_and_give_the_same_pairs(buckets, partners):
    """Buckets with the same members are flagged after their first, and copies of buckets
    under other keys change no pair."""
    lists = [sorted(b) for b in buckets]
    nodes = np.array([n for b in lists for n in b], dtype=np.int64)
    sizes = np.array([len(b) for b in lists], dtype=np.int64)
    starts = np.cumsum(sizes) - sizes
    assert repeated_buckets(nodes, starts, sizes).tolist() == _repeated_reference(
        nodes, starts, sizes
    )
    keys = np.repeat(np.arange(len(lists), dtype=np.uint64), sizes)
    once = bucket_pair_edges(keys, nodes.astype(np.uint32), partners)
    copies = bucket_pair_edges(
        np.concatenate([keys, keys + np.uint64(100)]),
        np.concatenate([nodes, nodes]).astype(np.uint32),
        partners,
    )
    assert copies.tolist() == once.tolist()
