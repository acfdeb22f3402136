"""Precision first: exact verification, no merge on shared boilerplate, star clusters."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from dedup_testkit import kept_ids, make_table
from hypothesis import given, settings
from hypothesis import strategies as st

from dataforge.ops.base import OpContext
from dataforge.ops.dedup import Dedup, NormalizeConfig
from dataforge.ops.dedup.config import VerifyConfig
from dataforge.ops.dedup.shingles import ShingleSet
from dataforge.ops.dedup.star import star_clusters
from dataforge.ops.dedup.verify import Texts, verify_pairs

HEAD = "【商品名称】华为旗舰店 家用电器 豪华版【购买日期】2012年3月【评价内容】"
FOOT = (
    "【店铺回复】亲，感谢您对本旗舰店的支持与厚爱，我们会继续努力为您提供更好的商品和服务，"
    "祝您生活愉快！此评价对您有帮助吗？有用（0）没用（0）举报"
)


def _sets(docs: list[list[int]]) -> ShingleSet:
    counts = [len(d) for d in docs]
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    flat = np.array([h for d in docs for h in d], dtype=np.uint64)
    return ShingleSet(flat, offsets)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.lists(st.integers(0, 30), max_size=40), st.lists(st.integers(0, 30), max_size=40)
        ),
        min_size=1,
        max_size=12,
    )
)
def test_jaccard_is_exact(pairs):
    left = _sets([a for a, _ in pairs])
    right = _sets([b for _, b in pairs])
    jaccard, duplicate = verify_pairs(Texts(left, left), Texts(right, right), 0.5, 3, 1.0)
    for (a, b), got, dup in zip(pairs, jaccard, duplicate, strict=True):
        union = set(a) | set(b)
        want = len(set(a) & set(b)) / len(union) if union else 0.0
        assert got == pytest.approx(want)
        assert dup == (want >= 0.5)


def _texts(op: Dedup, texts: list[str], lang: str = "zh") -> Texts:
    return op.verification_texts(pa.array(texts), pa.array([lang] * len(texts)))


def _edit(text: str, rate: float, seed: int) -> str:
    rng = random.Random(seed)
    chars = list(text)
    for _ in range(max(1, int(rate * len(chars)))):
        chars[rng.randrange(len(chars))] = rng.choice(chars)
    return "".join(chars)


def test_template_siblings_are_not_duplicates_but_copies_are(reviews_zh):
    """Two reviews on one shop template share most shingles (Jaccard above the threshold)
    and are still distinct; an edited copy, a truncated copy and a copy with an added
    line are duplicates."""
    op = Dedup(Dedup.Config(), OpContext())
    a, b = (HEAD + reviews_zh[i][:60] + FOOT for i in (0, 1))
    cases = [
        (a, b, False),
        (a, _edit(a, 0.1, 1), True),
        (a, a[: int(len(a) * 0.8)], True),
        (a, "本文来源：人民网　责任编辑：王小明\n" + a, True),
    ]
    texts = _texts(op, [x for x, _, _ in cases] + [y for _, y, _ in cases])
    n = len(cases)
    cfg = op.config
    jaccard, duplicate = verify_pairs(
        texts.take(np.arange(n)),
        texts.take(np.arange(n, 2 * n)),
        cfg.threshold,
        cfg.verify.block,
        cfg.verify.max_own,
    )
    assert jaccard[0] >= cfg.threshold  # the shared template alone passes Jaccard ...
    assert duplicate.tolist() == [want for _, _, want in cases]  # ... but not verification


def _manual_page(command: str, obj: str, own: list[str]) -> str:
    """A page of a Chinese SQL reference: the site's headers and phrasing, and one short
    line of the page's own after each of them."""
    shared = [
        f"{command} -- 删除一个{obj}",
        f"{command} [ IF EXISTS ] name [, ...] [ CASCADE | RESTRICT ]",
        f"{command} 从数据库中删除一个已有的{obj}。",
        f"要执行这个命令，当前用户必须是{obj}的拥有者。",
        f"如果指定的{obj}不存在，那么发出一个通知而不是抛出一个错误。",
        f"要删除的{obj}的名称（可以是模式限定的）。",
        f"级联删除依赖于{obj}的对象，然后删除所有依赖于那些对象的对象。",
        f"如果有任何对象依赖于{obj}，则拒绝删除它。这是默认值。",
        f"{command} 语句符合 SQL 标准。",
    ]
    lines = [command, "名称"]
    for header, line, mine in zip(
        ["大纲", "描述", "权限", "IF EXISTS", "name", "CASCADE", "RESTRICT", "兼容性", "例子"],
        shared,
        own,
        strict=True,
    ):
        lines += [line, header, mine]
    return "\n".join([*lines, "参见", f"CREATE {command[5:]}, ALTER {command[5:]}"])


