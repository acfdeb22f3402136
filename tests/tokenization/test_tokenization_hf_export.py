"""The Jieba+BPE tokenizer through transformers' AutoTokenizer (remote code)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dataforge.tokenization import Tokenizer
from dataforge.tokenization.corpus import iter_records
from dataforge.tokenization.hf_export import write_hf_tokenizer

transformers = pytest.importorskip("transformers")

DEMO = Path(__file__).resolve().parents[2] / "data" / "demo"
DEMO_INPUTS = [
    str(DEMO / "news_zh" / "*.jsonl.zst"),
    str(DEMO / "reviews_zh" / "*.jsonl.gz"),
    str(DEMO / "docs_en" / "*.jsonl"),
    str(DEMO / "pkgdesc_en" / "*.parquet"),
]
EDGE_CASES = [
    "",
    " leading and  double  spaces\n\ttabs",
    "literal markers \ue000 and \u2581 and a lone surrogate \ud800 here",
    "chat markers as text: <|user|> hi <|end|>",
    "control pieces are text: <unk> <bos> <eos> <pad>",
    "中文分词测试，混合 English words 和数字 12345。",
    "字" * 40000,  # longer than one encoding chunk, no boundary to cut at
    ("这是一个很长的句子 " * 5000),
]


@pytest.fixture(scope="module")
def hf_tokenizer(tiny_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("hf_tok")
    special = write_hf_tokenizer(tiny_dir, out)
    assert special == {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}
    return transformers.AutoTokenizer.from_pretrained(str(out), trust_remote_code=True)


def test_edge_cases_same_ids_and_decodes(hf_tokenizer, tiny: Tokenizer):
    for text in EDGE_CASES:
        ids = tiny.encode(text)
        assert hf_tokenizer(text)["input_ids"] == ids
        assert hf_tokenizer.decode(ids) == tiny.decode(ids)
    assert hf_tokenizer.decode(tiny.encode("a \ue000 b")) == "a \ue000 b"
    framed = tiny.encode("hi", add_bos=True, add_eos=True)
    assert hf_tokenizer.decode(framed) == "hi"  # control tokens decode to nothing
    assert hf_tokenizer.vocab_size == tiny.vocab_size


@pytest.mark.slow
def test_demo_corpus_every_document_same_ids_and_round_trip(hf_tokenizer, tiny: Tokenizer):
    if not (DEMO / ".done").is_file():
        pytest.fail("the demo corpus is missing: run `make demo-data` (make test does)")
    texts = [text for _, text in iter_records(DEMO_INPUTS)]
    assert len(texts) > 38000
    expected = tiny.encode_batch(texts)
    mismatched = [
        i for i, text in enumerate(texts) if hf_tokenizer(text)["input_ids"] != expected[i]
    ]
    assert mismatched == []
    assert [hf_tokenizer.decode(ids) for ids in expected] == texts


def test_jieba_engine_tokenizer_same_ids(tmp_path):
    """The remote code segments with the engine the tokenizer was trained with."""
    from tokenization_testkit import fixture_texts, tiny_spec

    from dataforge.tokenization import train_tokenizer

    train_tokenizer(tiny_spec(engine="jieba"), tmp_path / "tok")
    write_hf_tokenizer(tmp_path / "tok", tmp_path / "hf")
    hf = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "hf"), trust_remote_code=True)
    tok = Tokenizer.load(tmp_path / "tok")
    texts = fixture_texts() + EDGE_CASES[:5]
    assert [hf(t)["input_ids"] for t in texts] == tok.encode_batch(texts)
