"""Thresholds of the ``quality_filter`` rules, per language, and their YAML overrides.

Built-in defaults exist for ``en`` and ``zh`` (Gopher / C4 / FineWeb values adapted to
Chinese); any other language falls back to :data:`DEFAULT_THRESHOLDS`. The rules themselves
are tabled in :mod:`dataforge.ops.quality`.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

from dataforge.typed_config import coerce

__all__ = [
    "DEFAULT_THRESHOLDS",
    "GOPHER_DUP_NGRAM",
    "GOPHER_TOP_NGRAM",
    "LANGUAGE_THRESHOLDS",
    "SEGMENTERS",
    "STOPWORD_LISTS",
    "Thresholds",
    "resolve_thresholds",
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
