"""The quality_filter op: each rule on real-looking Chinese and English text, metrics on
small exact cases, config handling and drop accounting."""

from __future__ import annotations

import random
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dataforge.ops.quality as quality
from dataforge.ops.base import op_class
from dataforge.ops.clean import Clean
from dataforge.ops.quality import QualityFilter, Thresholds, quality_metrics
from dataforge.records import BASE_SCHEMA
from dataforge.text.stats import load_stopwords

FIXTURES = Path(__file__).parent.parent / "fixtures"


def batch(texts: list[str], langs: list[str], drops: list[str | None] | None = None) -> pa.Table:
    n = len(texts)
    return pa.table(
        {
            "id": [f"q{i}" for i in range(n)],
            "text": texts,
            "source": ["s"] * n,
            "lang": langs,
            "meta": ["{}"] * n,
            "drop": drops or [None] * n,
            "_ord": list(range(n)),
        },
        schema=BASE_SCHEMA,
    )


def cleaned(text: str) -> str:
    return Clean(Clean.Config())(batch([text], ["x"])).column("text")[0].as_py()


EN = cleaned((FIXTURES / "ops_docs_en.txt").read_text("utf-8"))  # Python's copy module docs
ZH = cleaned((FIXTURES / "ops_news_zh.txt").read_text("utf-8"))  # People's Daily, 1998-01
SAMPLE = {"en": EN, "zh": ZH}


def reason(text: str, lang: str, **languages) -> str | None:
    op = QualityFilter(QualityFilter.Config(languages=languages))
    op.setup()
    return op(batch([text], [lang])).column("drop")[0].as_py()


def lines_of(lang: str) -> list[str]:
    return [line for line in SAMPLE[lang].split("\n") if line.strip()]


# --- the fixtures themselves pass --------------------------------------------------------


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_real_text_passes(lang: str) -> None:
    assert reason(SAMPLE[lang], lang) is None


# --- one test per rule, each with the other rules left at their defaults -------------------


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_length_rules(lang: str) -> None:
    text = SAMPLE[lang]
    assert reason(text, lang, **{lang: {"min_chars": len(text) + 1}}) == "quality:too_short"
    assert reason(text, lang, **{lang: {"max_chars": len(text) - 1}}) == "quality:too_long"
    assert reason(text, lang, **{lang: {"max_words": 40}}) == "quality:too_many_words"
    head = text[:60] if lang == "zh" else " ".join(text.split()[:30])
    assert reason(head, lang) == "quality:too_few_words"


def test_lang_mismatch_both_ways() -> None:
    assert reason(ZH, "en") == "quality:lang_mismatch"
    assert reason(EN, "zh") == "quality:lang_mismatch"
    mixed = ZH + "\n" + EN * 3  # mostly English under zh
    assert reason(mixed, "zh") == "quality:lang_mismatch"


