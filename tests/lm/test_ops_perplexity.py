"""The perplexity_filter op: config rules, validate(), routing, meta.ppl, reasons, buckets."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from lm_testkit import DOCS_EN, NEWS_ZH, SpmTokenizer, read_fixture, train_spm

from dataforge.config import ConfigError, from_mapping
from dataforge.lm.cutoffs import deterministic_sample
from dataforge.lm.score import PerplexityScorer
from dataforge.ops.base import OpContext, op_class
from dataforge.ops.perplexity import PerplexityFilter
from dataforge.records import BASE_SCHEMA

ZH_DOC = "国务院总理今天在人民大会堂会见了来访的外国代表团，双方就共同关心的问题交换了意见。"
EN_DOC = "Return a new sorted list from the items in iterable."


def make_batch(rows: list[tuple[str, str, str | None]], meta: str = "{}") -> pa.Table:
    """rows: (lang, text, drop)."""
    return pa.Table.from_pylist(
        [
            {
                "id": f"r{i}",
                "text": text,
                "source": f"s_{lang}",
                "lang": lang,
                "meta": meta,
                "drop": drop,
                "_ord": i,
            }
            for i, (lang, text, drop) in enumerate(rows)
        ],
        schema=BASE_SCHEMA,
    )


def make_op(base: Path, sources: dict[str, str] | None = None, **params) -> PerplexityFilter:
    config = from_mapping(PerplexityFilter.Config, params, "stage")
    return PerplexityFilter(config, OpContext(seed=1, sources=sources or {}, base_dir=str(base)))


def metas(batch: pa.Table) -> list[dict]:
    return [json.loads(m) for m in batch.column("meta").to_pylist()]


def test_registry_resolves_the_op() -> None:
    assert op_class("perplexity_filter") is PerplexityFilter


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"models": {}}, "at least one language"),
        (
            {"models": {"zh": "m"}, "max_ppl": {"en": 10}},
            r"max_ppl: languages \['en'\] have no model",
        ),
        (
            {"models": {"zh": "m"}, "min_ppl": {"zh": 50}, "max_ppl": {"zh": 40}},
            "min_ppl 50.0 >= max_ppl",
        ),
        ({"models": {"zh": "m"}, "keep_buckets": ["top"]}, "valid: head, middle, tail"),
        (
            {"models": {"zh": "m"}, "keep_buckets": ["head"]},
            r"needs bucket_cutoffs or bucket_sample for \['zh'\]",
        ),
        ({"models": {"zh": "m"}, "bucket_cutoffs": {"zh": [50, 10]}}, "head_max <= middle_max"),
        ({"models": {"zh": "m"}, "bucket_percentiles": [60, 30]}, "0 < head < middle < 100"),
        ({"models": {"zh": "m"}, "missing_model": "ignore"}, "'keep', 'drop', 'error'"),
        ({"models": {"zh": "m"}, "max_pppl": {"zh": 1}}, "unknown key"),
    ],
)
def test_config_errors_name_the_problem(params: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        from_mapping(PerplexityFilter.Config, params, "stage")


def test_validate_accepts_a_complete_setup(zh_model: Path, en_model: Path) -> None:
    op = make_op(
        zh_model.parent, {"news": "zh", "docs": "en"}, models={"zh": "zh.bin", "en": "en.bin"}
    )
    assert op.validate() == []


def test_validate_reports_missing_model_card_and_language(tmp_path: Path, zh_model: Path) -> None:
    shutil.copy(zh_model, tmp_path / "nocard.bin")
    (tmp_path / "junk.bin").write_bytes(b"not a model at all")
    op = make_op(
        tmp_path,
        {"news": "zh", "docs": "en", "web": "fr"},
        models={"zh": "nocard.bin", "en": "absent.bin", "fr": "junk.bin"},
    )
    problems = "\n".join(op.validate())
    assert "models.en" in problems and "cannot read model" in problems
    assert "models.fr" in problems and "not a KenLM binary" in problems
    assert "models.zh" in problems and "model card" in problems and "not found" in problems
    op = make_op(zh_model.parent, {"news": "zh", "docs": "en"}, models={"zh": "zh.bin"})
    [problem] = op.validate()
    assert "source 'docs' has lang 'en' with no model" in problem
    relaxed = make_op(
        zh_model.parent, {"news": "zh", "docs": "en"}, models={"zh": "zh.bin"}, missing_model="keep"
    )
    assert relaxed.validate() == []


def test_validate_reports_tokenizer_mismatch(tmp_path: Path, zh_model: Path) -> None:
    other = train_spm(tmp_path / "other_tok", vocab_size=3400)
    op = make_op(zh_model.parent, {"news": "zh"}, models={"zh": "zh.bin"}, tokenizer=str(other))
    [problem] = op.validate()
    assert "tokenizer mismatch" in problem and "retrain" in problem
    with pytest.raises(ValueError, match="not the one the model was trained with"):
        op.setup()


def test_routes_by_language_and_writes_meta(
    zh_model: Path, en_model: Path, tokenizer: SpmTokenizer
) -> None:
    op = make_op(zh_model.parent, models={"zh": "zh.bin", "en": "en.bin"})
    op.setup()
    batch = make_batch(
        [
            ("zh", ZH_DOC, None),
            ("en", EN_DOC, None),
            ("zh", EN_DOC, None),
            ("en", ZH_DOC, "too_short"),
        ],
        meta='{"keep": 1}',
    )
    out = op(batch)
    zh = PerplexityScorer(zh_model, tokenizer).score_documents([ZH_DOC, EN_DOC]).ppl
    en = PerplexityScorer(en_model, tokenizer).score_documents([EN_DOC]).ppl
    got = metas(out)
    assert [m["ppl"] for m in got[:3]] == [round(zh[0], 1), round(en[0], 1), round(zh[1], 1)]
    assert got[3] == {"keep": 1} and all(m["keep"] == 1 for m in got)  # dropped row untouched
    assert out.column("drop").to_pylist() == [None, None, None, "too_short"]
    assert out.column("text").to_pylist() == batch.column("text").to_pylist()
    assert out.schema == batch.schema


def test_thresholds_and_empty_documents(zh_model: Path, tokenizer: SpmTokenizer) -> None:
    news = [r["text"] for r in read_fixture(NEWS_ZH)][:12]
    ppl = PerplexityScorer(zh_model, tokenizer).score_documents(news).ppl
    low, high = np.percentile(ppl, [25, 75])
    op = make_op(
        zh_model.parent,
        models={"zh": "zh.bin"},
        min_ppl={"zh": float(low)},
        max_ppl={"zh": float(high)},
    )
    out = op(
        make_batch(
            [("zh", t, None) for t in news] + [("zh", "", None), ("zh", " \n\u3000\n", None)]
        )
    )
    expected = ["perplexity" if (p < low or p > high) else None for p in ppl]
    assert out.column("drop").to_pylist() == expected + ["perplexity:empty", "perplexity:empty"]
    assert [m.get("ppl") for m in metas(out)] == [round(p, 1) for p in ppl] + [None, None]


@pytest.mark.parametrize(
    ("policy", "reason"),
    [("keep", None), ("drop", "perplexity:no_model"), ("error", "error:perplexity_no_model")],
)
def test_language_without_model(zh_model: Path, policy: str, reason: str | None) -> None:
    op = make_op(zh_model.parent, models={"zh": "zh.bin"}, missing_model=policy)
    out = op(make_batch([("fr", "Bonjour tout le monde.", None), ("zh", ZH_DOC, None)]))
    assert out.column("drop").to_pylist() == [reason, None]
    assert metas(out)[0] == {} and "ppl" in metas(out)[1]


def test_buckets_with_given_cutoffs(zh_model: Path, tokenizer: SpmTokenizer) -> None:
    news = [r["text"] for r in read_fixture(NEWS_ZH)][:20]
    ppl = PerplexityScorer(zh_model, tokenizer).score_documents(news).ppl
    head, middle = (float(x) for x in np.percentile(ppl, [30, 60]))
    op = make_op(
        zh_model.parent,
        models={"zh": "zh.bin"},
        bucket_cutoffs={"zh": [head, middle]},
        keep_buckets=["head", "middle"],
    )
    out = op(make_batch([("zh", t, None) for t in news]))
    buckets = ["head" if p < head else "middle" if p < middle else "tail" for p in ppl]
    assert [m["ppl_bucket"] for m in metas(out)] == buckets
    assert out.column("drop").to_pylist() == [
        "perplexity" if b == "tail" else None for b in buckets
    ]
    assert buckets.count("head") == 6 and buckets.count("tail") == 8


def test_buckets_estimated_from_a_deterministic_sample(
    tmp_path: Path, zh_model: Path, tokenizer: SpmTokenizer
) -> None:
    lines = NEWS_ZH.read_text(encoding="utf-8").splitlines(keepends=True)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "1.jsonl").write_text("".join(lines[:90]), encoding="utf-8")
    (tmp_path / "a" / "2.jsonl").write_text("".join(lines[90:]), encoding="utf-8")
    (tmp_path / "b" / "1.jsonl").write_text("".join(reversed(lines)), encoding="utf-8")
    sample_a = deterministic_sample(str(tmp_path / "a" / "*.jsonl"), 50)
    sample_b = deterministic_sample(str(tmp_path / "b" / "*.jsonl"), 50)
    assert sample_a == sample_b and len(sample_a) == 50  # independent of file layout and order
    ppl = PerplexityScorer(zh_model, tokenizer).score_documents(sample_a).ppl
    model = str(zh_model)
    op = make_op(
        tmp_path,
        models={"zh": model},
        bucket_sample={"zh": "b/*.jsonl"},
        bucket_sample_size=50,
        bucket_percentiles=[20, 70],
        keep_buckets=["middle"],
    )
    assert op.validate() == []
    op.setup()
    assert op.cutoffs["zh"] == pytest.approx(tuple(np.percentile(ppl, [20, 70])))
    out = op(make_batch([("zh", t, None) for t in sample_a]))
    assert out.column("drop").to_pylist().count(None) == sum(
        1 for m in metas(out) if m["ppl_bucket"] == "middle"
    )
    missing = make_op(
        tmp_path, models={"zh": model}, bucket_sample={"zh": "c/*.jsonl"}, keep_buckets=["head"]
    )
    assert "matches no file" in missing.validate()[0]


def test_english_routing_uses_english_model(
    en_model: Path, zh_model: Path, tokenizer: SpmTokenizer
) -> None:
    docs = [r["text"] for r in read_fixture(DOCS_EN)][:5]
    op = make_op(zh_model.parent, models={"zh": "zh.bin", "en": "en.bin"})
    out = op(make_batch([("en", t, None) for t in docs]))
    en = PerplexityScorer(en_model, tokenizer).score_documents(docs).ppl
    zh = PerplexityScorer(zh_model, tokenizer).score_documents(docs).ppl
    assert [m["ppl"] for m in metas(out)] == [round(p, 1) for p in en]
    assert (en < zh).all()  # and the English model does fit English better
