"""Training and scoring with real KenLM models built from fixture text (needs ``make kenlm``)."""

from __future__ import annotations

import random
from pathlib import Path

import jieba
import numpy as np
import pytest
from lm_testkit import HOLDOUT_PERCENT, NEWS_ZH, SpmTokenizer, read_fixture

from dataforge.lm.card import read_card
from dataforge.lm.corpus import id_hash_percent, read_documents
from dataforge.lm.score import PerplexityScorer
from dataforge.lm.tokens import TokenRenderer
from dataforge.lm.train import train_lm
from dataforge.text.normalize import normalize_documents

DEMO_NEWS = Path(__file__).resolve().parents[2] / "data" / "demo" / "news_zh"
DEMO_TOKENIZER = Path(__file__).resolve().parents[2] / "tokenizers" / "demo"
DEMO_HOLDOUT = 10.0


def roc_auc(positive_scores: np.ndarray, negative_scores: np.ndarray) -> float:
    """P(score(neg) > score(pos)), ties counting half (Mann-Whitney U / (n_pos * n_neg))."""
    pos = np.asarray(positive_scores)[:, None]
    neg = np.asarray(negative_scores)[None, :]
    return float(((neg > pos).sum() + 0.5 * (neg == pos).sum()) / (pos.size * neg.size))


def heldout_news() -> list[str]:
    records = read_fixture(NEWS_ZH)
    held = id_hash_percent([f"lm/{r['id']}" for r in records]) < HOLDOUT_PERCENT
    return [r["text"] for r, h in zip(records, held, strict=True) if h]


def shuffle_words(text: str, rng: random.Random) -> str:
    out = []
    for line in text.split("\n"):
        words = jieba.lcut(line)
        rng.shuffle(words)
        out.append("".join(words))
    return "\n".join(out)


def random_characters(text: str, alphabet: list[str], rng: random.Random) -> str:
    return "\n".join("".join(rng.choice(alphabet) for _ in line) for line in text.split("\n"))


def test_card_describes_training(zh_model: Path, tokenizer: SpmTokenizer) -> None:
    card = read_card(zh_model)
    records = read_fixture(NEWS_ZH)
    held = int((id_hash_percent([f"lm/{r['id']}" for r in records]) < HOLDOUT_PERCENT).sum())
    assert (card.lang, card.order, card.normalization) == ("zh", 4, "ccnet-v1")
    assert card.tokenizer_fingerprint == tokenizer.fingerprint
    assert (zh_model.parent / card.tokenizer_path).resolve() == tokenizer.path.resolve()
    assert card.holdout_documents == held and card.documents == len(records) - held
    lines, _ = normalize_documents([r["text"] for r in records])
    assert card.tokens > 0 and card.lines <= sum(1 for line in lines if line)
    assert card.extra["heldout_ppl"]["documents"] == held
    assert not list(zh_model.parent.glob(".*.work"))  # scratch space removed


def test_training_is_deterministic(
    tmp_path: Path, zh_model: Path, tokenizer: SpmTokenizer, kenlm_bin: Path
) -> None:
    again = train_lm(
        str(NEWS_ZH),
        tmp_path / "again.bin",
        lang="zh",
        tokenizer=tokenizer,
        order=4,
        memory="64M",
        holdout_percent=HOLDOUT_PERCENT,
        discount_fallback=True,
        kenlm_bin=kenlm_bin,
    )
    first = read_card(zh_model)
    assert again.training_sha256 == first.training_sha256
    assert again.model_sha256 == first.model_sha256
    assert again.tokens == first.tokens


def test_document_perplexity_formula(zh_model: Path, tokenizer: SpmTokenizer) -> None:
    scorer = PerplexityScorer(zh_model, tokenizer)
    doc = "国务院总理今天会见了外国代表团。\n\n双方就共同关心的问题交换了意见！\n   "
    result = scorer.score_documents([doc, "", " \n\t", "国务院总理今天会见了外国代表团。"])
    sentences, num_tokens = TokenRenderer(tokenizer).render(
        ["国务院总理今天会见了外国代表团.", "双方就共同关心的问题交换了意见!"]
    )
    log10 = sum(scorer.model.score(s) for s in sentences)
    expected = 10 ** (-log10 / (num_tokens + 1).sum())
    assert result.ppl[0] == pytest.approx(expected, rel=1e-12)
    assert result.length.tolist()[:3] == [int((num_tokens + 1).sum()), 0, 0]
    assert np.isnan(result.ppl[1]) and np.isnan(result.ppl[2])
    single = 10 ** (-scorer.model.score(sentences[0]) / (num_tokens[0] + 1))
    assert result.ppl[3] == pytest.approx(single, rel=1e-12)


def corrupted_versions(real: list[str], alphabet_texts: list[str]) -> tuple[list[str], list[str]]:
    rng = random.Random(1234)
    alphabet = sorted({c for t in alphabet_texts for c in t if not c.isspace()})
    return [shuffle_words(t, rng) for t in real], [
        random_characters(t, alphabet, rng) for t in real
    ]