def test_mean_word_length_en() -> None:
    rng = random.Random(0)
    long_tokens = " ".join("".join(rng.choices("abcdefghij", k=30)) for _ in range(400))
    assert reason(EN + "\n" + long_tokens, "en") == "quality:mean_word_length"
    short = " ".join(["a an is to of in on at by we"] * 30)
    assert reason(short, "en", en={"max_top_ngram_chars_fraction": None}) == (
        "quality:mean_word_length"
    )


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_symbol_ratio(lang: str) -> None:
    tags = " ".join(f"#tag{i}" for i in range(120))
    assert reason(SAMPLE[lang] + "\n" + tags, lang) == "quality:symbol_ratio"


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_digit_ratio(lang: str) -> None:
    rng = random.Random(1)
    table = "\n".join(
        " ".join(str(rng.randrange(10**6, 10**7)) for _ in range(8)) for _ in range(40)
    )
    assert reason(SAMPLE[lang] + "\n" + table, lang) == "quality:digit_ratio"


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_bullet_lines(lang: str) -> None:
    bulleted = "\n".join(f"• {line}" for line in lines_of(lang))
    assert reason(bulleted, lang) == "quality:bullet_lines"
    half = "\n".join(f"- {line}" if i % 2 else line for i, line in enumerate(lines_of(lang)))
    assert reason(half, lang) is None


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_ellipsis_lines(lang: str) -> None:
    ellipsis = "……" if lang == "zh" else "..."
    cut = "\n".join(line[: max(1, len(line) // 2)] + ellipsis for line in lines_of(lang))
    # each cut line also adds an ellipsis symbol; that rule is tested on its own
    off = {"max_symbol_word_ratio": None}
    assert reason(cleaned(cut), lang, **{lang: off}) == "quality:ellipsis_lines"


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_line_punctuation(lang: str) -> None:
    unpunctuated = "\n".join(re.sub(r"[.!?。\"”]+$", "", line) for line in lines_of(lang))
    assert reason(unpunctuated, lang) == "quality:line_punctuation"


def test_alpha_words_en() -> None:
    assert reason(" | ".join(EN.split()), "en") == "quality:alpha_words"


def test_stopwords() -> None:
    stop = set(load_stopwords("en"))
    no_stop = " ".join(w for w in EN.split() if w.lower() not in stop)
    assert reason(no_stop, "en") == "quality:stopwords"
    cities = "北京 上海 天津 重庆 广州 深圳 杭州 南京 武汉 成都 西安 沈阳 长春 哈尔滨 济南 青岛"
    provinces = "河北 山西 辽宁 吉林 江苏 浙江 安徽 福建 江西 山东 河南 湖北 湖南 广东 海南 四川"
    listing = "、".join(
        (cities + " " + provinces + " 贵州 云南 陕西 甘肃 青海 台湾 西藏").split() * 2
    )
    listing += "。"
    off = {"max_duplicate_ngram_chars_fraction": None, "max_top_ngram_chars_fraction": None}
    assert reason(listing, "zh", zh=off) == "quality:stopwords"


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_repetition_lines(lang: str) -> None:
    lines = lines_of(lang)
    repeated = "\n".join(lines + [lines[1]] * len(lines))
    assert reason(repeated, lang) == "quality:repetition_lines"


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_repetition_paragraphs(lang: str) -> None:
    paragraphs = SAMPLE[lang].split("\n\n") if lang == "en" else lines_of(lang)
    repeated = "\n\n".join(paragraphs + paragraphs[:8] * 2)
    off = {"max_duplicate_lines_fraction": None, "max_duplicate_line_chars_fraction": None}
    assert reason(repeated, lang, **{lang: off}) == "quality:repetition_paragraphs"


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_repetition_top_ngram(lang: str) -> None:
    if lang == "en":
        spiked = " ".join(
            w + (" New York" if i % 3 == 0 else "") for i, w in enumerate(EN.split(" "))
        )
    else:
        spiked = re.sub(",", ",人民日报记者报道,", ZH)
    assert reason(spiked, lang) == "quality:repetition_top_ngram"


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_repetition_duplicate_ngrams(lang: str) -> None:
    sentence = max(lines_of(lang), key=len)
    text = SAMPLE[lang] + "\n" + (" " if lang == "en" else "").join([sentence] * 3)
    off = {"max_top_ngram_chars_fraction": None, "max_duplicate_line_chars_fraction": None}
    assert reason(text, lang, **{lang: off}) == "quality:repetition_dup_ngram"


# --- metrics on small exact cases ---------------------------------------------------------


def metrics(text: str, **overrides) -> dict[str, float]:
    thresholds = Thresholds(**overrides)
    return {k: float(v[0]) for k, v in quality_metrics(pa.array([text]), thresholds).items()}


def test_metrics_exact_whitespace() -> None:
    m = metrics("x y x y x y\nab cd\nab cd\n\n- item...\n")
    assert m["words"] == 12
    assert m["duplicate_lines_fraction"] == pytest.approx(1 / 4)  # 4 non-empty lines, 1 repeat
    assert m["duplicate_line_chars_fraction"] == pytest.approx(5 / 35)
    assert m["bullet_lines_fraction"] == pytest.approx(1 / 4)
    assert m["ellipsis_lines_fraction"] == pytest.approx(1 / 4)
    # "x y" occurs 3 times (overlaps counted) at 2 chars: 6; "ab cd" twice at 4 chars: 8
    assert m["top_2gram_fraction"] == pytest.approx(2 * 4 / 35)
    # "x y x y x" occurs once, "y x y x y" once: nothing repeats at n=5
    assert m["dup_5gram_fraction"] == 0
    assert m["symbol_word_ratio"] == pytest.approx(1 / 12)


def test_metrics_duplicate_ngram_coverage() -> None:
    m = metrics("a b c d e f a b c d e g")
    # "a b c d e" repeats; its second occurrence covers 5 one-char words of 23 chars
    assert m["dup_5gram_fraction"] == pytest.approx(5 / 23)
    assert m["dup_6gram_fraction"] == 0
    assert m["top_4gram_fraction"] == pytest.approx(2 * 4 / 23)


def test_metrics_jieba_words_skip_punctuation() -> None:
    m = metrics("我们在北京，天气很好。", segmenter="jieba", stopwords="zh", min_stopwords=1)
    assert m["words"] == 6  # 我们 在 北京 天气 很 好
    assert m["stopwords"] == 3  # 我们 在 很
    assert m["cjk_fraction"] == 1.0


def test_metrics_scripts_and_digits() -> None:
    m = metrics("abc 中文 12")
    assert m["cjk_fraction"] == pytest.approx(2 / 5)
    assert m["digit_fraction"] == pytest.approx(2 / 7)


# --- config, fallback, accounting ---------------------------------------------------------


def test_registry_and_docstring_list_every_reason() -> None:
    assert op_class("quality_filter") is QualityFilter
    m = quality_metrics(pa.array(["x"]), quality.LANGUAGE_THRESHOLDS["en"])
    reasons = [r for r, _ in quality.rule_failures(m, quality.LANGUAGE_THRESHOLDS["en"])]
    documented = re.findall(r"``(quality:[a-z_]+)``", quality.__doc__)
    assert reasons == documented


def test_unknown_language_falls_back_to_default() -> None:
    op = QualityFilter(QualityFilter.Config(default={"min_words": 5}))
    assert op.thresholds_for("fr") == Thresholds(min_words=5)
    assert op.thresholds_for("zh").segmenter == "jieba"
    text = "le chat est sur la table et il dort depuis ce matin."  # no en stopwords needed
    assert reason(text, "fr") == "quality:too_few_words"
    assert (
        QualityFilter(QualityFilter.Config(default={"min_words": 5}))(batch([text], ["fr"]))
        .column("drop")[0]
        .as_py()
        is None
    )


def test_overrides_and_disabling() -> None:
    op = QualityFilter(QualityFilter.Config(languages={"en": {"min_words": None}, "de": {}}))
    assert op.thresholds_for("en").min_words is None
    assert op.thresholds_for("en").stopwords == "en"  # other en defaults kept
    assert op.thresholds_for("de") == quality.DEFAULT_THRESHOLDS
    t = Thresholds(max_top_ngram_chars_fraction={"3": 0.5})
    assert t.max_top_ngram_chars_fraction == {3: 0.5}


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"languages": {"en": {"min_word": 3}}}, "unknown keys ['min_word']; valid: "),
        ({"default": {"segmenter": "spaces"}}, "valid: whitespace, jieba"),
        ({"languages": {"zh": {"stopwords": "fr"}}}, "valid: en, zh"),
        ({"languages": {"en": {"stopwords": None}}}, "set together"),
        ({"languages": {"en": {"min_chars": -1}}}, "must be >= 0"),
        ({"languages": {"en": {"max_duplicate_ngram_chars_fraction": {1: 0.1}}}}, "n must be"),
        ({"languages": {"en": "strict"}}, "must be a mapping"),
    ],
)
def test_bad_config_is_rejected(config: dict, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        QualityFilter.Config(**config)


def test_mixed_languages_and_earlier_drops_in_one_batch() -> None:
    op = QualityFilter(QualityFilter.Config())
    texts, langs = [EN, ZH, ZH, "很短的一句话", EN], ["en", "zh", "en", "zh", "en"]
    out = op(batch(texts, langs, drops=[None, None, None, None, "dedup:minhash"]))
    assert out.column("drop").to_pylist() == [
        None,
        None,
        "quality:lang_mismatch",
        "quality:too_few_words",
        "dedup:minhash",
    ]
    assert out.column("text").to_pylist() == [EN, ZH, ZH, "很短的一句话", EN]


_WORDS = st.sampled_from(
    [
        *"the of data 中文 的 是 # ... … • 123 New York 了 测试 x".split(),
        "- ",
        "\n",
        "\n\n",
        " ",
        "   ",
    ]
)


@settings(max_examples=60, deadline=None)
@given(
    docs=st.lists(st.lists(_WORDS, max_size=120).map(" ".join), min_size=1, max_size=6),
    langs=st.lists(st.sampled_from(["en", "zh", "fr"]), min_size=6, max_size=6),
)
def test_every_row_kept_or_dropped_with_a_documented_reason(docs: list[str], langs) -> None:
    documented = set(re.findall(r"``(quality:[a-z_]+)``", quality.__doc__))
    out = QualityFilter(QualityFilter.Config())(batch(docs, langs[: len(docs)]))
    assert out.num_rows == len(docs)
    assert out.column("id").to_pylist() == [f"q{i}" for i in range(len(docs))]
    reasons = out.column("drop").to_pylist()
    assert all(r is None or r in documented for r in reasons)
    # a batch gives the same decisions as its rows one by one (no cross-row leakage)
    op = QualityFilter(QualityFilter.Config())
    single = [
        op(batch([d], [lang])).column("drop")[0].as_py()
        for d, lang in zip(docs, langs[: len(docs)], strict=True)
    ]
    assert reasons == single


def test_metrics_are_float_arrays_per_doc() -> None:
    m = quality_metrics(pa.array([EN, "", "one"]), quality.LANGUAGE_THRESHOLDS["en"])
    assert all(isinstance(v, np.ndarray) and v.shape == (3,) for v in m.values())
    assert m["words"].tolist() == [len(EN.split()), 0, 1]


def test_empty_and_fully_dropped_batches_pass_through() -> None:
    op = QualityFilter(QualityFilter.Config())
    assert op.validate() == []
    assert op(batch([], [])).num_rows == 0
    dropped = batch(["short", "短"], ["en", "zh"], drops=["empty", "dedup:exact"])
    assert op(dropped).equals(dropped)


@pytest.mark.parametrize(
    ("languages", "message"),
    [
        (
            {"zh": {"min_words": "abc"}},
            "quality_filter.languages.zh.min_words: expected an integer",
        ),
        ({"de": {"max_digit_fraction": "x"}}, "quality_filter.languages.de.max_digit_fraction"),
        ({"en": {"stopwords": 3}}, "quality_filter.languages.en.stopwords: expected a string"),
    ],
)
def test_nested_thresholds_are_typed_at_load(languages: dict, message: str, tmp_path) -> None:
    """A wrongly typed per-language threshold fails when the pipeline loads, naming its key
    path, instead of as a numpy error in the middle of a run."""
    from dataforge.config import ConfigError, load_pipeline

    data = tmp_path / "a.jsonl"
    data.write_text('{"text": "x"}\n')
    path = tmp_path / "p.yaml"
    path.write_text(
        "name: t\ninputs: [{name: a, path: a.jsonl}]\noutput: {path: out}\n"
        f"stages: [{{op: quality_filter, languages: {languages!r}}}]\n"
    )
    with pytest.raises(ConfigError, match=re.escape(message)) as info:
        load_pipeline(path)
    assert "stages[0] (quality_filter)" in str(info.value)
