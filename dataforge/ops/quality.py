"""The ``quality_filter`` op: Gopher/C4-style heuristic document filters, per language.

Each record is measured (:mod:`dataforge.text.stats`) and checked against the thresholds
of its ``lang`` (built-in defaults for ``en`` and ``zh``; any other language falls back
to :data:`DEFAULT_THRESHOLDS`; YAML overrides any field per language). A threshold set
to ``None`` (``null`` in YAML) disables its rule. The first failing rule, in the order
below, is the record's drop reason:

=================================  ==========================================================
reason                             fails when
=================================  ==========================================================
``quality:too_short``              characters < ``min_chars``
``quality:too_long``               characters > ``max_chars``
``quality:lang_mismatch``          Han share of Han+Latin letters outside
                                   [``min_cjk_fraction``, ``max_cjk_fraction``]
``quality:too_few_words``          words < ``min_words``
``quality:too_many_words``         words > ``max_words``
``quality:mean_word_length``       mean word length outside [min, max]_mean_word_length
``quality:symbol_ratio``           (``#`` + ellipses) / words > ``max_symbol_word_ratio``
``quality:digit_ratio``            digits / non-space characters > ``max_digit_fraction``
``quality:bullet_lines``           share of lines starting with a bullet > max
``quality:ellipsis_lines``         share of lines ending in ``...``/``…`` > max
``quality:line_punctuation``       share of lines ending in terminal punctuation (C4's
                                   ``.!?"'`` and CJK ``。！？」』``) < min (FineWeb)
``quality:alpha_words``            share of words with a letter < ``min_alpha_words_fraction``
``quality:stopwords``              distinct stopwords found < ``min_stopwords``
``quality:repetition_lines``       duplicate lines > max share of lines, or their
                                   characters > max share of characters
``quality:repetition_paragraphs``  the same for paragraphs (split at blank lines)
``quality:repetition_top_ngram``   the most frequent repeated word n-gram (n = 2..4) covers
                                   more than its share of the characters
``quality:repetition_dup_ngram``   words inside repeated n-grams (n = 5..10) cover more
                                   than their share of the characters
=================================  ==========================================================

Words: whitespace tokens (Gopher) for ``segmenter: whitespace``; for ``segmenter: jieba``
(Chinese) the jieba segmentation without whitespace and punctuation tokens. Segmentation
uses ``rjieba`` (jieba-rs, same dictionary as jieba; about 13x faster than ``jieba`` and
identical on 98.9% of demo documents). Everything but segmentation is vectorized over the
batch with Arrow kernels and numpy.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dataforge.ops.base import Filter, OpContext
from dataforge.text.stats import document_stats, load_stopwords
from dataforge.typed_config import coerce

__all__ = [
    "DEFAULT_THRESHOLDS",
    "LANGUAGE_THRESHOLDS",
    "QualityFilter",
    "Thresholds",
    "first_failure",
    "quality_metrics",
    "resolve_thresholds",
    "rule_failures",
]

SEGMENTERS = ("whitespace", "jieba")
STOPWORD_LISTS = ("en", "zh")

_NGRAM_TABLES = ("max_top_ngram_chars_fraction", "max_duplicate_ngram_chars_fraction")
GOPHER_TOP_NGRAM = {2: 0.20, 3: 0.18, 4: 0.16}
GOPHER_DUP_NGRAM = {5: 0.15, 6: 0.14, 7: 0.13, 8: 0.12, 9: 0.11, 10: 0.10}


@dataclasses.dataclass(frozen=True)
class Thresholds:
    """Rule thresholds for one language; ``None`` disables a rule."""

    segmenter: str = "whitespace"
    """How words are found: whitespace (space-delimited scripts) or jieba (Chinese)."""
    min_chars: int | None = None
    """Fewest characters (after cleaning)."""
    max_chars: int | None = None
    """Most characters."""
    min_words: int | None = 50
    """Fewest words (Gopher: 50)."""
    max_words: int | None = 100_000
    """Most words (Gopher: 100,000)."""
    min_mean_word_length: float | None = None
    """Shortest mean word length in characters (Gopher, English: 3)."""
    max_mean_word_length: float | None = None
    """Longest mean word length (Gopher, English: 10)."""
    max_symbol_word_ratio: float | None = 0.1
    """(``#`` count + ellipsis count) / words."""
    max_digit_fraction: float | None = 0.3
    """Decimal digits / non-whitespace characters."""
    max_bullet_lines_fraction: float | None = 0.9
    """Share of non-empty lines starting with a bullet (``-*•●▪►✓...``)."""
    max_ellipsis_lines_fraction: float | None = 0.3
    """Share of non-empty lines ending in ``...`` or ``…``."""
    min_terminal_punct_lines_fraction: float | None = 0.12
    """Share of lines ending in terminal punctuation (FineWeb's ``line_punct_thr``)."""
    min_alpha_words_fraction: float | None = None
    """Share of words containing at least one letter."""
    stopwords: str | None = None
    """Stopword list (``en`` or ``zh``, shipped in ``text/resources``)."""
    min_stopwords: int | None = None
    """Distinct stopwords of the list that must occur."""
    min_cjk_fraction: float | None = None
    """Han characters / (Han characters + Latin letters), lower bound."""
    max_cjk_fraction: float | None = None
    """Han characters / (Han characters + Latin letters), upper bound."""
    max_duplicate_lines_fraction: float | None = 0.3
    """Share of non-empty lines that repeat an earlier line of the document."""
    max_duplicate_line_chars_fraction: float | None = 0.2
    """Characters in those repeated lines / all characters."""
    max_duplicate_paragraphs_fraction: float | None = 0.3
    """Share of paragraphs (split at blank lines) that repeat an earlier one."""
    max_duplicate_paragraph_chars_fraction: float | None = 0.2
    """Characters in those repeated paragraphs / all characters."""
    max_top_ngram_chars_fraction: dict[int, float] | None = dataclasses.field(
        default_factory=lambda: dict(GOPHER_TOP_NGRAM)
    )
    """n -> max share of the characters in the most frequent repeated n-gram."""
    max_duplicate_ngram_chars_fraction: dict[int, float] | None = dataclasses.field(
        default_factory=lambda: dict(GOPHER_DUP_NGRAM)
    )
    """n -> max share of the characters inside n-grams seen earlier in the document."""

    def __post_init__(self) -> None:
        if self.segmenter not in SEGMENTERS:
            raise ValueError(f"segmenter={self.segmenter!r}; valid: {', '.join(SEGMENTERS)}")
        if self.stopwords is not None and self.stopwords not in STOPWORD_LISTS:
            raise ValueError(f"stopwords={self.stopwords!r}; valid: {', '.join(STOPWORD_LISTS)}")
        if (self.min_stopwords is None) != (self.stopwords is None):
            raise ValueError("stopwords and min_stopwords must be set together")
        for name in ("max_top_ngram_chars_fraction", "max_duplicate_ngram_chars_fraction"):
            table = getattr(self, name)
            if table is None:
                continue
            if not isinstance(table, dict):
                raise ValueError(f"{name}={table!r}; must map n (2..20) to a fraction")
            normalized = {int(n): float(v) for n, v in table.items()}
            if any(not 2 <= n <= 20 for n in normalized):
                raise ValueError(f"{name}={table!r}; n must be in 2..20")
            object.__setattr__(self, name, normalized)
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, int | float) and not isinstance(value, bool) and value < 0:
                raise ValueError(f"{field.name}={value!r}; must be >= 0 or null")
            # A fraction above 1 is accepted by the comparison but keeps (or drops) everything.
            if field.name.endswith("_fraction") and isinstance(value, float | int) and value > 1:
                raise ValueError(f"{field.name}={value!r}; valid range: 0 to 1, or null")
            if isinstance(value, dict) and any(not 0 <= v <= 1 for v in value.values()):
                raise ValueError(f"{field.name}={value!r}; fractions must be in 0 to 1")