SEQUENCE_OWN = [
    "序列数字生成器",
    "丢弃它的当前值",
    "所有者或超级用户",
    "不报错只提示",
    "序列名",
    "连同列默认值",
    "被列引用时失败",
    "一次只删一个",
    "DROP SEQUENCE serial;",
]
OPCLASS_OWN = [
    "索引方法的策略",
    "指定索引方法",
    "操作符族保留",
    "仅给出通知",
    "操作符类名",
    "连同使用它的索引",
    "有索引在用时拒绝",
    "标准中没有此语句",
    "DROP OPERATOR CLASS widget_ops USING btree;",
]


def test_templated_manual_pages_are_kept_and_their_copy_is_removed(dedup_runner):
    """Two pages of one Chinese SQL manual (same headers and phrasing, different command
    and content, lines too short for a long own run) are both kept; an edited copy of one
    of them with a footer added is removed, naming its page and the similarity."""
    sequence = _manual_page("DROP SEQUENCE", "序列", SEQUENCE_OWN)
    opclass = _manual_page("DROP OPERATOR CLASS", "操作符类", OPCLASS_OWN)
    copy = _edit(sequence, 0.05, 3) + "\n本文档最后更新于 2024 年 1 月。"
    op = Dedup(Dedup.Config(), OpContext())
    texts = _texts(op, [sequence, sequence], "zh")
    others = _texts(op, [opclass, copy], "zh")
    cfg = op.config
    jaccard, duplicate = verify_pairs(
        texts, others, cfg.threshold, cfg.verify.block, cfg.verify.max_own
    )
    assert jaccard[0] >= cfg.threshold  # the two pages pass Jaccard on the template alone
    assert duplicate.tolist() == [False, True]
    table = make_table(
        [sequence, opclass, copy], ["zh"] * 3, ids=["p1-seq", "p2-opclass", "p3-copy"]
    )
    summary, out, root = dedup_runner(table)
    assert kept_ids(out) == {"p1-seq", "p2-opclass"} and summary["dropped"] == 1
    audit = {r["id"]: r for r in pq.read_table(root / "dedup" / "clusters.parquet").to_pylist()}
    assert audit["p3-copy"]["cluster"] == "p1-seq" and not audit["p3-copy"]["kept"]
    assert audit["p3-copy"]["similarity"] == pytest.approx(jaccard[1])


def test_own_content_rule_per_kind(reviews_zh, docs_en):
    """Character-shingled texts get ``char_block`` and ``char_max_own``, word-shingled
    ones ``block`` and ``max_own``."""
    cfg = Dedup.Config(verify=VerifyConfig(block=20, char_block=7, max_own=0.05, char_max_own=0.02))
    texts = Dedup(cfg, OpContext()).verification_texts(
        pa.array([reviews_zh[0], docs_en[0], reviews_zh[1]]), pa.array(["zh", "en", "zh"])
    )
    assert texts.blocks.tolist() == [7, 20, 7]
    assert texts.max_owns.tolist() == [0.02, 0.05, 0.02]
    assert texts.take(np.array([1, 2])).blocks.tolist() == [20, 7]
    assert Texts.concat([texts, texts.take(np.array([1]))]).blocks.tolist() == [7, 20, 7, 20]


