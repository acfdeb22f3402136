"""``perplexity_filter``: CCNet-style KenLM perplexity per document, routed by language.

Each record is scored by the model of its ``lang`` (see :mod:`dataforge.lm.score` for the
formula), tokenized as that model's card says (``segmentation``: ``sentencepiece``,
``tokenizer`` or ``chars``, see :mod:`dataforge.lm.tokens`); the result goes to ``meta.ppl`` (rounded
to 0.1 as CCNet does) and, where the language has bucket cutoffs, ``meta.ppl_bucket`` (``head``/``middle``/``tail``). Records
are dropped with reason ``perplexity`` outside ``[min_ppl, max_ppl]`` or outside
``keep_buckets``, and with ``perplexity:empty`` when no line has text after normalization.

A record whose language has no model follows ``missing_model``: ``keep`` passes it
unscored, ``drop`` drops it (``perplexity:no_model``), ``error`` (default) makes
``dataforge validate`` fail for any source of that language (or, after a ``lang_id``
stage, any language it keeps), and a record that still arrives is counted as
``error:perplexity_no_model``.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import posixpath
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa

from dataforge.lm.card import ModelCard, card_path, read_card
from dataforge.lm.cutoffs import BUCKETS, assign_buckets, estimate_cutoffs
from dataforge.lm.tokens import SEGMENTATIONS
from dataforge.lm.train import sha256_file
from dataforge.ops.base import Filter, set_drop_reasons
from dataforge.records import live_mask
from dataforge.text.normalize import NORMALIZATION

__all__ = ["PerplexityFilter"]

MISSING_MODEL_CHOICES = ("keep", "drop", "error")
# ``error``: validate() already refused sources of such a language, so a record that still
# arrives (a lang outside the YAML sources) is a per-record error, bounded by max_error_rate.
_NO_MODEL_REASON = {
    "keep": None,
    "drop": "perplexity:no_model",
    "error": "error:perplexity_no_model",
}
_KENLM_MAGIC = (b"mmap lm ", b"\\data\\", b"\n\\data\\")


class PerplexityFilter(Filter):
    """Filter documents by KenLM perplexity (per-language models, CCNet buckets)."""

    name = "perplexity_filter"
    observed_as = "ppl"

    @dataclasses.dataclass(frozen=True)
    class Config:
        models: dict[str, str]
        """Language -> KenLM model trained by ``dataforge lm train`` (card beside it)."""
        tokenizer: str | None = None
        """Tokenizer dir for all models; None: each model's card names its own."""
        segmentation: str | None = None
        """Require every model to be trained with this segmentation (``sentencepiece``,
        ``tokenizer`` or ``chars``); None: any. Records are always tokenized as each model's card says."""
        max_ppl: dict[str, float] = dataclasses.field(default_factory=dict)
        """Language -> drop records with a higher perplexity."""
        min_ppl: dict[str, float] = dataclasses.field(default_factory=dict)
        """Language -> drop records with a lower perplexity (boilerplate, repeats)."""
        keep_buckets: tuple[str, ...] = ()
        """Buckets to keep (``head``, ``middle``, ``tail``); empty: no bucket filtering."""
        bucket_cutoffs: dict[str, tuple[float, float]] = dataclasses.field(default_factory=dict)
        """Language -> (head_max, middle_max) perplexity cutoffs."""
        bucket_sample: dict[str, str] = dataclasses.field(default_factory=dict)
        """Language -> glob of documents whose perplexity percentiles give the cutoffs."""
        bucket_percentiles: tuple[float, float] = (30.0, 60.0)
        """Percentiles that end head and middle (CCNet: 30, 60)."""
        bucket_sample_size: int = 2000
        """Documents (smallest id hashes) scored to estimate cutoffs."""
        missing_model: Literal["keep", "drop", "error"] = "error"
        """What happens to a record whose language has no model."""

        def __post_init__(self) -> None:
            if not self.models:
                raise ValueError("models: give at least one language -> model path")
            if self.segmentation is not None and self.segmentation not in SEGMENTATIONS:
                raise ValueError(
                    f"segmentation {self.segmentation!r}; valid: {', '.join(SEGMENTATIONS)}"
                )
            for key in ("max_ppl", "min_ppl", "bucket_cutoffs", "bucket_sample"):
                extra = sorted(set(getattr(self, key)) - set(self.models))
                if extra:
                    raise ValueError(
                        f"{key}: languages {extra} have no model; models: {sorted(self.models)}"
                    )
            for lang, value in {**self.max_ppl, **self.min_ppl}.items():
                if not value > 0:
                    raise ValueError(f"max_ppl/min_ppl for {lang!r} must be > 0: {value}")
            for lang in set(self.max_ppl) & set(self.min_ppl):
                if self.min_ppl[lang] >= self.max_ppl[lang]:
                    raise ValueError(
                        f"min_ppl {self.min_ppl[lang]} >= max_ppl {self.max_ppl[lang]} for {lang!r}"
                    )
            bad = [b for b in self.keep_buckets if b not in BUCKETS]
            if bad:
                raise ValueError(f"keep_buckets: {bad} not valid; valid: {', '.join(BUCKETS)}")
            for lang, cut in self.bucket_cutoffs.items():
                if len(cut) != 2 or not 0 < cut[0] <= cut[1]:
                    raise ValueError(
                        f"bucket_cutoffs.{lang}: need [head_max, middle_max] with 0 < head_max <= middle_max: {cut}"
                    )
            both = sorted(set(self.bucket_cutoffs) & set(self.bucket_sample))
            if both:
                raise ValueError(
                    f"languages {both} have both bucket_cutoffs and bucket_sample; give one"
                )
            if self.keep_buckets:
                uncovered = sorted(
                    set(self.models) - set(self.bucket_cutoffs) - set(self.bucket_sample)
                )
                if uncovered:
                    raise ValueError(
                        f"keep_buckets needs bucket_cutoffs or bucket_sample for {uncovered}"
                    )
            p = self.bucket_percentiles
            if len(p) != 2 or not 0 < p[0] < p[1] < 100:
                raise ValueError(
                    f"bucket_percentiles: need [head, middle] with 0 < head < middle < 100: {p}"
                )
            if self.bucket_sample_size < 1:
                raise ValueError(f"bucket_sample_size must be >= 1: {self.bucket_sample_size}")
            if self.missing_model not in MISSING_MODEL_CHOICES:
                raise ValueError(
                    f"missing_model {self.missing_model!r}; valid: {', '.join(MISSING_MODEL_CHOICES)}"
                )

    # -- paths -------------------------------------------------------------------------
    def _resolve(self, path: str) -> Path:
        return self.context.local_path(path)

    def _model(self, model_str: str) -> Path:
        """The model file with its card beside it (a URI's copied to the node's cache)."""
        return self.context.local_path(model_str, companions=(".json",))

    def _tokenizer_dir(self, model_str: str, card: ModelCard) -> Path:
        if self.config.tokenizer is not None:
            return self._resolve(self.config.tokenizer)
        model = self.context.locate(model_str)
        if "://" in model:  # the card's tokenizer path is relative to the model's URI
            scheme, _, rest = model.partition("://")
            rest = posixpath.normpath(posixpath.join(posixpath.dirname(rest), card.tokenizer_path))
            return self._resolve(f"{scheme}://{rest}")
        return Path(model).parent / card.tokenizer_path

    # -- validate (no loading) -----------------------------------------------------------
    def validate(self) -> list[str]:
        problems = []
        for lang, model_str in sorted(self.config.models.items()):
            problems += self._validate_model(lang, model_str)
        record_langs = self.context.record_langs
        if self.config.missing_model == "error" and record_langs is not None:
            if "*" in record_langs:
                problems.append(
                    "perplexity_filter: an earlier lang_id keeps every language; set its keep "
                    "list or missing_model: keep|drop"
                )
            for lang in sorted(set(record_langs) - set(self.config.models) - {"*"}):
                problems.append(
                    f"perplexity_filter: lang_id keeps {lang!r}, which has no model "
                    f"(models: {sorted(self.config.models)}); add one or set missing_model: keep|drop"
                )
        elif self.config.missing_model == "error":
            for source, lang in self.context.sources.items():
                if lang not in self.config.models:
                    problems.append(
                        f"perplexity_filter: source {source!r} has lang {lang!r} with no model "
                        f"(models: {sorted(self.config.models)}); add one or set missing_model: keep|drop"
                    )
        for lang, pattern in sorted(self.config.bucket_sample.items()):
            if not glob.glob(str(self._resolve(pattern)), recursive=True):
                problems.append(
                    f"perplexity_filter: bucket_sample.{lang} {pattern!r} matches no file"
                )
        return problems

    def _validate_model(self, lang: str, model_str: str) -> list[str]:
        where = f"perplexity_filter: models.{lang} {model_str}"
        try:
            model = self._model(model_str)
            with open(model, "rb") as f:
                head = f.read(16)
        except OSError as exc:
            return [
                f"{where}: cannot read model ({exc.strerror or exc}); train it with `dataforge lm train`"
            ]
        if not head.startswith(_KENLM_MAGIC):
            return [f"{where}: not a KenLM binary or ARPA file"]
        try:
            card = read_card(model)
        except (FileNotFoundError, ValueError) as exc:
            return [f"{where}: {exc}"]
        problems = []
        if card.lang != lang:
            problems.append(f"{where}: card {card_path(model)} says lang {card.lang!r}")
        if card.normalization != NORMALIZATION:
            problems.append(
                f"{where}: trained with normalization {card.normalization!r}, code has {NORMALIZATION!r}"
            )
        problems += self._segmentation_problems(card, where)
        if card.segmentation == "chars":  # needs no tokenizer
            return problems
        tok_dir = self._tokenizer_dir(model_str, card)
        spm = tok_dir / "spm.model"
        if card.segmentation == "tokenizer" and not (tok_dir / "tokenizer.json").is_file():
            problems.append(f"{where}: tokenizer {tok_dir} has no tokenizer.json")
        if not spm.is_file():
            problems.append(f"{where}: tokenizer {tok_dir} has no spm.model")
        elif sha256_file(spm) != card.tokenizer_fingerprint:
            problems.append(
                f"{where}: tokenizer mismatch: {tok_dir} has fingerprint {sha256_file(spm)[:12]}..., "
                f"the model was trained with {card.tokenizer_fingerprint[:12]}... (retrain the model)"
            )
        return problems

    def _segmentation_problems(self, card: ModelCard, where: str) -> list[str]:
        if card.segmentation not in SEGMENTATIONS:
            return [
                f"{where}: trained with segmentation {card.segmentation!r}, which this code "
                f"cannot score (valid: {', '.join(SEGMENTATIONS)})"
            ]
        wanted = self.config.segmentation
        if wanted is not None and card.segmentation != wanted:
            return [
                f"{where}: segmentation mismatch: the model was trained with "
                f"{card.segmentation!r}, the config requires {wanted!r} (retrain it with "
                f"`dataforge lm train --segmentation {wanted}` or change segmentation)"
            ]
        return []

    # -- run -------------------------------------------------------------------------------
    def setup(self) -> None:
        from dataforge.lm import tokens as lm_tokens  # module attribute: tests substitute it
        from dataforge.lm.score import PerplexityScorer

        encoders: dict[tuple[Path, str], Any] = {}
        self.scorers: dict[str, PerplexityScorer] = {}
        for lang, model_str in sorted(self.config.models.items()):
            model = self._model(model_str)
            card = read_card(model)
            problems = self._segmentation_problems(card, f"models.{lang} {model}")
            if problems:
                raise ValueError(problems[0])
            key = (self._tokenizer_dir(model_str, card).resolve(), card.segmentation)
            if key not in encoders:
                encoders[key] = lm_tokens.load_encoder(*key)
            tokenizer, tok_dir = encoders[key], key[0]
            if tokenizer.fingerprint != card.tokenizer_fingerprint:
                raise ValueError(
                    f"models.{lang} {model}: tokenizer {tok_dir} is not the one the model was trained with"
                )
            self.scorers[lang] = PerplexityScorer(model, tokenizer)
        self.cutoffs: dict[str, tuple[float, float]] = dict(self.config.bucket_cutoffs)
        for lang, pattern in sorted(self.config.bucket_sample.items()):
            self.cutoffs[lang] = estimate_cutoffs(
                self.scorers[lang],
                str(self._resolve(pattern)),
                self.config.bucket_percentiles,
                self.config.bucket_sample_size,
            )

    def evaluate(self, live: pa.Table) -> tuple[list[str | None], list[dict[str, Any] | None]]:
        """Per record: the drop reason (or None) and the meta keys to set (or None)."""
        if not hasattr(self, "scorers"):
            self.setup()
        n = live.num_rows
        reasons: list[str | None] = [None] * n
        metas: list[dict[str, Any] | None] = [None] * n
        langs = np.asarray(live.column("lang").to_pylist(), dtype=object)
        texts = live.column("text").to_pylist()
        for lang in sorted(set(langs.tolist()), key=str):
            idx = np.flatnonzero(langs == lang)
            if lang not in self.scorers:
                for i in idx:
                    reasons[i] = _NO_MODEL_REASON[self.config.missing_model]
                continue
            ppl = self.scorers[lang].score_documents([texts[i] or "" for i in idx]).ppl
            lang_reasons, buckets = self._judge(lang, ppl)
            for j, i in enumerate(idx.tolist()):
                reasons[i] = lang_reasons[j]
                if not np.isnan(ppl[j]):
                    metas[i] = {"ppl": round(float(ppl[j]), 1)}
                    if buckets is not None:
                        metas[i]["ppl_bucket"] = buckets[j]
        return reasons, metas

    def _judge(self, lang: str, ppl: np.ndarray) -> tuple[list[str | None], np.ndarray | None]:
        drop = np.zeros(len(ppl), bool)
        if lang in self.config.max_ppl:
            drop |= ppl > self.config.max_ppl[lang]
        if lang in self.config.min_ppl:
            drop |= ppl < self.config.min_ppl[lang]
        buckets = None
        if lang in self.cutoffs:
            buckets = assign_buckets(ppl, *self.cutoffs[lang])
            if self.config.keep_buckets:
                drop |= ~np.isin(buckets, list(self.config.keep_buckets))
        empty = np.isnan(ppl)
        reasons = np.where(empty, "perplexity:empty", np.where(drop, "perplexity", "")).tolist()
        return [r or None for r in reasons], buckets

    def drop_reasons(self, live: pa.Table) -> list[str | None]:
        return self.evaluate(live)[0]

    def __call__(self, batch: pa.Table) -> pa.Table:
        live_idx = np.flatnonzero(live_mask(batch).to_numpy(zero_copy_only=False))
        if len(live_idx) == 0:
            return batch
        live = batch if len(live_idx) == batch.num_rows else batch.take(live_idx)
        live_reasons, live_metas = self.evaluate(live)
        reasons: list[str | None] = [None] * batch.num_rows
        updates: list[dict[str, Any] | None] = [None] * batch.num_rows
        for i, reason, meta in zip(live_idx.tolist(), live_reasons, live_metas, strict=True):
            reasons[i], updates[i] = reason, meta
        return set_drop_reasons(_merge_meta(batch, updates), reasons)


def _merge_meta(batch: pa.Table, updates: list[dict[str, Any] | None]) -> pa.Table:
    """Set the given keys in each row's ``meta`` JSON in one pass (rows with None untouched)."""
    old = batch.column("meta").to_pylist()
    new = []
    for text, update in zip(old, updates, strict=True):
        if update is None:
            new.append(text)
        elif not text or text == "{}":  # most records: nothing to merge with
            new.append(json.dumps(update, ensure_ascii=False, sort_keys=True))
        else:
            meta = json.loads(text)
            meta.update(update)
            new.append(json.dumps(meta, ensure_ascii=False, sort_keys=True))
    return batch.set_column(
        batch.schema.get_field_index("meta"), "meta", pa.array(new, pa.string())
    )
