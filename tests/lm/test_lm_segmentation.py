"""Segmentations: the card records how lines became tokens, and scoring follows it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from lm_testkit import NEWS_ZH, SpmTokenizer, read_fixture

from dataforge.config import ConfigError, from_mapping
from dataforge.lm import tokens as lm_tokens
from dataforge.lm.card import card_path, read_card
from dataforge.lm.score import PerplexityScorer
from dataforge.lm.tokens import CharRenderer, SentencePieceEncoder, TokenRenderer, load_encoder
from dataforge.lm.train import train_lm
from dataforge.ops.base import OpContext
from dataforge.ops.perplexity import PerplexityFilter
from dataforge.records import BASE_SCHEMA
from dataforge.text.normalize import normalize_documents

LINES = ["国务院总理今天会见了外国代表团.", "hello world", "x"]


class CharByCharTokenizer(SpmTokenizer):
    """A stand-in project tokenizer that segments differently from plain sentencepiece:
    every character is encoded on its own (as if the segmenter cut between all of them)."""

    def encode_batch(
        self, texts: list[str], add_bos: bool = False, add_eos: bool = False
    ) -> list[list[int]]:
        return [[i for ch in text for i in self.sp.encode(ch)] for text in texts]


@pytest.fixture(scope="module")
def tokenizer_mode_model(
    tmp_path_factory: pytest.TempPathFactory, spm_dir: Path, kenlm_bin: Path
) -> Path:
    model = tmp_path_factory.mktemp("seg") / "zh_tok.bin"
    train_lm(
        str(NEWS_ZH),
        model,
        lang="zh",
        tokenizer=CharByCharTokenizer(spm_dir),
        segmentation="tokenizer",
        order=3,
        memory="64M",
        discount_fallback=True,
        kenlm_bin=kenlm_bin,
    )
    return model


def make_op(base: Path, **params) -> PerplexityFilter:
    config = from_mapping(PerplexityFilter.Config, params, "stage")
    return PerplexityFilter(config, OpContext(seed=1, sources={"news": "zh"}, base_dir=str(base)))


def test_sentencepiece_encoder_is_plain_spm(spm_dir: Path) -> None:
    encoder = load_encoder(spm_dir, "sentencepiece")
    assert isinstance(encoder, SentencePieceEncoder)
    expected = SpmTokenizer(spm_dir)
    assert encoder.fingerprint == expected.fingerprint
    assert encoder.vocab_size == expected.vocab_size
    values, offsets = encoder.encode_batch_flat(LINES)
    ids = expected.sp.encode(LINES)
    assert offsets.tolist() == np.cumsum([0] + [len(x) for x in ids]).tolist()
    assert values.tolist() == [i for x in ids for i in x]
    sentences, counts = TokenRenderer(encoder).render(LINES)
    assert sentences == [" ".join(map(str, x)) for x in ids]
    assert counts.tolist() == [len(x) for x in ids]
    # a loaded tokenizer with a .path gives its directory's spm.model
    assert load_encoder(expected, "sentencepiece").fingerprint == expected.fingerprint


def test_load_encoder_errors(spm_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="valid: sentencepiece, tokenizer, chars"):
        load_encoder(spm_dir, "words")
    with pytest.raises(FileNotFoundError, match="no spm.model"):
        load_encoder(tmp_path, "sentencepiece")

    class NoPath:
        vocab_size, fingerprint = 1, ""

    with pytest.raises(ValueError, match="needs the tokenizer directory"):
        load_encoder(NoPath(), "sentencepiece")


def test_default_training_records_sentencepiece(zh_model: Path) -> None:
    assert read_card(zh_model).segmentation == "sentencepiece"


def test_scoring_follows_the_card(
    tokenizer_mode_model: Path, spm_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert read_card(tokenizer_mode_model).segmentation == "tokenizer"
    monkeypatch.setattr(lm_tokens, "load_tokenizer", lambda path: CharByCharTokenizer(Path(path)))
    docs = [r["text"] for r in read_fixture(NEWS_ZH)][:6]
    chars = PerplexityScorer(tokenizer_mode_model, CharByCharTokenizer(spm_dir))
    plain = PerplexityScorer(tokenizer_mode_model, SentencePieceEncoder(spm_dir))
    expected = chars.score_documents(docs).ppl
    assert not np.allclose(plain.score_documents(docs).ppl, expected)  # the modes differ
    got = PerplexityScorer.for_model(tokenizer_mode_model).score_documents(docs).ppl
    assert got.tolist() == expected.tolist()
    op = make_op(tokenizer_mode_model.parent, models={"zh": tokenizer_mode_model.name})
    rows = [
        {"id": f"r{i}", "text": t, "source": "news", "lang": "zh", "meta": "{}", "drop": None}
        for i, t in enumerate(docs)
    ]
    batch = pa.Table.from_pylist([{**r, "_ord": i} for i, r in enumerate(rows)], schema=BASE_SCHEMA)
    ppl = [json.loads(m)["ppl"] for m in op(batch).column("meta").to_pylist()]
    assert ppl == [round(float(p), 1) for p in expected]


def test_validate_refuses_a_segmentation_mismatch(
    tokenizer_mode_model: Path, zh_model: Path
) -> None:
    op = make_op(
        tokenizer_mode_model.parent,
        models={"zh": tokenizer_mode_model.name},
        segmentation="sentencepiece",
    )
    problems = "\n".join(op.validate())
    assert "segmentation mismatch" in problems and "'tokenizer'" in problems
    assert "--segmentation sentencepiece" in problems
    with pytest.raises(ValueError, match="segmentation mismatch"):
        op.setup()
    pinned = make_op(zh_model.parent, models={"zh": zh_model.name}, segmentation="sentencepiece")
    assert pinned.validate() == []
    other = make_op(zh_model.parent, models={"zh": zh_model.name}, segmentation="tokenizer")
    [problem] = other.validate()
    assert "trained with 'sentencepiece', the config requires 'tokenizer'" in problem
    with pytest.raises(ConfigError, match="valid: sentencepiece, tokenizer, chars"):
        from_mapping(PerplexityFilter.Config, {"models": {"zh": "m"}, "segmentation": "x"}, "s")


def test_validate_refuses_an_unknown_segmentation(tmp_path: Path, zh_model: Path) -> None:
    model = tmp_path / "zh.bin"
    model.write_bytes(zh_model.read_bytes())
    card = json.loads(card_path(zh_model).read_text())
    card["segmentation"] = "words"
    card["tokenizer_path"] = str((zh_model.parent / card["tokenizer_path"]).resolve())
    card_path(model).write_text(json.dumps(card))
    [problem] = make_op(tmp_path, models={"zh": "zh.bin"}).validate()
    assert "segmentation 'words'" in problem and "cannot score" in problem


def test_char_renderer_spells_every_character() -> None:
    sentences, counts = CharRenderer().render(["ab c", "x", "中文 ok", "\ud800z", "a  b"])
    assert sentences == ["a b ▁ c", "x", "中 文 ▁ o k", "\ufffd z", "a ▁ ▁ b"]
    assert counts.tolist() == [4, 1, 5, 2, 4]
    assert counts.tolist() == [len(s.split()) for s in sentences]  # what KenLM counts
    assert CharRenderer().render([]) == ([], pytest.approx(np.zeros(0)))
    with pytest.raises(ValueError, match="contains"):
        CharRenderer().render(["a\nb"])


def test_chars_models_need_no_tokenizer(tmp_path: Path, kenlm_bin: Path) -> None:
    model = tmp_path / "zh_chars.bin"
    card = train_lm(
        str(NEWS_ZH),
        model,
        lang="zh",
        tokenizer=None,
        segmentation="chars",
        order=4,
        memory="64M",
        discount_fallback=True,
        kenlm_bin=kenlm_bin,
    )
    assert (card.segmentation, card.tokenizer_path, card.tokenizer_fingerprint) == ("chars", "", "")
    assert card.token_rendering == "chars"
    docs = [r["text"] for r in read_fixture(NEWS_ZH)][:5]
    scorer = PerplexityScorer.for_model(model)
    lines = [line for line in normalize_documents(docs[:1])[0] if line]
    log10 = sum(scorer.model.score(s) for s in CharRenderer().render(lines)[0])
    expected = 10 ** (-log10 / sum(len(line) + 1 for line in lines))
    assert scorer.score_documents(docs[:1]).ppl[0] == pytest.approx(expected, rel=1e-12)
    op = make_op(tmp_path, models={"zh": model.name}, tokenizer=str(tmp_path / "none"))
    assert op.validate() == []  # no tokenizer to check
    with pytest.raises(ValueError, match="needs a tokenizer directory"):
        train_lm(str(NEWS_ZH), tmp_path / "m.bin", lang="zh", tokenizer=None, kenlm_bin=kenlm_bin)