def _greedy_reference(edges, sims, fixed=0):
    """The sequential definition: nodes in key order join the most similar earlier
    representative they have an edge to, else become one."""
    best: dict[tuple[int, int], float] = {}
    for (u, v), s in zip(edges, sims, strict=True):
        if u != v:
            key = (min(u, v), max(u, v))
            best[key] = max(best.get(key, -1.0), s)
    nodes = sorted({x for pair in best for x in pair})
    rep, sim = {}, {}
    for x in nodes:
        choices = [(-s, y) for (y, z), s in best.items() if z == x and rep.get(y) == y]
        if x >= fixed and choices:
            s, y = min(choices)
            rep[x], sim[x] = y, -s
        else:
            rep[x], sim[x] = x, 1.0
    return nodes, rep, sim


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 25), st.integers(0, 25), st.sampled_from([0.5, 0.7, 0.9])),
        max_size=60,
    ),
    st.integers(0, 4),
)
def test_star_clusters_match_the_sequential_definition(triples, fixed):
    edges = np.array([(u, v) for u, v, _ in triples], dtype=np.int64).reshape(-1, 2)
    sims = np.array([s for _, _, s in triples])
    nodes, reps, rep_sim = star_clusters(edges, sims, fixed_representatives=fixed)
    want_nodes, want_rep, want_sim = _greedy_reference(edges.tolist(), sims.tolist(), fixed)
    assert nodes.tolist() == want_nodes
    assert reps.tolist() == [want_rep[x] for x in want_nodes]
    assert rep_sim.tolist() == pytest.approx([want_sim[x] for x in want_nodes])
    # Stars: a representative represents itself; nothing below `fixed` is ever a member.
    rep_of = dict(zip(nodes.tolist(), reps.tolist(), strict=True))
    assert all(rep_of[r] == r for r in rep_of.values())
    assert all(rep_of[x] == x for x in rep_of if x < fixed)


def test_no_chaining_through_a_middle_document():
    # 1 ~ 2 and 2 ~ 3, but 1 and 3 are not similar: 3 must not end in 1's cluster.
    nodes, reps, _ = star_clusters(np.array([[1, 2], [2, 3]]), np.array([0.8, 0.8]))
    assert dict(zip(nodes.tolist(), reps.tolist(), strict=True)) == {1: 1, 2: 1, 3: 3}


def test_audit_names_representative_and_similarity(reviews_zh, dedup_runner):
    """Template siblings all kept; each copy dropped for its own sibling, with the
    verified similarity that decided it."""
    siblings = [HEAD + r[:80] + FOOT for r in reviews_zh[:6]]
    copies = [_edit(s, 0.05, i) for i, s in enumerate(siblings)]
    ids = [f"s{i}" for i in range(6)] + [f"t{i}" for i in range(6)]
    table = make_table(siblings + copies, ["zh"] * 12, ids=ids)
    summary, out, root = dedup_runner(table, batch=5)
    assert kept_ids(out) == {f"s{i}" for i in range(6)}
    assert summary["dropped"] == 6 and summary["clusters"] == 6
    audit = {r["id"]: r for r in pq.read_table(root / "dedup" / "clusters.parquet").to_pylist()}
    for i in range(6):
        assert audit[f"t{i}"]["cluster"] == f"s{i}" and not audit[f"t{i}"]["kept"]
        assert Dedup.Config().threshold <= audit[f"t{i}"]["similarity"] < 1.0
        assert audit[f"s{i}"]["kept"] and audit[f"s{i}"]["similarity"] is None


def test_traditional_and_simplified_copies_with_t2s(reviews_zh, dedup_runner):
    """OpenCC s2t makes traditional copies of real reviews at test time; with
    normalize.t2s every pair is one cluster (recall 1.0) and no other cluster appears."""
    import opencc

    to_traditional = opencc.OpenCC("s2t").convert
    simplified = reviews_zh[:20]
    traditional = [to_traditional(t) for t in simplified]
    assert sum(a != b for a, b in zip(simplified, traditional, strict=True)) >= 15
    ids = [f"s{i:02d}" for i in range(20)] + [f"t{i:02d}" for i in range(20)]
    table = make_table(simplified + traditional, ["zh"] * 40, ids=ids)
    summary, out, root = dedup_runner(table, normalize=NormalizeConfig(t2s=True))
    assert kept_ids(out) == set(ids[:20])
    assert summary["clusters"] == 20 and summary["dropped"] == 20
    audit = pq.read_table(root / "dedup" / "clusters.parquet").to_pylist()
    assert {(r["id"], r["cluster"]) for r in audit if not r["kept"]} == {
        (f"t{i:02d}", f"s{i:02d}") for i in range(20)
    }
    _, plain, _ = dedup_runner(table)
    assert len(kept_ids(plain)) > 20  # without t2s most traditional copies are missed


# -- the compiled kernels (make dedup-verify) against the numpy ones -----------------------

native = pytest.importorskip("dataforge.ops.dedup._verify", reason="make dedup-verify")