DEFAULT_THRESHOLDS = Thresholds()
LANGUAGE_THRESHOLDS: dict[str, Thresholds] = {
    "en": Thresholds(
        min_mean_word_length=3.0,
        max_mean_word_length=10.0,
        min_alpha_words_fraction=0.8,
        stopwords="en",
        min_stopwords=2,
        max_cjk_fraction=0.1,
    ),
    "zh": Thresholds(
        segmenter="jieba",
        stopwords="zh",
        min_stopwords=2,
        min_cjk_fraction=0.3,
    ),
}


def resolve_thresholds(
    languages: dict[str, dict[str, Any]], default: dict[str, Any]
) -> tuple[dict[str, Thresholds], Thresholds]:
    """Apply YAML overrides to the built-in thresholds.

    Raises:
        ValueError: unknown threshold names (listing the valid ones) or bad values.
    """
    hints = typing.get_type_hints(Thresholds)

    def merged(base: Thresholds, overrides: dict[str, Any], where: str) -> Thresholds:
        if not isinstance(overrides, dict):
            raise ValueError(f"quality_filter.{where} must be a mapping, got {overrides!r}")
        unknown = sorted(set(overrides) - set(hints))
        if unknown:
            raise ValueError(
                f"quality_filter.{where}: unknown keys {unknown}; valid: {', '.join(sorted(hints))}"
            )
        # Typed like any config value, so `min_words: "abc"` fails at load with its key path
        # (the n-gram tables accept "2" keys too; __post_init__ normalizes and checks them).
        typed = {
            key: value
            if key in _NGRAM_TABLES
            else coerce(hints[key], value, f"quality_filter.{where}.{key}")
            for key, value in overrides.items()
        }
        try:
            return dataclasses.replace(base, **typed)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"quality_filter.{where}: {exc}") from exc

    fallback = merged(DEFAULT_THRESHOLDS, default, "default")
    per_lang = {
        lang: merged(t, languages.get(lang, {}), f"languages.{lang}")
        for lang, t in LANGUAGE_THRESHOLDS.items()
    }
    for lang, overrides in languages.items():
        if lang not in per_lang:
            per_lang[lang] = merged(fallback, overrides, f"languages.{lang}")
    return per_lang, fallback


