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
    # Text as given, nothing added: the ids of the BPE conversion itself.
    special = write_hf_tokenizer(tiny_dir, out, clean=False, add_bos=False)
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
    write_hf_tokenizer(tmp_path / "tok", tmp_path / "hf", clean=False, add_bos=False)
    hf = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "hf"), trust_remote_code=True)
    tok = Tokenizer.load(tmp_path / "tok")
    texts = fixture_texts() + EDGE_CASES[:5]
    assert [hf(t)["input_ids"] for t in texts] == tok.encode_batch(texts)


# Characters clean rewrites (no markup: tags and entities are not normalization).
NOISY = list("ab 中文，：（）Ａｚ９…ﬁ\t\n\r") + [
    "\u3000", "\xa0", "\u2009", "\u200b", "\ufeff", "\x07", "\x85", "\u2028", "\ufffd",
    "\ud800", "e\u0301", "\u1e9b\u0323", "  ", "\n\n\n", " \n",
]  # fmt: skip
CLEAN_VARIANTS = [
    {},
    {"normalization": "NFC"},
    {"normalization": "none", "fullwidth_to_halfwidth": False, "remove_invisible": False},
    {"keep_indentation": False, "max_blank_lines": 0, "invalid_utf8": "replace"},
    {"normalize_whitespace": False, "convert": "t2s"},
]


@pytest.mark.parametrize("variant", CLEAN_VARIANTS, ids=str)
def test_remote_normalizer_is_clean(variant):
    """The self-contained normalizer of the remote code rewrites text as the clean op."""
    import pyarrow as pa
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from dataforge.text.clean import CleanConfig, clean_text
    from dataforge.text.surrogates import replace_lone_surrogates
    from dataforge.tokenization.hf_export import normalization_settings
    from dataforge.tokenization.hf_remote import NORMALIZATION_KEYS, TextNormalizer

    config = CleanConfig(**variant)
    assert set(normalization_settings(config)) == set(NORMALIZATION_KEYS)
    normalize = TextNormalizer(normalization_settings(config))

    @settings(max_examples=200, deadline=None)
    @given(st.lists(st.sampled_from(NOISY + ["這個髮", "後來"]), max_size=30).map("".join))
    def same(text):
        read = replace_lone_surrogates(text)  # what a reader hands clean
        assert normalize(text) == clean_text(pa.array([read]), config).to_pylist()[0]

    same()


def test_recorded_settings(tiny_dir, tmp_path):
    """The default is what the tokenizer's training text went through (clean's defaults)."""
    import json

    from dataforge.text.clean import CleanConfig
    from dataforge.tokenization.hf_export import normalization_settings

    write_hf_tokenizer(tiny_dir, tmp_path / "a", max_seq_len=512)
    config = json.loads((tmp_path / "a" / "tokenizer_config.json").read_text())
    assert config["normalization"] == normalization_settings(CleanConfig())
    assert config["normalization"]["normalization"] == "NFKC"
    assert (config["add_bos_token"], config["model_max_length"]) == (True, 512)
    assert config["chat_template"].startswith("{{ bos_token }}")
    write_hf_tokenizer(tiny_dir, tmp_path / "b", clean=False, add_bos=False)
    config = json.loads((tmp_path / "b" / "tokenizer_config.json").read_text())
    assert config["normalization"] is None and config["add_bos_token"] is False
    assert "bos_token" not in config["chat_template"]


def test_remote_code_imports_no_dataforge():
    """The file copied into exports runs where dataforge is not installed."""
    import ast
    import importlib.util

    origin = importlib.util.find_spec("dataforge.tokenization.hf_remote").origin
    tree = ast.parse(Path(origin).read_text(encoding="utf-8"))
    imported = {
        name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for name in (
            [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
        )
    }
    allowed = {"__future__", "json", "logging", "os", "re", "unicodedata"}
    assert imported <= allowed | {"tokenizers", "transformers", "rjieba", "jieba", "opencc"}