def _both(monkeypatch, left: Texts, right: Texts, threshold, block, max_own):
    """verify_pairs with the compiled kernels, then with the numpy ones."""
    from dataforge.ops.dedup import verify

    with_native = verify_pairs(left, right, threshold, block, max_own)
    monkeypatch.setattr(verify, "_verify", None)
    with_numpy = verify_pairs(left, right, threshold, block, max_own)
    monkeypatch.setattr(verify, "_verify", native)
    return with_native, with_numpy


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.lists(st.integers(0, 12), max_size=60),  # few values: long shared runs
            st.lists(st.integers(0, 12), max_size=60),
        ),
        min_size=1,
        max_size=16,
    ),
    st.integers(1, 6),
    st.sampled_from([0.0, 0.3, 0.5, 1.0]),
    st.booleans(),
    st.lists(st.integers(1, 6), min_size=32, max_size=32),
)
def test_native_kernels_equal_numpy_on_generated_sets(pairs, block, max_own, high_bits, blocks):
    # high_bits: values that differ only above bit 40 are one shingle to both kernels;
    # blocks: a run length per document, or (odd blocks[0]) the one ``block`` for all
    shift = np.uint64(1 << 41) if high_bits else np.uint64(0)
    left = _sets([a for a, _ in pairs])
    right = _sets([b for _, b in pairs])
    right = ShingleSet(right.hashes + shift, right.offsets)
    n = len(pairs)
    per_doc = blocks[0] % 2 == 0
    lb = np.array(blocks[:n], np.int64) if per_doc else None
    rb = np.array(blocks[16 : 16 + n], np.int64) if per_doc else None
    with pytest.MonkeyPatch.context() as mp:
        from dataforge.ops.dedup import verify

        mp.setattr(verify, "_CHUNK_ELEMENTS", 24)  # the numpy kernels in several chunks
        (j1, d1), (j2, d2) = _both(
            mp, Texts(left, left, lb), Texts(right, right, rb), 0.0, block, max_own
        )
    assert j1.tolist() == j2.tolist()  # bit for bit, not approximately
    assert d1.tolist() == d2.tolist()
    for (a, b), got in zip(pairs, j1, strict=True):
        union = set(a) | set(b)
        assert got == (len(set(a) & set(b)) / len(union) if union else 0.0)


def _pool(sets: ShingleSet) -> tuple[np.ndarray, np.ndarray]:
    return sets.hashes, sets.offsets


def test_native_own_content_counts_long_unshared_runs():
    # mine: 0 1 2 [7 8 9 10] 3 [11] 4 ; other has 0..6: runs of 4 and 1 unshared positions
    mine = _sets([[0, 1, 2, 7, 8, 9, 10, 3, 11, 4], []])
    other = _sets([[0, 1, 2, 3, 4, 5, 6]])
    one, zero = np.array([0]), np.array([0])
    got = np.frombuffer(native.own(*_pool(mine), one, *_pool(other), zero, 4))
    assert got.tolist() == [0.4]  # the run of 4 counts, the single 11 does not
    got = np.frombuffer(native.own(*_pool(mine), one, *_pool(other), zero, 5))
    assert got.tolist() == [0.0]
    got = np.frombuffer(native.own(*_pool(mine), np.array([1]), *_pool(other), zero, 1))
    assert got.tolist() == [0.0]  # an empty document has no own content
    # one block per pair: the same document measured with 4 and with 5
    got = native.own(*_pool(mine), np.array([0, 0]), *_pool(other), np.array([0, 0]),
                     np.array([4, 5], np.int64))  # fmt: skip
    assert np.frombuffer(got).tolist() == [0.4, 0.0]
    with pytest.raises(ValueError, match="block: 1 values for 2 pairs"):
        native.own(*_pool(mine), np.array([0, 0]), *_pool(other), np.array([0, 0]),
                   np.array([4], np.int64))  # fmt: skip
    with pytest.raises(ValueError, match="block: pair 1 has 0"):
        native.own(*_pool(mine), np.array([0, 0]), *_pool(other), np.array([0, 0]),
                   np.array([4, 0], np.int64))  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.lists(st.integers(0, 9), max_size=30), min_size=1, max_size=8),
    st.lists(st.tuples(st.integers(0, 7), st.integers(0, 7)), min_size=1, max_size=20),
)
def test_verify_rows_reads_pairs_in_place(docs, picks):
    """Pairs given as document numbers into two pools (repeated, in any order) decide as
    the same pairs copied out first, with either kernel."""
    from dataforge.ops.dedup import verify as module
    from dataforge.ops.dedup.verify import verify_rows

    pool = _sets(docs)
    texts = Texts(pool, pool)
    left = np.array([a % len(docs) for a, _ in picks])
    right = np.array([b % len(docs) for _, b in picks])
    want = verify_pairs(texts.take(left), texts.take(right), 0.3, 2, 0.4)
    got = verify_rows(texts, left, texts, right, 0.3, 2, 0.4)
    assert [g.tolist() for g in got] == [w.tolist() for w in want]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(module, "_verify", None)
        got = verify_rows(texts, left, texts, right, 0.3, 2, 0.4)
    assert [g.tolist() for g in got] == [w.tolist() for w in want]


