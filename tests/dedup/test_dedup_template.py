"""The corpus's template: counted on the index shards, each pair verified on its residues."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from dedup_testkit import kept_ids, make_table

from dataforge.ops.base import OpContext
from dataforge.ops.dedup import Dedup, template
from dataforge.ops.dedup.config import VerifyConfig
from dataforge.ops.dedup.shingles import ShingleSet
from dataforge.ops.dedup.template import doc_ngrams, frequent, residues, route_ngrams
from dataforge.ops.dedup.verify import ResidueRule, verify_pairs

STOCK = [
    "本页介绍{s}的用法。",
    "名称",
    "描述",
    "如果该对象不存在则不要抛出一个错误，而是发出一个提示。",
    "参数",
    "要使用{s}，你必须是该对象的拥有者。",
    "例子",
    "兼容性：该语句符合标准。",
    "上一页 | 上一级 | 下一页 | 起始页",
]


def _sets(docs: list[list[int]]) -> ShingleSet:
    offsets = np.concatenate([[0], np.cumsum([len(d) for d in docs])]).astype(np.int64)
    return ShingleSet(np.array([h for d in docs for h in d], np.uint32), offsets)


def test_frequent_counts_documents_and_routing_keeps_every_ngram():
    chars = _sets([[5, 3, 5, 7], [5, 3], [5, 9], [3, 3]])
    ngrams = doc_ngrams(chars, np.array([True, True, True, False]))
    assert sorted(ngrams.tolist()) == [3, 3, 5, 5, 5, 7, 9]  # distinct per document
    assert frequent(ngrams, 2).tolist() == [3, 5]
    assert frequent(ngrams, 3).tolist() == [5]
    parts = route_ngrams(ngrams, 3)
    assert sorted(np.concatenate(parts).tolist()) == sorted(ngrams.tolist())
    assert all((p % 3 == i).all() for i, p in enumerate(parts))
    assert len(doc_ngrams(chars, None)) == 0


def test_residues_are_long_runs_beside_the_template():
    chars = _sets([[1, 2, 3, 4, 9, 9, 5, 6, 7, 8, 10], [1, 2, 9], [1, 2, 3, 4, 5]])
    template = np.array([9], np.uint32)
    on = np.array([True, True, False])
    cut = residues(chars, on, template, 4)
    assert cut.counts.tolist() == [9, 0, 0]  # doc 1: a run of 2; doc 2: no template rule
    assert cut.hashes.tolist() == [1, 2, 3, 4, 5, 6, 7, 8, 10]
    assert residues(chars, on, template, 5).hashes.tolist() == [5, 6, 7, 8, 10]
    assert residues(chars, None, template, 1).counts.tolist() == [0, 0, 0]


def _random_pool(seed: int, wide: bool) -> tuple[ShingleSet, np.ndarray, np.ndarray]:
    """40 documents of 0-200 n-grams (some empty, some all template, some of values below
    300: radix passes over equal bytes) drawn from few low-32-bit values (so that documents
    repeat them and share them), a random third not templated, and a template of some of
    the values (the all-ones value among them: a hash set's usual empty mark)."""
    rng = np.random.default_rng(seed)
    low = np.concatenate([rng.integers(0, 1 << 32, 40, dtype=np.uint64), [0, 0xFFFFFFFF]])
    tmpl = np.union1d(rng.choice(low, 15), [7, 0xFFFFFFFF]).astype(np.uint32)
    docs = []
    for d in range(40):
        length = rng.integers(0, 201) if d % 7 else 0
        if d % 5 == 2:
            docs.append(rng.integers(0, 300, length, dtype=np.uint64))
        else:
            docs.append(rng.choice(tmpl if d % 9 == 4 else low, length).astype(np.uint64))
    offsets = np.concatenate([[0], np.cumsum([len(d) for d in docs])]).astype(np.int64)
    hashes = np.concatenate(docs)
    if wide:  # high bits differ between copies of one low-32-bit value: only the low 32 count
        hashes |= rng.integers(0, 1 << 32, len(hashes), dtype=np.uint64) << np.uint64(32)
    else:
        hashes = hashes.astype(np.uint32)
    return ShingleSet(hashes, offsets), rng.random(40) < 0.67, tmpl


def _native_and_numpy(monkeypatch, fn, *args):
    """``fn(*args)`` with the compiled kernels, then with the numpy code."""
    native = fn(*args)
    with monkeypatch.context() as patch:
        patch.setattr(template, "_template", None)
        return native, fn(*args)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("wide", [True, False])
def test_native_template_kernels_equal_numpy(monkeypatch, seed, wide):
    pytest.importorskip("dataforge.ops.dedup._template", reason="make dedup-verify")
    chars, templated, tmpl = _random_pool(seed, wide)
    native, numpy = _native_and_numpy(monkeypatch, doc_ngrams, chars, templated)
    assert native.dtype == numpy.dtype == np.uint32
    assert np.array_equal(native, numpy) and len(native) > 100
    cut_tmpls = (tmpl, tmpl[::2].copy(), np.zeros(0, np.uint32))
    for tmpl_used, run in itertools.product(cut_tmpls, (1, 3, 1000)):
        native, numpy = _native_and_numpy(monkeypatch, residues, chars, templated, tmpl_used, run)
        assert native.hashes.dtype == numpy.hashes.dtype == np.uint32
        assert native.offsets.dtype == numpy.offsets.dtype == np.int64
        assert np.array_equal(native.hashes, numpy.hashes)
        assert np.array_equal(native.offsets, numpy.offsets)
        if run == 1:  # every own position of a templated document is in a run of >= 1
            assert len(native.hashes) > 0
        if run == 1000:
            assert len(native.hashes) == 0
    off = np.zeros(40, bool)
    native, numpy = _native_and_numpy(monkeypatch, residues, chars, off, tmpl, 1)
    assert native.counts.tolist() == numpy.counts.tolist() == [0] * 40
    assert len(_native_and_numpy(monkeypatch, doc_ngrams, chars, off)[0]) == 0


def test_native_template_kernels_check_their_inputs():
    kernels = pytest.importorskip("dataforge.ops.dedup._template", reason="make dedup-verify")
    values = np.arange(6, dtype=np.uint64)
    offsets = np.array([0, 2, 6], np.int64)
    on = np.array([True, False])
    tmpl = np.array([1, 4], np.uint32)
    with pytest.raises(ValueError, match="offsets: offset 1 out of order"):
        kernels.doc_ngrams(values, np.array([0, 7, 6], np.int64), on)
    with pytest.raises(ValueError, match="templated: 3 flags for 2 documents"):
        kernels.doc_ngrams(values, offsets, np.ones(3, bool))
    lookup = kernels.template_set(tmpl)
    with pytest.raises(TypeError, match="templated: need a 1-d contiguous bool array"):
        kernels.residues(values, offsets, on.astype(np.int64), lookup, 1)
    with pytest.raises(TypeError, match="values: need a 1-d contiguous array"):
        kernels.doc_ngrams(values.astype(np.float64), offsets, on)
    with pytest.raises(TypeError, match="template: need"):
        kernels.template_set(tmpl.astype(np.uint64))
    with pytest.raises(TypeError, match=r"template: need a template_set\(...\), got numpy.ndarray"):
        kernels.residues(values, offsets, on, tmpl, 1)
    with pytest.raises(ValueError, match="template: value 1 is below the one before"):
        kernels.template_set(tmpl[::-1].copy())
    with pytest.raises(ValueError, match="run: 0; valid: >= 1"):
        kernels.residues(values, offsets, on, lookup, 0)
    hashes, cuts = kernels.residues(values, offsets, on, lookup, 1)
    assert np.frombuffer(hashes, np.uint32).tolist() == [0]
    assert np.frombuffer(cuts, np.int64).tolist() == [0, 1, 1]


def test_residues_check_the_run_on_either_path(monkeypatch):
    chars = _sets([[1, 2, 3]])
    with pytest.raises(ValueError, match="run: 0; valid: >= 1"):
        residues(chars, np.array([True]), np.zeros(0, np.uint32), 0)
    monkeypatch.setattr(template, "_template", None)
    with pytest.raises(ValueError, match="run: 0; valid: >= 1"):
        residues(chars, np.array([True]), np.zeros(0, np.uint32), 0)


def _edit(text: str, rate: float, rng: random.Random) -> str:
    chars = list(text)
    for _ in range(round(rate * len(chars))):
        chars[rng.randrange(len(chars))] = rng.choice(text)
    return "".join(chars)


def _family(reviews: list[str]) -> list[str]:
    """12 manual pages of one template, each with two short lines of its own."""
    pages = []
    for i in range(12):
        own = [reviews[2 * i][:12], reviews[2 * i + 1][:10]]
        lines = [line.format(s=f"命令{i}") for line in STOCK]
        pages.append("\n".join([*lines[:3], own[0], *lines[3:6], own[1], *lines[6:]]))
    return pages


@pytest.fixture(scope="module")
def family_table(reviews_zh):
    pages = _family(reviews_zh)
    rng = random.Random(3)
    copies = [_edit(pages[0], 0.2, rng), _edit(pages[5], 0.1, rng), pages[7] + "\n" + STOCK[3]]
    texts = pages + copies + reviews_zh[24:34]
    return make_table(texts, ["zh"] * len(texts))


def test_sibling_pages_stay_and_edited_copies_go(dedup_runner, family_table):
    summary, out, run = dedup_runner(family_table)
    ids = family_table.column("id").to_pylist()
    assert kept_ids(out) == set(ids[:12]) | set(ids[15:])
    assert summary["template_ngrams"] > 0
    audit = pq.read_table(run / "dedup" / "clusters.parquet").to_pylist()
    cluster = {r["id"]: r["cluster"] for r in audit if not r["kept"]}
    assert cluster == {ids[12]: ids[0], ids[13]: ids[5], ids[14]: ids[7]}
    assert all(0.4 <= r["similarity"] < 1.0 for r in audit if not r["kept"])
    # Without the template the 20%-edited copy is kept (own content in runs of 9).
    _, out, _ = dedup_runner(family_table, verify={"template_docs": 0})
    assert ids[12] in kept_ids(out) and ids[13] not in kept_ids(out)


def test_template_decisions_do_not_depend_on_batches_shards_or_threads(dedup_runner, family_table):
    runs = [
        dedup_runner(family_table, batch=batch, num_cpus=cpus, index_shards=shards)
        for batch, cpus, shards in ((1000, 1, 1), (5, 2, 3), (7, 2, 4))
    ]
    kept = [kept_ids(out) for _, out, _ in runs]
    assert kept[0] == kept[1] == kept[2]
    audits = [
        sorted(pq.read_table(run / "dedup" / "clusters.parquet").to_pylist(), key=str)
        for _, _, run in runs
    ]
    assert audits[0] == audits[1] == audits[2]
    assert len({s["template_ngrams"] for s, _, _ in runs}) == 1


def test_residue_rule_with_native_and_numpy_kernels(monkeypatch, family_table):
    pytest.importorskip("dataforge.ops.dedup._verify", reason="make dedup-verify")
    from dataforge.ops.dedup import verify

    op = Dedup(Dedup.Config(), OpContext())
    cfg = op.config
    texts = op.verification_texts(family_table.column("text"), family_table.column("lang"))
    template = frequent(doc_ngrams(texts.chars, texts.templated), cfg.verify.template_docs)
    texts = texts.with_residue(
        residues(texts.chars, texts.templated, template, cfg.verify.template_run)
    )
    left, right = np.triu_indices(len(family_table), 1)
    args = (
        texts.take(left),
        texts.take(right),
        cfg.threshold,
        cfg.verify.char_block,
        cfg.verify.char_max_own,
    )
    rule = ResidueRule(
        cfg.verify.residue_max_own, cfg.verify.min_residue, cfg.verify.residue_min_shared
    )
    native = verify_pairs(*args, rule)
    monkeypatch.setattr(verify, "_verify", None)
    numpy = verify_pairs(*args, rule)
    assert np.array_equal(native[0], numpy[0]) and np.array_equal(native[1], numpy[1])
    on_residue = (
        np.minimum(texts.residue.counts[left], texts.residue.counts[right])
        >= cfg.verify.min_residue
    )
    assert on_residue.sum() > 10  # the rule decided pairs here


def test_config_checks_template_keys():
    with pytest.raises(ValueError, match="verify.template_run"):
        VerifyConfig(template_run=0)
    with pytest.raises(ValueError, match="verify.residue_max_own"):
        VerifyConfig(residue_max_own=1.5)
    assert Dedup.Config(verify=VerifyConfig(template_docs=0)).verify.template_docs == 0


def test_texts_take_and_concat_keep_residues(family_table):
    op = Dedup(Dedup.Config(), OpContext())
    texts = op.verification_texts(
        family_table.column("text"), pa.array(["zh"] * 3 + ["en"] * (len(family_table) - 3))
    )
    assert texts.templated.tolist() == [True] * 3 + [False] * (len(family_table) - 3)
    cut = residues(texts.chars, texts.templated, np.zeros(0, np.uint32), 1)
    both = texts.with_residue(cut)
    joined = type(texts).concat([both.take(np.array([2, 0])), both.take(np.array([1]))])
    assert joined.residue.counts.tolist() == cut.counts[[2, 0, 1]].tolist()
    assert joined.templated.tolist() == [True, True, True]
