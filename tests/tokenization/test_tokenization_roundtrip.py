"""decode(encode(x)) == x for everything clean can output, and the jieba boundaries hold."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenization_testkit import fixture_texts

from dataforge.text.cjk import cjk_mask
from dataforge.tokenization import tokenizer as tokenizer_module
from dataforge.tokenization.segment import MARKER

FULLWIDTH = list("，。！？：；（）「」『』、“”《》…—～　ＡＢＣ１２３")
EMOJI = ["😀", "👍🏽", "🇨🇳", "❤️", "👨‍👩‍👧"]
SPECIAL = [
    "\n",
    "\t",
    " ",
    "  ",
    "\n\n",
    "\r\n",
    MARKER,
    "\u2581",
    "<|user|>",
    "<bos>",
    "<unk>",
    "\x00",
]


def _pieces() -> list[str]:
    zh = sorted({c for t in fixture_texts("zh_news") for c in t if "\u4e00" <= c <= "\u9fff"})[:300]
    words = [
        "中华人民共和国",
        "江泽民",
        "经济",
        "发展",
        "hello",
        "world",
        "def",
        "return",
        "12.5",
        "2026",
    ]
    return zh + words + FULLWIDTH + EMOJI + SPECIAL + list("abcXYZ0123456789.,;:!?()[]{}'\"-_/\\")


MIXED = st.lists(st.sampled_from(_pieces()), max_size=80).map("".join)
WIDE = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=120)


@settings(max_examples=300, deadline=None)
@given(text=st.one_of(MIXED, WIDE))
def test_round_trip_property(tiny, text):
    ids = tiny.encode(text)
    assert tiny.decode(ids) == text
    assert tiny.boundary_id not in ids
    assert all(0 <= i < tiny.vocab_size for i in ids)


@settings(max_examples=60, deadline=None)
@given(texts=st.lists(st.one_of(MIXED, WIDE), max_size=8))
def test_batch_equals_one_by_one(tiny, texts):
    assert tiny.encode_batch(texts) == [tiny.encode(t) for t in texts]
    framed = tiny.encode_batch(texts, add_bos=True, add_eos=True)
    assert framed == [[tiny.bos_id, *tiny.encode(t), tiny.eos_id] for t in texts]


def test_real_text_round_trips(tiny):
    texts = fixture_texts()
    batch = tiny.encode_batch(texts)
    assert [tiny.decode(ids) for ids in batch] == texts
    assert sum(map(len, batch)) < sum(map(len, texts))  # it compresses


def test_bos_eos_and_empty(tiny):
    assert tiny.encode("") == []
    assert tiny.encode("", add_bos=True, add_eos=True) == [tiny.bos_id, tiny.eos_id]
    assert tiny.encode_batch(["", "", ""], add_eos=True) == [[tiny.eos_id]] * 3
    assert tiny.encode_batch([]) == []
    ids = tiny.encode("新年好 hello", add_bos=True, add_eos=True)
    assert ids[0] == tiny.bos_id and ids[-1] == tiny.eos_id
    assert tiny.decode(ids) == "新年好 hello"  # control tokens decode to nothing


def test_special_token_text_encodes_to_its_id(tiny):
    user = tiny.special_tokens["<|user|>"]
    assert tiny.encode("<|user|>") == [user]
    assert tiny.token_to_id("<|user|>") == user
    # A literal marker and U+2581 are kept as themselves (byte fallback), never as a space.
    for ch in (MARKER, "\u2581"):
        ids = tiny.encode(f"a{ch}b")
        assert tiny.decode(ids) == f"a{ch}b"
        assert len(ids) == 5  # a, 3 bytes, b


def test_lone_surrogate_becomes_replacement_char(tiny):
    ids = tiny.encode("a\ud800b中国")
    assert tiny.decode(ids) == "a\ufffdb中国"


def _token_byte_bounds(tok, ids: list[int]) -> set[int]:
    """Byte offsets where one token ends and the next begins."""
    bounds, pos = set(), 0
    for i in ids:
        piece = tok.id_to_token(i)
        if piece.startswith("<0x") and piece.endswith(">") and len(piece) == 6:
            pos += 1
        else:
            pos += len(piece.replace("\u2581", " ").encode("utf-8"))
        bounds.add(pos)
    return bounds


def test_tokens_never_cross_jieba_words(tiny):
    checked = 0
    for text in fixture_texts("zh_news") + fixture_texts("zh_reviews"):
        words = tiny._segmenter.cut(text)
        char_ends = np.cumsum([len(w) for w in words])[:-1]
        cps = np.array([ord(c) for c in text], np.uint32)
        cjk = cjk_mask(cps)
        inner = [int(p) for p in char_ends if cjk[p - 1] and cjk[p]]
        byte_at = np.concatenate([[0], np.cumsum([len(c.encode()) for c in text])])
        token_bounds = _token_byte_bounds(tiny, tiny.encode(text))
        assert {int(byte_at[p]) for p in inner} <= token_bounds
        checked += len(inner)
    assert checked > 1000


def test_chunking_at_safe_boundaries_changes_nothing(tiny, monkeypatch):
    texts = fixture_texts()
    expected = tiny.encode_batch(texts)
    monkeypatch.setattr(tokenizer_module, "CHUNK_CHARS", 64)
    assert tiny.encode_batch(texts) == expected


def test_split_long_pieces():
    text = ("ab " * 50) + ("x" * 300) + MARKER.join(["中国", "人民"] * 40)
    pieces = tokenizer_module.split_long(text, 64)
    assert "".join(pieces) == text
    assert all(len(p) <= 64 for p in pieces)
    # Cuts fall before a space that starts a run, or before a marker, where available;
    # the run of x has neither and is cut at the window ends.
    assert [len(p) for p in pieces] == [62, 63, 64, 64, 64, 64, 64, 61, 63, 63, 57]
    assert pieces[1].startswith(" ") and pieces[2].startswith(" ")
    assert all(p.startswith(MARKER) for p in pieces[8:])


def test_ten_megabyte_string(tiny):
    zh = "".join(fixture_texts("zh_news"))
    en = "".join(fixture_texts("en_docs"))
    unit = zh + en + "x" * 50_000  # a long run with no safe boundary at all
    text = (unit * (10_000_000 // len(unit) + 1))[:10_000_000]
    ids = tiny.encode(text)
    assert tiny.decode(ids) == text
    # Linear: the whole costs the sum of its parts, to within the few chunk cuts.
    per_unit = len(tiny.encode(unit))
    assert abs(len(ids) - per_unit * len(text) / len(unit)) < 0.01 * len(ids)


@pytest.mark.parametrize("n_threads", [1, 2])
def test_threads_do_not_change_ids(tiny_dir, n_threads):
    from dataforge.tokenization import Tokenizer

    texts = fixture_texts()
    base = Tokenizer.load(tiny_dir).encode_batch(texts)
    assert Tokenizer.load(tiny_dir, num_threads=n_threads).encode_batch(texts) == base