def test_native_kernels_equal_numpy_on_real_text(monkeypatch, reviews_zh):
    """Real reviews, their edited, truncated and template copies: same Jaccard and the
    same decisions from both kernels."""
    op = Dedup(Dedup.Config(), OpContext())
    base = [HEAD + r + FOOT for r in reviews_zh[:40]] + reviews_zh[40:80]
    others = [_edit(t, 0.08, i) if i % 3 == 0 else t[: len(t) * 3 // 4] if i % 3 == 1
              else reviews_zh[(i + 7) % len(reviews_zh)] for i, t in enumerate(base)]  # fmt: skip
    texts = _texts(op, base + others)
    n = len(base)
    cfg = op.config
    (j1, d1), (j2, d2) = _both(
        monkeypatch, texts.take(np.arange(n)), texts.take(np.arange(n, 2 * n)),
        cfg.threshold, cfg.verify.block, cfg.verify.max_own,
    )  # fmt: skip
    assert j1.tolist() == j2.tolist() and d1.tolist() == d2.tolist()
    assert 0 < d1.sum() < n  # both kinds of decision occur


def test_native_kernels_read_4_byte_values_as_the_low_32_bits_of_8_byte_ones():
    """The planner ships verification hashes as 4-byte values; the kernels read them where
    they are. Any mix of widths gives what both sides' low 32 bits give."""
    rng = np.random.default_rng(7)
    docs = [rng.integers(0, 40, rng.integers(0, 50)).tolist() for _ in range(30)]
    wide = _sets(docs)
    high = np.uint64(0xABC) << np.uint64(32)  # bits a 4-byte copy does not have
    wide = ShingleSet(wide.hashes | high, wide.offsets)
    narrow = ShingleSet(wide.hashes.astype(np.uint32), wide.offsets)
    rows = rng.integers(0, 30, 200)
    other = rng.integers(0, 30, 200)
    for kernel, extra in ((native.jaccard, ()), (native.own, (3,))):
        want = np.frombuffer(kernel(*_pool(narrow), rows, *_pool(narrow), other, *extra))
        for a, b in ((wide, narrow), (narrow, wide)):
            got = np.frombuffer(kernel(*_pool(a), rows, *_pool(b), other, *extra))
            assert got.tolist() == want.tolist()
        both_wide = np.frombuffer(kernel(*_pool(wide), rows, *_pool(wide), other, *extra))
        assert both_wide.tolist() == want.tolist()  # the same low bits here
    assert len(set(want.tolist())) > 5  # pairs of every kind, not one value


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.lists(st.integers(0, 9), max_size=30), min_size=1, max_size=8),
    st.lists(st.tuples(st.integers(0, 7), st.integers(0, 7)), max_size=40),
    st.booleans(),
    st.integers(1, 4),
)
def test_native_kernels_reuse_a_repeated_document_exactly(docs, pairs, by_left, block):
    """The kernels keep one side's set while the next pair has the same document (pairs
    come sorted by it): the values are those of each pair computed alone, whether the
    rows repeat in runs (sorted) or not."""
    pool = _sets(docs)
    n = len(docs)
    rows = sorted(((a % n, b % n) for a, b in pairs), key=lambda p: p[0 if by_left else 1])
    left = np.array([a for a, _ in rows], np.int64)
    right = np.array([b for _, b in rows], np.int64)
    for kernel, extra in ((native.jaccard, ()), (native.own, (block,))):
        got = np.frombuffer(kernel(*_pool(pool), left, *_pool(pool), right, *extra)).tolist()
        alone = [
            np.frombuffer(kernel(*_pool(pool), left[i : i + 1], *_pool(pool), right[i : i + 1],
                                 *extra))[0]
            for i in range(len(rows))
        ]  # fmt: skip
        assert got == alone
    for (a, b), got in zip(rows, np.frombuffer(native.jaccard(*_pool(pool), left, *_pool(pool),
                                                              right)), strict=True):  # fmt: skip
        union = set(docs[a]) | set(docs[b])
        assert got == (len(set(docs[a]) & set(docs[b])) / len(union) if union else 0.0)