def quality_metrics(text: pa.Array, thresholds: Thresholds) -> dict[str, np.ndarray]:
    """The measures the rules of ``thresholds`` need (see :func:`document_stats`)."""
    sizes = set(thresholds.max_top_ngram_chars_fraction or ()) | set(
        thresholds.max_duplicate_ngram_chars_fraction or ()
    )
    stopwords = load_stopwords(thresholds.stopwords) if thresholds.stopwords else None
    return document_stats(text, thresholds.segmenter, stopwords, sizes)


# ----------------------------------------------------------------------------------------
# Rules


def _above(value: np.ndarray, limit: float | None) -> np.ndarray:
    return np.zeros(len(value), bool) if limit is None else value > limit


def _below(value: np.ndarray, limit: float | None) -> np.ndarray:
    return np.zeros(len(value), bool) if limit is None else value < limit


def _ngram_rule(
    m: dict[str, np.ndarray], prefix: str, limits: dict[int, float] | None
) -> np.ndarray:
    fail = np.zeros(len(m["chars"]), bool)
    for size, limit in (limits or {}).items():
        fail |= m[f"{prefix}_{size}gram_fraction"] > limit
    return fail


def rule_failures(m: dict[str, np.ndarray], t: Thresholds) -> list[tuple[str, np.ndarray]]:
    """(reason, failing mask) per rule, in the documented order."""
    cjk = m["cjk_fraction"]
    return [
        ("quality:too_short", _below(m["chars"], t.min_chars)),
        ("quality:too_long", _above(m["chars"], t.max_chars)),
        (
            "quality:lang_mismatch",
            _below(cjk, t.min_cjk_fraction) | _above(cjk, t.max_cjk_fraction),
        ),
        ("quality:too_few_words", _below(m["words"], t.min_words)),
        ("quality:too_many_words", _above(m["words"], t.max_words)),
        (
            "quality:mean_word_length",
            _below(m["mean_word_length"], t.min_mean_word_length)
            | _above(m["mean_word_length"], t.max_mean_word_length),
        ),
        ("quality:symbol_ratio", _above(m["symbol_word_ratio"], t.max_symbol_word_ratio)),
        ("quality:digit_ratio", _above(m["digit_fraction"], t.max_digit_fraction)),
        ("quality:bullet_lines", _above(m["bullet_lines_fraction"], t.max_bullet_lines_fraction)),
        (
            "quality:ellipsis_lines",
            _above(m["ellipsis_lines_fraction"], t.max_ellipsis_lines_fraction),
        ),
        (
            "quality:line_punctuation",
            _below(m["terminal_punct_lines_fraction"], t.min_terminal_punct_lines_fraction),
        ),
        ("quality:alpha_words", _below(m["alpha_words_fraction"], t.min_alpha_words_fraction)),
        ("quality:stopwords", _below(m.get("stopwords", m["chars"]), t.min_stopwords)),
        (
            "quality:repetition_lines",
            _above(m["duplicate_lines_fraction"], t.max_duplicate_lines_fraction)
            | _above(m["duplicate_line_chars_fraction"], t.max_duplicate_line_chars_fraction),
        ),
        (
            "quality:repetition_paragraphs",
            _above(m["duplicate_paragraphs_fraction"], t.max_duplicate_paragraphs_fraction)
            | _above(
                m["duplicate_paragraph_chars_fraction"], t.max_duplicate_paragraph_chars_fraction
            ),
        ),
        ("quality:repetition_top_ngram", _ngram_rule(m, "top", t.max_top_ngram_chars_fraction)),
        (
            "quality:repetition_dup_ngram",
            _ngram_rule(m, "dup", t.max_duplicate_ngram_chars_fraction),
        ),
    ]


