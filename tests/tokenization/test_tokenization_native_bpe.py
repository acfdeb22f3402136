"""The native BPE encoder (``make spm-bpe``) gives sentencepiece's ids, to the last one."""

from __future__ import annotations

import os
import threading

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenization_testkit import fixture_texts

from dataforge.tokenization import native_bpe
from dataforge.tokenization.native_bpe import NativeBPE
from dataforge.tokenization.segment import MARKER


@pytest.fixture(scope="module")
def native(tiny) -> NativeBPE:
    if not native_bpe.available():
        message = "dataforge/tokenization/_spm_bpe is not built: run `make spm-bpe`"
        if os.environ.get("CI"):
            pytest.fail(message)  # `make test` builds it: missing in CI is a broken build
        pytest.skip(message)
    encoder = NativeBPE.for_model(tiny._sp.serialized_model_proto())
    assert encoder is not None
    return encoder


def expected(sp, texts: list[str]) -> tuple[list[int], list[int]]:
    ids = sp.encode(texts)
    return [i for row in ids for i in row], [len(row) for row in ids]


def check(native: NativeBPE, sp, texts: list[str]) -> None:
    values, offsets = native.encode_flat(texts)
    flat, lengths = expected(sp, texts)
    assert np.diff(offsets).tolist() == lengths
    assert values.tolist() == flat


# Characters the tiny model knows, ones it does not (byte fallback: an emoji, a rare CJK
# ideograph, a Hangul syllable), its user-defined symbols (frozen), spaces of every kind.
ALPHABET = list("的是了在人有我他这中国数据模型abcdefxyzABC0123456789.,;!?-'\"")
ALPHABET += ["😀", "\U00020000", "한", "é", "\u2581", " ", "  ", "\t", "\n", "\u3000"]
ALPHABET += ["<|user|>", "<|end|>", "<|user", MARKER, "<|reserved_0|>"]


@settings(max_examples=400, deadline=None)
@given(texts=st.lists(st.lists(st.sampled_from(ALPHABET), max_size=40).map("".join), max_size=8))
def test_equals_sentencepiece_on_generated_text(native: NativeBPE, tiny, texts) -> None:
    check(native, tiny._sp, texts)


def test_equals_sentencepiece_on_real_text(native: NativeBPE, tiny) -> None:
    texts = fixture_texts()
    lines = [line for t in texts for line in t.split("\n")]
    check(native, tiny._sp, texts)
    check(native, tiny._sp, lines)
    check(native, tiny._sp, [t.replace(" ", "  ") for t in texts])


def test_empty_batches_and_texts(native: NativeBPE) -> None:
    values, offsets = native.encode_flat([])
    assert values.tolist() == [] and offsets.tolist() == [0]
    values, offsets = native.encode_flat(["", "", ""])
    assert values.tolist() == [] and offsets.tolist() == [0, 0, 0, 0]
    sliced = pa.array(["x", "ab cd", "的"], pa.large_string()).slice(1)  # an array offset
    assert native.encode_flat(sliced)[1].tolist() == native.encode_flat(["ab cd", "的"])[1].tolist()


def test_two_threads_at_once(native: NativeBPE, tiny) -> None:
    texts = fixture_texts() * 4
    reference = native.encode_flat(texts)
    results = []

    def work() -> None:
        for _ in range(3):
            results.append(native.encode_flat(texts))

    threads = [threading.Thread(target=work) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 6
    assert all(
        np.array_equal(v, reference[0]) and np.array_equal(o, reference[1]) for v, o in results
    )


def changed(model_proto: bytes, **changes) -> bytes:
    from sentencepiece import sentencepiece_model_pb2 as model_pb2

    proto = model_pb2.ModelProto()
    proto.ParseFromString(model_proto)
    for key, value in changes.items():
        section, field = key.split("__")
        setattr(getattr(proto, section), field, value)
    return proto.SerializeToString()


def test_models_it_cannot_encode_exactly_are_left_to_sentencepiece(native, tiny) -> None:
    from sentencepiece import sentencepiece_model_pb2 as model_pb2

    model = tiny._sp.serialized_model_proto()
    assert NativeBPE.for_model(changed(model, normalizer_spec__add_dummy_prefix=True)) is None
    assert (
        NativeBPE.for_model(changed(model, normalizer_spec__remove_extra_whitespaces=True)) is None
    )
    assert NativeBPE.for_model(changed(model, normalizer_spec__name="nmt_nfkc")) is None
    assert NativeBPE.for_model(changed(model, trainer_spec__model_type=1)) is None  # unigram
    proto = model_pb2.ModelProto()
    proto.ParseFromString(model)
    proto.pieces[-1].type = model_pb2.ModelProto.SentencePiece.UNUSED
    assert NativeBPE.for_model(proto.SerializeToString()) is None


def test_the_extension_checks_its_buffers(native) -> None:
    from dataforge.tokenization import _spm_bpe

    data = np.frombuffer(b"abc", np.uint8)
    out, out_offsets = np.empty(3, np.int32), np.empty(2, np.int64)
    with pytest.raises(ValueError, match="bad range at text 0"):
        _spm_bpe.encode(native._model, data, np.array([0, 4]), out, out_offsets)
    with pytest.raises(ValueError, match="wrong size"):
        _spm_bpe.encode(native._model, data, np.array([0, 3]), np.empty(2, np.int32), out_offsets)
    with pytest.raises(TypeError, match="out: need a contiguous writable buffer"):
        _spm_bpe.encode(native._model, data, np.array([0, 3]), b"\0" * 12, out_offsets)
    assert _spm_bpe.encode(native._model, data, np.array([0, 3]), out, out_offsets) >= 1
    with pytest.raises(ValueError, match="differ in length"):
        _spm_bpe.load(["a", "b"], [0.0], b"\0\0", 0, False)
    with pytest.raises(TypeError):
        _spm_bpe.load(["a", 7], [0.0, 0.0], b"\0\0", 0, False)


def test_long_lines_and_control_characters(native: NativeBPE, tiny) -> None:
    """A 200K-character line without a space (the queue of one long run), NULs and other
    control characters (kept by the identity normalizer) give sentencepiece's ids."""
    text = "".join(fixture_texts()).replace(" ", "").replace("\n", "")
    long_line = (text * (200_000 // len(text) + 1))[:200_000]
    check(native, tiny._sp, [long_line, "a\x00b", "\x00", "中\x00文 x\x01\x7f", "\r\n\t"])