def test_native_kernels_with_no_pairs_or_empty_pools():
    pool = _sets([[1, 2], []])
    none = np.zeros(0, np.int64)
    assert np.frombuffer(native.jaccard(*_pool(pool), none, *_pool(pool), none)).size == 0
    assert np.frombuffer(native.own(*_pool(pool), none, *_pool(pool), none, 3)).size == 0
    empty = ShingleSet.empty(1)
    one = np.zeros(1, np.int64)
    assert np.frombuffer(native.jaccard(*_pool(empty), one, *_pool(empty), one)).tolist() == [0.0]
    assert np.frombuffer(native.jaccard(*_pool(pool), one, *_pool(empty), one)).tolist() == [0.0]


@pytest.mark.parametrize(
    "side, message",
    [
        ((np.zeros(3, np.uint64), np.array([0, 4], np.int64), [0]), "past the 3 values"),
        ((np.zeros(3, np.uint64), np.array([2, 1], np.int64), [0]), "out of order"),
        ((np.zeros(3, np.uint64), np.array([0, 3], np.int64), [1]), "row 0 is 1"),
        ((np.zeros(3, np.uint64), np.array([0, 3], np.int64), [-1]), "row 0 is -1"),
        ((np.zeros(3, np.uint64), np.array([0, 3], np.int64), [0, 0]), "need as many"),
        ((np.zeros(3, np.float64), np.array([0, 3], np.int64), [0]), "4- or 8-byte integers"),
        ((np.zeros(3, np.uint16), np.array([0, 3], np.int64), [0]), "4- or 8-byte integers"),
        ((np.zeros(3, np.uint64), np.array([0, 3], np.int32), [0]), "offsets: need .* 8-byte"),
        ((np.zeros(3, np.uint64), np.zeros(0, np.int64), [0]), "empty"),
    ],
)
def test_native_kernels_refuse_bad_arrays(side, message):
    values, offsets, rows = side
    side = (values, offsets, np.array(rows, np.int64))
    good = (np.zeros(3, np.uint64), np.array([0, 3], np.int64), np.array([0], np.int64))
    with pytest.raises((ValueError, TypeError), match=message):
        native.jaccard(*good, *side)
    with pytest.raises((ValueError, TypeError), match=message):
        native.own(*good, *side, 2)
    with pytest.raises(ValueError, match="block"):
        native.own(*good, *good, 0)


@pytest.mark.parametrize("shingle", ["auto", "jieba"])
def test_a_shard_shingles_its_texts_as_the_planner_would(shingle, reviews_zh, docs_en):
    """The planner sends its op to the index shards, which shingle the candidates' texts
    themselves (``IndexShard.add_texts``): after a pickle round trip (a Ray actor's copy;
    a set-up jieba segmenter does not travel) the sequences are the planner's own."""
    import pickle

    from dataforge.ops.dedup.index import IndexShard

    op = Dedup(Dedup.Config(shingle=shingle), OpContext())
    op.setup()
    texts = [reviews_zh[0], docs_en[0], reviews_zh[1], ""]
    langs = ["zh", "en", "zh", "zh"]
    want = op.verification_texts(pa.array(texts), pa.array(langs))
    copy = pickle.loads(pickle.dumps(op))
    shard = IndexShard(1, copy.method, texts_of=copy.verification_texts)
    table = pa.table({"text": texts, "lang": langs})
    assert shard.add_texts(np.arange(4), np.zeros((4, 1), np.uint32), table) == 4
    got = next(shard._pool.blocks())[1].texts
    for field in ("shingles", "chars"):
        w, g = getattr(want, field), getattr(got, field)
        assert np.array_equal(w.hashes, g.hashes) and np.array_equal(w.offsets, g.offsets)
    assert got.blocks.tolist() == want.blocks.tolist()
    assert got.max_owns.tolist() == want.max_owns.tolist()