def first_failure(m: dict[str, np.ndarray], t: Thresholds) -> np.ndarray:
    """The reason of the first failing rule per doc (object array; ``None`` = keep)."""
    reasons = np.full(len(m["chars"]), None, dtype=object)
    for reason, fail in reversed(rule_failures(m, t)):
        reasons[fail] = reason
    return reasons


class QualityFilter(Filter):
    """Drop documents that fail heuristic quality rules (reasons in the module docstring)."""

    name: ClassVar[str] = "quality_filter"

    @dataclasses.dataclass(frozen=True)
    class Config:
        languages: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
        """Per language code: overrides of :class:`Thresholds` fields (e.g.
        ``{zh: {min_words: 30}}``); built-in defaults exist for ``en`` and ``zh``, other
        codes start from ``default``."""
        default: dict[str, Any] = dataclasses.field(default_factory=dict)
        """Overrides of the fallback thresholds used for languages without their own."""

        def __post_init__(self) -> None:
            if not isinstance(self.languages, dict):
                raise ValueError(f"quality_filter.languages={self.languages!r}; must be a mapping")
            resolve_thresholds(self.languages, self.default)

    def __init__(self, config: Config, context: OpContext | None = None) -> None:
        super().__init__(config, context)
        self.thresholds, self.fallback = resolve_thresholds(config.languages, config.default)
        self._segmenter_ready = False

    def thresholds_for(self, lang: str) -> Thresholds:
        return self.thresholds.get(lang, self.fallback)

    def setup(self) -> None:
        """Load the jieba dictionary (rjieba) once, if any language segments with it."""
        if any(t.segmenter == "jieba" for t in [*self.thresholds.values(), self.fallback]):
            import rjieba

            rjieba.cut("加载词典")
        self._segmenter_ready = True

    def validate(self) -> list[str]:
        """The jieba segmenter (rjieba) must be importable when a language uses it."""
        if not any(t.segmenter == "jieba" for t in [*self.thresholds.values(), self.fallback]):
            return []
        try:
            import rjieba  # noqa: F401
        except ImportError as err:
            return [f"quality_filter: segmenter jieba needs the rjieba package ({err})"]
        return []

    def drop_reasons(self, live: pa.Table) -> list[str | None]:
        if not self._segmenter_ready:
            self.setup()
        text = pc.fill_null(live.column("text").combine_chunks(), "")
        langs = pc.fill_null(live.column("lang").combine_chunks(), "")
        reasons = np.full(live.num_rows, None, dtype=object)
        for lang in pc.unique(langs).to_pylist():
            rows = np.flatnonzero(pc.equal(langs, lang).to_numpy(False))
            thresholds = self.thresholds_for(lang)
            metrics = quality_metrics(text.take(rows), thresholds)
            reasons[rows] = first_failure(metrics, thresholds)
        return reasons.tolist()
