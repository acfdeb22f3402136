"""Space-separated text encoded word by word, each distinct word once: the same ids as
sentencepiece on the whole text."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenization_testkit import fixture_texts

from dataforge.lm.tokens import SentencePieceEncoder
from dataforge.tokenization import native_bpe
from dataforge.tokenization.distinct import (
    encode_distinct,
    few_spaces,
    sentencepiece_words,
    splits_at_spaces,
    worth_it,
)
from dataforge.tokenization.spm_batch import BatchEncoder
from dataforge.tokenization.spm_proto import parse_model

WORDS = ["the", "a", "of", "tokens", "é", "naïve", "中文", "数据", "1984", "x" * 40, "", "\t"]
SPACES = [" ", "  ", "   ", "\n", " \n ", "\u3000", "\t "]


def plain(sp, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    arrays = [np.asarray(sp.encode(t), np.int32) for t in texts]
    lengths = np.array([len(a) for a in arrays], np.int64)
    values = np.concatenate(arrays) if arrays else np.zeros(0, np.int32)
    return values, lengths


texts_strategy = st.lists(
    st.lists(st.one_of(st.sampled_from(WORDS), st.sampled_from(SPACES)), max_size=30).map("".join),
    max_size=12,
)


@settings(max_examples=300, deadline=None)
@given(texts=texts_strategy)
def test_equals_sentencepiece_on_whole_texts(tiny, texts: list[str]) -> None:
    sp = tiny._sp
    assert splits_at_spaces(parse_model(sp.serialized_model_proto()))
    values, lengths = encode_distinct(sentencepiece_words(sp), texts)
    expected_values, expected_lengths = plain(sp, texts)
    assert lengths.tolist() == expected_lengths.tolist()
    assert values.tolist() == expected_values.tolist()


def test_real_text_and_the_tokenizer_paths(tiny, tiny_dir) -> None:
    """Fixture documents (zh, en, mixed) through Tokenizer.encode_batch_flat with words
    encoded once, and with the plain path, give the same ids."""
    texts = fixture_texts()
    english = [t for t in texts if t.isascii()]
    assert english and worth_it(pa.array(english))
    model = tiny._sp.serialized_model_proto()
    default = tiny.batch
    assert default.native == native_bpe.available()

    def encode_with(batch: BatchEncoder, batch_texts: list[str]):
        tiny.batch = batch
        try:
            return tiny.encode_batch_flat(batch_texts)
        finally:
            tiny.batch = default

    plain_encoder = BatchEncoder(tiny._sp, model, native=False, by_words=False)
    for batch_texts in (texts, english):
        expected = encode_with(plain_encoder, batch_texts)  # sentencepiece alone
        for batch in (
            default,
            BatchEncoder(tiny._sp, model, native=False),  # words once, sentencepiece
            BatchEncoder(tiny._sp, model, by_words=False),  # native, whole texts
        ):
            got = encode_with(batch, batch_texts)
            assert np.array_equal(got[0], expected[0]) and np.array_equal(got[1], expected[1])
    encoder = SentencePieceEncoder(tiny_dir)  # the LM's sentencepiece segmentation
    encoder.batch = BatchEncoder(encoder._sp, model, native=False)
    values, offsets = encoder.encode_batch_flat(english)
    flat, lengths = plain(tiny._sp, english)
    assert np.array_equal(values, flat) and np.array_equal(np.diff(offsets), lengths)


def test_worth_it_only_for_spaced_text() -> None:
    assert worth_it(pa.array(["the quick brown fox jumps over the lazy dog"]))
    assert not worth_it(
        pa.array(["国务院总理今天会见了外国代表团。双方就共同关心的问题交换了意见"])
    )
    assert not worth_it(pa.array(["the quick\x1fbrown fox jumps over the lazy dog"]))
    assert not worth_it(pa.array(["", ""]))
    assert not worth_it(pa.array([], pa.string()))
    # the quick look at a batch's start, before any Arrow array
    assert few_spaces(["国务院总理今天会见了外国代表团。"] * 10 + ["a b c d e f"])
    assert not few_spaces(["the quick brown fox"] * 3)
    assert few_spaces(["国" * 20000, "a " * 100])  # only the first 16K characters count
    assert not few_spaces([])


def with_changes(model_proto: bytes, pieces: list[str] = (), **normalizer):
    """The parsed model with extra normal pieces and normalizer settings changed."""
    from sentencepiece import sentencepiece_model_pb2 as model_pb2

    proto = parse_model(model_proto)
    for piece in pieces:
        proto.pieces.add(piece=piece, score=0.0, type=model_pb2.ModelProto.SentencePiece.NORMAL)
    for key, value in normalizer.items():
        setattr(proto.normalizer_spec, key, value)
    return proto


def test_models_whose_words_interact_keep_the_plain_path(tiny) -> None:
    model = tiny._sp.serialized_model_proto()
    assert splits_at_spaces(parse_model(model))
    assert splits_at_spaces(with_changes(model, ["▁▁▁▁▁▁▁▁", "▁qzx"]))
    assert not splits_at_spaces(with_changes(model, ["a▁b"]))  # spans "a b"
    assert not splits_at_spaces(with_changes(model, ["▁of▁"]))
    assert not splits_at_spaces(with_changes(model, add_dummy_prefix=True))  # adds a space
    assert not splits_at_spaces(with_changes(model, remove_extra_whitespaces=True))
    assert not splits_at_spaces(with_changes(model, name="nmt_nfkc"))
