"""Unicode normalization forms: the quick-check path gives Arrow's ``utf8_normalize``."""

from __future__ import annotations

import unicodedata

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataforge.text.forms import FORMS, normalize_form

ASSIGNED = [
    chr(c)
    for c in range(0x110000)
    if not 0xD800 <= c <= 0xDFFF and unicodedata.category(chr(c)) != "Cn"
]
MIXED = [
    "plain ascii stays",
    "Ｆｕｌｌｗｉｄｔｈ，标点：（括号）",  # NFKC changes, NFC does not
    "e\u0301 and \u00e9",  # decomposed and precomposed e acute
    "Ａ\u0300",  # fullwidth A + grave
    "한국어 가",  # Hangul syllables (NFD decomposes them)
    "ﬁ ligature ①②",
    "已经规范的中文。",
    None,
    "",
]


@pytest.mark.parametrize("form", FORMS)
def test_every_assigned_code_point_normalizes_as_arrow_does(form: str) -> None:
    texts = pa.array(ASSIGNED)
    assert normalize_form(texts, form).equals(pc.utf8_normalize(texts, form))


@pytest.mark.parametrize("form", FORMS)
def test_mixed_strings_nulls_and_chunks_normalize_as_arrow_does(form: str) -> None:
    texts = pa.chunked_array([MIXED[:4], MIXED[4:]])
    expected = pc.utf8_normalize(texts.combine_chunks(), form)
    got = normalize_form(texts, form)
    assert got.equals(expected)
    assert got.null_count == 1
    assert got.to_pylist() == [None if t is None else unicodedata.normalize(form, t) for t in MIXED]


# Letters, combining marks in and out of canonical order, an excluded composite, Hangul
# jamo that compose across a string boundary, compatibility characters.
PIECES = ["e", "a", " ", "\u0301", "\u0316", "\u0344", "\u1100", "\u1161", "\u11a8", "한",
          "Ａ", "ﬁ", "\u212b", "①"]  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.one_of(st.none(), st.lists(st.sampled_from(PIECES), max_size=6)), max_size=8),
    st.sampled_from(FORMS),
    st.integers(0, 3),
)
def test_batches_normalize_as_arrow_does_whatever_their_neighbours(docs, form, start):
    """The check of the whole batch at once never passes a batch that holds a string Arrow
    would change, including strings that change only joined to their neighbours."""
    texts = pa.array([None if d is None else "".join(d) for d in docs], pa.string())
    texts = texts.slice(min(start, len(texts)))  # an offset into the buffers too
    assert normalize_form(texts, form).equals(pc.utf8_normalize(texts, form))


def test_normalized_input_comes_back_unchanged_and_other_types_keep_their_type() -> None:
    texts = pa.array(["已经规范的中文。", "ascii"])
    assert normalize_form(texts, "NFKC") is texts
    large = pa.array(["Ｆｕｌｌ", "ok", None], pa.large_string())
    got = normalize_form(large, "NFKC")
    assert got.type == pa.large_string()
    assert got.to_pylist() == ["Full", "ok", None]


def test_only_strings_that_change_are_rewritten() -> None:
    texts = pa.array(["ok"] * 1000 + ["ｘ"] + ["fine"] * 1000)
    got = normalize_form(texts, "NFKC").to_pylist()
    assert got[1000] == "x"
    assert got[:1000] == ["ok"] * 1000 and got[1001:] == ["fine"] * 1000


def test_unknown_form_is_refused_with_the_choices() -> None:
    with pytest.raises(ValueError, match="'NFX'.*NFC, NFKC, NFD, NFKD"):
        normalize_form(pa.array(["a"]), "NFX")


@pytest.mark.skipif(unicodedata.unidata_version != "14.0.0", reason="Python 3.11's tables")
def test_characters_assigned_after_unicode_14_are_kept_as_documented() -> None:
    # U+1E030 MODIFIER LETTER CYRILLIC SMALL A (Unicode 15): NFKC maps it to U+0430 in
    # newer tables; Python 3.11's quick check does not know it, so the string is kept.
    texts = pa.array(["\U0001e030"])
    assert normalize_form(texts, "NFKC").to_pylist() == ["\U0001e030"]