def test_perplexity_ranks_each_fixture_document_above_its_corruptions(
    zh_model: Path, tokenizer: SpmTokenizer
) -> None:
    # A 50k-token model is too small for a population-level AUC on shuffled words (about
    # 0.86 here; the demo-corpus test below checks >= 0.95), but per document the order holds.
    real = heldout_news()
    shuffled, noise = corrupted_versions(real, [r["text"] for r in read_fixture(NEWS_ZH)])
    scorer = PerplexityScorer(zh_model, tokenizer)
    ppl_real, ppl_shuffled, ppl_noise = (
        scorer.score_documents(x).ppl for x in (real, shuffled, noise)
    )
    assert len(real) >= 25
    assert (ppl_shuffled > ppl_real).all()
    assert (ppl_noise > ppl_real).all()
    assert roc_auc(ppl_real, ppl_noise) >= 0.95


@pytest.fixture(scope="module")
def demo_news(tmp_path_factory: pytest.TempPathFactory, tokenizer: SpmTokenizer, kenlm_bin: Path):
    if not (DEMO_NEWS.parent / ".done").is_file():
        pytest.skip(
            f"demo corpus not built ({DEMO_NEWS.parent}/.done missing): run `make demo-data`"
        )
    model = tmp_path_factory.mktemp("demo_lm") / "zh_news.bin"
    # The default segmentation (sentencepiece) needs only spm.model: the demo tokenizer's
    # when built (what `make demo-lm` trains with), else the fixture one.
    demo_spm = DEMO_TOKENIZER if (DEMO_TOKENIZER / "spm.model").is_file() else tokenizer
    train_lm(
        str(DEMO_NEWS / "*.jsonl.zst"),
        model,
        lang="zh",
        tokenizer=demo_spm,
        order=5,
        memory="256M",
        holdout_percent=DEMO_HOLDOUT,
        kenlm_bin=kenlm_bin,
    )
    held = []
    for batch in read_documents(str(DEMO_NEWS / "*.jsonl.zst")):
        split = id_hash_percent(batch.column("id").to_pylist())
        texts = batch.column("text").to_pylist()
        held += [t for t, h in zip(texts, split, strict=True) if h < DEMO_HOLDOUT]
    return model, held


def test_perplexity_separates_heldout_news_from_corrupted_text(demo_news) -> None:
    model, real = demo_news
    shuffled, noise = corrupted_versions(real, real)
    scorer = PerplexityScorer.for_model(model)
    ppl_real, ppl_shuffled, ppl_noise = (
        scorer.score_documents(x).ppl for x in (real, shuffled, noise)
    )
    auc_shuffled, auc_noise = roc_auc(ppl_real, ppl_shuffled), roc_auc(ppl_real, ppl_noise)
    print(
        f"\n{read_card(model).segmentation} segmentation, vocab {scorer.renderer.tokenizer.vocab_size}; "
        f"held-out news docs {len(real)}: ROC AUC shuffled words {auc_shuffled:.4f}, "
        f"random characters {auc_noise:.4f}; median ppl real {np.median(ppl_real):.0f}, "
        f"shuffled {np.median(ppl_shuffled):.0f}, random {np.median(ppl_noise):.0f}"
    )
    assert len(real) >= 200
    assert auc_shuffled >= 0.95
    assert auc_noise >= 0.95


def test_training_argument_errors(tmp_path: Path, tokenizer: SpmTokenizer, kenlm_bin: Path) -> None:
    kwargs = dict(lang="zh", tokenizer=tokenizer, kenlm_bin=kenlm_bin)
    with pytest.raises(ValueError, match="order"):
        train_lm(str(NEWS_ZH), tmp_path / "m.bin", order=9, **kwargs)
    with pytest.raises(ValueError, match="first count must be 0"):
        train_lm(str(NEWS_ZH), tmp_path / "m.bin", prune=(1, 1), **kwargs)
    with pytest.raises(ValueError, match="memory"):
        train_lm(str(NEWS_ZH), tmp_path / "m.bin", memory="lots", **kwargs)
    with pytest.raises(FileNotFoundError, match="matches no file"):
        train_lm(str(tmp_path / "none*.jsonl"), tmp_path / "m.bin", **kwargs)
    empty = tmp_path / "empty.jsonl"
    empty.write_text('{"id": "a", "text": " \\n "}\n')
    with pytest.raises(ValueError, match="no training text"):
        train_lm(str(empty), tmp_path / "m.bin", **kwargs)
    assert not (tmp_path / "m.bin").exists()


def test_repeated_lines_score_as_if_each_were_scored(
    zh_model: Path, tokenizer: SpmTokenizer
) -> None:
    """Each distinct line is scored once; documents sharing lines (boilerplate) get the
    sums they would get with every line scored where it stands."""
    scorer = PerplexityScorer(zh_model, tokenizer)
    boiler, body = "版权所有，未经许可不得转载。", "国务院总理今天会见了外国代表团。"
    docs = [
        f"{boiler}\n{body}\n{boiler}",
        f"双方就共同关心的问题交换了意见！\n{boiler}",
        boiler,
        "",
        f"{body}\n\n{body}",
    ]
    result = scorer.score_documents(docs)
    for i, doc in enumerate(docs):
        lines = [x for x in normalize_documents([doc])[0] if x]
        sentences, num_tokens = scorer.renderer.render(lines)
        log10 = sum(scorer.model.score(s) for s in sentences)
        assert result.log10_prob[i] == pytest.approx(log10, rel=1e-12, abs=1e-12)
        assert result.length[i] == int((num_tokens + 1).sum())
