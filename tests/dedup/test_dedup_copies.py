"""Exact copies collapse onto their head before MinHash/SimHash: one group per normalized
text whatever the shard count, every copy in its head's cluster, no split of a cluster."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from dedup_testkit import kept_ids, make_table
from hypothesis import given, settings
from hypothesis import strategies as st

from dataforge.ops.base import OpContext
from dataforge.ops.dedup import TEXT_HASH, Dedup
from dataforge.ops.dedup.calls import text_hash_calls
from dataforge.ops.dedup.copies import join_heads
from dataforge.ops.dedup.index import IndexShard
from dataforge.ops.dedup.method import BucketEntries
from dataforge.ops.dedup.minhash import MinHashMethod
from dataforge.ops.dedup.star import star_clusters


def test_text_hash_is_equal_for_equal_normalized_texts_of_one_kind():
    op = Dedup(Dedup.Config(method="minhash"), OpContext())
    texts = ["Hello, World!", "hello   world", "hello world again", "!!", "你好世界", "你好，世界"]
    langs = ["en", "en", "en", "en", "zh", "zh"]
    table = make_table(texts + ["helloworld", "helloworld"], langs + ["en", "zh"])
    hashes = op.prepare(table).column(TEXT_HASH).to_pylist()
    assert hashes[0] == hashes[1] and hashes[4] == hashes[5]
    assert len({hashes[0], hashes[2], hashes[4]}) == 3
    assert hashes[3] is None  # nothing left: no signature, no hash
    # One normalized string shingled as words and as characters: not copies.
    assert hashes[6] != hashes[7]
    exact = Dedup(Dedup.Config(method="exact"), OpContext())
    assert TEXT_HASH not in exact.prepare(table).column_names


def _reference_pairs(hashes, nodes):
    heads = {}
    for h, n in zip(hashes, nodes, strict=True):
        if h is not None:
            heads[h] = min(heads.get(h, n), n)
    return sorted((n, heads[h]) for h, n in zip(hashes, nodes, strict=True) if h is not None)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.none(), st.integers(0, 6)), max_size=50), st.randoms())
def test_copy_pairs_do_not_depend_on_the_shard_count(values, rnd):
    """Each record with the head of its hash group (the smallest key), routed by hash."""
    op = Dedup(Dedup.Config(method="minhash"), OpContext())
    hashes = [None if v is None else (v * 0x9E3779B97F4A7C15) % 2**64 for v in values]
    nodes = np.array(rnd.sample(range(1000), len(values)), np.int64)
    want = [p for p in _reference_pairs(hashes, nodes.tolist()) if p[0] != p[1]]
    for count in (1, 2, 3, 4):
        shards = [IndexShard(count, op.method) for _ in range(count)]
        for shard, name, args in text_hash_calls(count, op, pa.array(hashes, pa.uint64()), nodes):
            getattr(shards[shard], name)(*args)
        got = np.concatenate([np.zeros((0, 2), np.int64), *(s.copy_pairs() for s in shards)])
        assert sorted(map(tuple, got.tolist())) == want


def test_copies_take_their_heads_place_in_the_stars():
    # 1 ~ 0 (0.8), 3 ~ 2 (0.9); copies: 4 of 1 (a member), 5 of 2 (a representative),
    # 7 of 6 (a head without any near duplicate).
    stars = star_clusters(np.array([[1, 0], [3, 2]]), np.array([0.8, 0.9]))
    copies = np.array([[4, 1], [5, 2], [7, 6], [8, 6]])
    nodes, reps, sims = join_heads(stars, copies)
    assert nodes.tolist() == [0, 1, 2, 3, 4, 5, 6, 7, 8]
    assert reps.tolist() == [0, 0, 2, 2, 0, 2, 6, 6, 6]
    assert sims.tolist() == [1.0, 0.8, 1.0, 0.9, 0.8, 1.0, 1.0, 1.0, 1.0]


@pytest.mark.parametrize("copies", [3, 40])
def test_copies_never_split_off_their_heads_cluster(monkeypatch, docs_en, dedup_runner, copies):
    """One bucket holds an unrelated record (first), a near duplicate of a page and the
    page's copies; with max_partners=2, a copy after the first was paired with the first
    record and the copy before it only, never with the near duplicate its first copy
    joined: it started a cluster of its own (kept a second copy of the page)."""

    def one_bucket(self, signatures):
        rows, _ = self.values(signatures)
        return BucketEntries(rows, np.full((len(rows), 1), 7 << 40, np.uint64))

    monkeypatch.setattr(MinHashMethod, "bucket_keys", one_bucket)
    page, words = docs_en[0], docs_en[0].split()
    near = " ".join([*words[:5], "changed", *words[6:]])
    texts = [docs_en[1], near] + [page] * copies
    ids = ["a", "b"] + [f"c{i:03d}" for i in range(copies)]
    table = make_table(texts, ["en"] * len(texts), ids=ids)
    summary, out, root = dedup_runner(table, verify={"max_partners": 2})
    assert kept_ids(out) == {"a", "b"}
    assert summary["copies"] == copies - 1 and summary["dropped"] == copies
    audit = pq.read_table(root / "dedup" / "clusters.parquet").to_pylist()
    assert {r["cluster"] for r in audit} == {"b"}
    similarity = {r["id"]: r["similarity"] for r in audit}
    assert len({similarity[i] for i in ids[2:]}) == 1 and similarity["b"] is None


@pytest.mark.parametrize("size", [1, 4, 5, 9])
def test_a_head_counts_in_the_template_as_its_whole_copy_group(reviews_zh, size):
    """The template counts documents: a head of ``size`` copies counts ``size`` times, as
    its copies did when they were candidates themselves (template_docs = 5)."""
    op = Dedup(Dedup.Config(method="minhash"), OpContext())
    texts = op.verification_texts(pa.array(reviews_zh[:1]), pa.array(["zh"]))
    shard = IndexShard(1, op.method)
    shard.add_payload(np.array([3]), np.zeros((1, 4), np.uint32), texts)
    shard.add_group_sizes(np.array([3]), np.array([size]))
    distinct = len(np.unique(texts.chars.hashes.astype(np.uint32)))
    assert shard.count_template(*shard.template_counts()) == (distinct if size >= 5 else 0)
