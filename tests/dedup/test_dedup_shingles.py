"""Normalization and vectorized shingle hashing."""

from __future__ import annotations

import contextlib

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dataforge.ops.dedup.shingles as shingles
from dataforge.ops.dedup.shingles import (
    normalize_texts,
    normalized_code_points,
    shingle_hashes,
    text_hashes,
)


def test_normalize_nfkc_lower_strip():
    out = normalize_texts(["Ｈｅｌｌｏ,  World！\n\tos.path", "中文，测试。  abc", "", "!!! ..."])
    assert out.to_pylist() == ["hello world ospath", "中文测试 abc", "", ""]
    chars = normalize_texts(["中文，测试。  abc"], keep_spaces=False)
    assert chars.to_pylist() == ["中文测试abc"]


def test_char_shingle_counts_short_and_empty_docs():
    s = shingle_hashes(pa.array(["abcdefg", "abc", "", "abcde"]), "char", 5)
    # 7 chars -> 3 five-grams; shorter than n -> one shingle (the whole text); empty -> none
    assert s.counts.tolist() == [3, 1, 0, 1]
    assert s.hashes[0] == s.hashes[-1]  # "abcde" hashes the same in both documents
    assert s.hashes[3] != s.hashes[4]  # "abc" (short doc) differs from "abcde"


def test_word_shingles():
    s = shingle_hashes(pa.array(["a b c d", "b c d", "x", ""]), "word", 3)
    assert s.counts.tolist() == [2, 1, 1, 0]
    assert s.hashes[1] == s.hashes[2]  # "b c d" in both documents


def test_text_hashes_equal_iff_equal():
    h = text_hashes(pa.array(["abc", "abc", "abd", "", ""]))
    assert h[0] == h[1] and h[0] != h[2] and h[3] == h[4]


@settings(max_examples=60, deadline=None)
@given(
    st.text(alphabet="ab中文 ", min_size=0, max_size=30),
    st.text(alphabet="ab中文 ", min_size=0, max_size=30),
    st.integers(1, 6),
)
def test_shingle_hashes_independent_of_neighbours(left, right, n):
    """A document's shingles do not depend on the other documents of the batch."""
    alone = shingle_hashes(pa.array([right]), "char", n)
    batch = shingle_hashes(pa.array([left, right]), "char", n)
    got = batch.hashes[batch.offsets[1] : batch.offsets[2]]
    assert np.array_equal(np.sort(got), np.sort(alone.hashes))
    expected = len({right[i : i + n] for i in range(max(len(right) - n + 1, 1))}) if right else 0
    assert len(np.unique(alone.hashes)) == expected


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.text(alphabet="ab中文 ", max_size=12), max_size=8),
    st.integers(1, 4),
    st.sampled_from(["char", "word"]),
    st.integers(1, 20),
)
def test_grouped_hashing_equals_one_pass(texts, n, kind, group):
    """Batches longer than the group size are hashed a group of documents at a time by the
    numpy code (to bound the power tables); every hash and offset is the one of a single
    pass."""
    arr = pa.array(texts, pa.string())
    with numpy_kernels():
        whole = shingle_hashes(arr, kind, n)
        whole_text = text_hashes(arr)
        saved = shingles._GROUP_CODE_POINTS
        shingles._GROUP_CODE_POINTS = group
        try:
            grouped = shingle_hashes(arr, kind, n)
            grouped_text = text_hashes(arr)
        finally:
            shingles._GROUP_CODE_POINTS = saved
    assert grouped.offsets.tolist() == whole.offsets.tolist()
    assert grouped.hashes.tolist() == whole.hashes.tolist()
    assert grouped_text.tolist() == whole_text.tolist()


def test_doc_groups_bound_code_points():
    from dataforge.ops.dedup.shingles import _doc_groups

    offsets = np.array([0, 3, 3, 10, 11, 30, 31])
    assert _doc_groups(offsets) == [0, 6]  # under the default size: one group
    import dataforge.ops.dedup.shingles as shingles

    saved = shingles._GROUP_CODE_POINTS
    shingles._GROUP_CODE_POINTS = 8
    try:
        # docs 0-1 ([0,3)), docs 2-3 ([3,11): 8 fit), doc 4 ([11,30): 19 > 8, alone), doc 5
        assert _doc_groups(offsets) == [0, 2, 4, 5, 6]
    finally:
        shingles._GROUP_CODE_POINTS = saved


def test_huge_document_is_capped_consistently():
    rng = np.random.default_rng(0)
    big = "".join(rng.choice(list("的一是在不了有和人这中大为上个国我以要他"), size=2_000_000))
    s = shingle_hashes(pa.array([big, big + "尾", "短文本"]), "char", 5, max_shingles=5000)
    assert s.counts.tolist()[:2] == [5000, 5000]
    first = s.hashes[: s.offsets[1]]
    second = s.hashes[s.offsets[1] : s.offsets[2]]
    assert len(np.intersect1d(first, second)) >= 4990  # bottom-k samples agree
    assert s.counts[2] == 1


def _decode(cps, offsets):
    text = (cps - 1).astype(np.uint32).tobytes().decode("utf-32-le")
    return [text[offsets[i] : offsets[i + 1]] for i in range(len(offsets) - 1)]


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.text(alphabet="aZ 中文，。！,.\n\t\u3000Ｂ©-—😀", max_size=20), max_size=6),
    st.booleans(),
)
def test_numpy_normalization_matches_arrow_reference(texts, keep_spaces):
    arr = pa.array(texts, pa.string())
    want = normalize_texts(arr, keep_spaces=keep_spaces).to_pylist()
    assert _decode(*normalized_code_points(arr, keep_spaces=keep_spaces)) == want


@contextlib.contextmanager
def numpy_kernels():
    """The numpy code, as where ``_shingles`` is not built."""
    saved = shingles._shingles
    shingles._shingles = None
    try:
        yield
    finally:
        shingles._shingles = saved


native = pytest.mark.skipif(shingles._shingles is None, reason="make dedup-verify builds it")


@native
@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.text(alphabet="ab中文 é\n", max_size=40), max_size=10),
    st.integers(1, 8),
    st.sampled_from(["char", "word"]),
)
def test_compiled_hashes_equal_numpy(texts, n, kind):
    arr = pa.array(texts, pa.string())
    points = normalized_code_points(arr, keep_spaces=kind == "word")
    got, got_text = shingle_hashes(points, kind, n), text_hashes(points)
    with numpy_kernels():
        want, want_text = shingle_hashes(points, kind, n), text_hashes(points)
    assert got.offsets.tolist() == want.offsets.tolist()
    assert got.hashes.tolist() == want.hashes.tolist()
    assert got_text.tolist() == want_text.tolist()


@native
def test_compiled_hashes_equal_numpy_on_long_real_text(reviews_zh, docs_en):
    """Windows longer than any hypothesis example, documents past the numpy code's group
    size (its power tables and group joins), capped documents."""
    texts = [*reviews_zh, *docs_en]
    long_doc = "".join(texts) * 3
    arr = pa.array([*texts, long_doc, ""])
    for kind, n in (("char", 5), ("char", 13), ("word", 3), ("word", 9)):
        points = normalized_code_points(arr, keep_spaces=kind == "word")
        got = shingle_hashes(points, kind, n, max_shingles=3000)
        with numpy_kernels():
            saved = shingles._GROUP_CODE_POINTS
            shingles._GROUP_CODE_POINTS = 50_000
            try:
                want = shingle_hashes(points, kind, n, max_shingles=3000)
            finally:
                shingles._GROUP_CODE_POINTS = saved
        assert np.array_equal(got.offsets, want.offsets), (kind, n)
        assert np.array_equal(got.hashes, want.hashes), (kind, n)


@native
def test_compiled_kernels_refuse_bad_arguments():
    values = np.arange(1, 11, dtype=np.uint64)
    with pytest.raises(ValueError, match="n: 0; valid: >= 1"):
        shingles._shingles.windows(values, np.array([0, 10]), 0)
    with pytest.raises(ValueError, match="offsets: offset 1 out of order or past the 10"):
        shingles._shingles.windows(values, np.array([0, 11]), 3)
    with pytest.raises(ValueError, match=r"range 1: \[4, 12\) is not within the 10 values"):
        shingles._shingles.spans(values, np.array([0, 4]), np.array([3, 12]))
    with pytest.raises(ValueError, match="starts: 2 ranges, ends: 1"):
        shingles._shingles.spans(values, np.array([0, 4]), np.array([3]))
    with pytest.raises(TypeError, match="values: need a 1-d contiguous array"):
        shingles._shingles.windows(values.astype(np.uint32), np.array([0, 10]), 3)
    assert shingles._shingles.windows(values, np.array([0]), 3) == bytearray()


@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(st.integers(0, 25), max_size=30), max_size=10), st.integers(1, 12))
def test_cap_keeps_small_documents_and_the_smallest_distinct_hashes_of_large_ones(docs, k):
    from dataforge.ops.dedup.shingles import ShingleSet, _cap

    offsets = np.zeros(len(docs) + 1, dtype=np.int64)
    np.cumsum([len(d) for d in docs], out=offsets[1:])
    flat = np.array([h for d in docs for h in d], dtype=np.uint64)
    capped = _cap(ShingleSet(flat, offsets), k)
    assert capped.hashes.dtype == np.uint64
    for i, doc in enumerate(docs):
        got = capped.hashes[capped.offsets[i] : capped.offsets[i + 1]].tolist()
        if len(doc) <= k:
            assert got == doc  # untouched, in text order
        else:
            assert sorted(got) == sorted(set(doc))[:k]


@native
@pytest.mark.parametrize("n", [1, 2, 2**40])
def test_compiled_windows_at_the_ends_of_n_equal_numpy(n):
    """n = 1 (every value its own shingle) and an n longer than any document (one shingle
    of the whole document), with empty documents between."""
    values = np.arange(1, 30, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    offsets = np.array([0, 0, 1, 1, 7, 29, 29], dtype=np.int64)
    got, got_counts = shingles._window_hashes(values, offsets, n)
    with numpy_kernels():
        want, want_counts = shingles._window_hashes(values, offsets, n)
    assert got_counts.tolist() == want_counts.tolist()
    assert got.tolist() == want.tolist()
    assert got_counts.tolist() == ([0, 1, 0, 6, 22, 0] if n == 1 else
                                   [0, 1, 0, 5, 21, 0] if n == 2 else [0, 1, 0, 1, 1, 0])  # fmt: skip
