"""``quality_classifier``: score every document with a trained fastText classifier.

The model is a directory written by ``dataforge classifier train`` (local or a URI, copied
once per node into the node cache). ``prepare`` scores each live document (the features
are made as at training: :class:`dataforge.classifier.features.FeatureMaker`) and sets
``meta.<name>_score`` (P(high quality)) and ``meta.<name>_labels`` (every label's
probability). Documents are then kept

* by ``min_score`` / ``max_score`` (a toxicity model keeps low scores), or
* by ``keep_top``: the highest-scoring share of each source, counted over the whole run by
  the planner :mod:`dataforge.ops.quality_classifier.planner` (ties broken by a keyed hash
  of the id), so the kept set does not depend on task order, split size or worker count.

Dropped documents get reason ``quality_classifier`` (``quality_classifier:<name>`` for a
stage with another ``name``); several stages with their own names apply several models.
The stage is a barrier whatever its settings (the runtime cuts segments by op class).

A model scores only records of the languages its card lists (``langs``: the languages of
its training documents). ``model: DIR`` serves those languages; ``models: {zh: DIR, en:
DIR}`` sends each record to the model of its ``lang``. A record of another language passes
unscored and is kept (the planner counts it per source and language in the stage summary's
``unscored``). ``dataforge validate`` refuses a model keyed to a language its card does not
list, and a source (or a language an earlier ``lang_id`` keeps) that no model serves,
unless ``allow_language_mismatch: true``.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from dataforge.classifier.model import POSITIVE
from dataforge.ops.barrier import BarrierContext
from dataforge.ops.base import BarrierOp
from dataforge.records import DROP, ORD

__all__ = ["DROP_REASON", "SCORE", "QualityClassifier"]

SCORE = "_qc_score"
TIE = "_qc_tie"
DROP_REASON = "quality_classifier"
_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789_")


class QualityClassifier(BarrierOp):
    """Score documents with a fastText classifier; keep by threshold or top share."""

    name: ClassVar[str] = "quality_classifier"

    @dataclasses.dataclass(frozen=True)
    class Config:
        model: str | None = None
        """Model directory from ``dataforge classifier train`` (path or ``s3://`` URI),
        used for the languages its card lists."""
        models: dict[str, str] = dataclasses.field(default_factory=dict)
        """Language -> model directory: each record goes to the model of its ``lang``
        (instead of ``model``)."""
        allow_language_mismatch: bool = False
        """Let ``validate`` pass a model keyed to a language its card does not list (it
        scores that language) and a source language no model serves (passes unscored)."""
        name: str = "quality"
        """Meta keys ``<name>_score``/``<name>_labels``; reason suffix when not ``quality``."""
        min_score: float | None = None
        """Drop documents scoring below it."""
        max_score: float | None = None
        """Drop documents scoring above it (a model whose positive class is unwanted)."""
        keep_top: float | None = None
        """Keep this share (0 < share <= 1) of each source's documents, the highest scores."""
        threads: int = 1
        """fastText prediction threads per actor (scores do not depend on it)."""

        def __post_init__(self) -> None:
            if (self.model is None) == (not self.models):
                raise ValueError("give model: DIR or models: {lang: DIR}, one of the two")
            if not self.name or set(self.name) - _NAME_CHARS:
                raise ValueError(f"name {self.name!r}: use lowercase letters, digits and _")
            for key in ("min_score", "max_score"):
                value = getattr(self, key)
                if value is not None and not 0 <= value <= 1:
                    raise ValueError(f"{key} must be in [0, 1], got {value}")
            if self.keep_top is not None:
                if not (math.isfinite(self.keep_top) and 0 < self.keep_top <= 1):
                    raise ValueError(f"keep_top must be in (0, 1], got {self.keep_top}")
                if self.min_score is not None or self.max_score is not None:
                    raise ValueError("give keep_top or min_score/max_score, not both")
            elif self.min_score is None and self.max_score is None:
                raise ValueError("give min_score, max_score or keep_top")
            if (
                self.min_score is not None
                and self.max_score is not None
                and self.min_score > self.max_score
            ):
                raise ValueError(f"min_score {self.min_score} > max_score {self.max_score}")
            if self.threads < 1:
                raise ValueError(f"threads must be >= 1, got {self.threads}")

    @property
    def drop_reason(self) -> str:
        name = self.config.name
        return DROP_REASON if name == "quality" else f"{DROP_REASON}:{name}"

    def _model_keys(self) -> dict[str, str]:
        """Config key (``model`` or ``models.<lang>``) -> model directory."""
        if self.config.model is not None:
            return {"model": self.config.model}
        return {f"models.{lang}": path for lang, path in sorted(self.config.models.items())}

    def _routes(self, scopes: dict[str, tuple[str, ...]]) -> dict[str, str]:
        """Record language -> config key of the model that scores it (``*``: any)."""
        if self.config.model is not None:
            return {lang: "model" for lang in scopes["model"] or ("*",)}
        return {key.removeprefix("models."): key for key in scopes}

    def validate(self) -> list[str]:
        from dataforge.classifier.model import check_model_dir, read_card

        problems, scopes = [], {}
        for key, path in self._model_keys().items():
            try:
                model_dir = self.context.local_path(path)
            except OSError as exc:
                problems.append(f"{key} {path}: {exc}")
                continue
            found = check_model_dir(model_dir)
            problems += [f"{key}: {p}" for p in found]
            if not found:
                scopes[key] = read_card(model_dir).scope
        if problems or self.config.allow_language_mismatch:
            return problems
        return language_mismatches(self, scopes)

    def setup(self) -> None:
        from dataforge.classifier.model import QualityModel, check_model_dir

        self.models: dict[str, QualityModel] = {}
        for key, path in self._model_keys().items():
            model_dir = self.context.local_path(path)
            problems = check_model_dir(model_dir)
            if problems:
                raise ValueError(f"{key}: {problems[0]}")
            self.models[key] = QualityModel(model_dir, threads=self.config.threads)
        self.routes = self._routes({k: m.card.scope for k, m in self.models.items()})

    def _score(
        self, texts: list[str | None], langs: list[str]
    ) -> tuple[np.ndarray, list[dict[str, float] | None]]:
        """P(high quality) and every label's probability per row, by the model of its
        language (NaN and None where no model serves it)."""
        scores = np.full(len(texts), np.nan)
        label_probs: list[dict[str, float] | None] = [None] * len(texts)
        default = self.routes.get("*")
        for key, model in self.models.items():
            rows = [i for i, lang in enumerate(langs) if self.routes.get(lang, default) == key]
            if not rows:
                continue
            probs = model.label_probabilities([texts[i] for i in rows])
            names = [label.removeprefix("__label__") for label in model.card.labels]
            scores[rows] = probs[:, model.card.labels.index(POSITIVE)]
            for i, row in zip(rows, probs.tolist(), strict=True):
                label_probs[i] = dict(zip(names, row, strict=True))
        return scores, label_probs

    def prepare(self, batch: pa.Table) -> pa.Table:
        """Score the rows: ``_qc_score`` (NaN: a language no model serves), ``_qc_tie``
        (the keyed id hash) and the meta keys of the scored rows."""
        if not hasattr(self, "models"):
            self.setup()
        scores, label_probs = self._score(
            batch.column("text").to_pylist(), batch.column("lang").to_pylist()
        )
        metas = []
        for raw, score, labels in zip(
            batch.column("meta").to_pylist(), scores, label_probs, strict=True
        ):
            if labels is None:
                metas.append(raw)
                continue
            meta = json.loads(raw) if raw else {}
            meta[f"{self.config.name}_score"] = float(score)
            meta[f"{self.config.name}_labels"] = labels
            metas.append(json.dumps(meta, ensure_ascii=False, sort_keys=True))
        key = self.context.seed & 0xFFFF_FFFF_FFFF_FFFF
        ties = np.fromiter(
            (xxhash.xxh64_intdigest(i, key) for i in batch.column("id").to_pylist()),
            np.uint64,
            batch.num_rows,
        )
        batch = batch.set_column(
            batch.schema.get_field_index("meta"), "meta", pa.array(metas, pa.string())
        )
        for name, values in ((SCORE, pa.array(scores, pa.float64())), (TIE, pa.array(ties))):
            if name in batch.column_names:  # an earlier quality_classifier stage's columns
                batch = batch.drop_columns([name])
            batch = batch.append_column(name, values)
        return batch

    def plan(self, ctx: BarrierContext) -> dict[str, Any]:
        """The global decision over all prepared parts (:mod:`dataforge.ops.quality_classifier.planner`)."""
        from dataforge.ops.quality_classifier.planner import (
            plan,  # deferred: it imports this module
        )

        return plan(self, ctx)

    def apply(self, batch: pa.Table, decision: pa.Table | None) -> pa.Table:
        """Drop by threshold, or the rows the planner's decision (``_ord``) lists."""
        live = pc.is_null(batch.column(DROP)).to_numpy(zero_copy_only=False)
        drop = np.zeros(batch.num_rows, bool)
        if self.config.keep_top is not None:
            if decision is not None and decision.num_rows:
                drop = pc.is_in(batch.column(ORD), value_set=decision.column(ORD)).to_numpy(
                    zero_copy_only=False
                )
        else:
            scores = pc.fill_null(batch.column(SCORE), np.nan).to_numpy(zero_copy_only=False)
            if self.config.min_score is not None:
                drop |= scores < self.config.min_score
            if self.config.max_score is not None:
                drop |= scores > self.config.max_score
        drop &= live
        reasons = pc.if_else(pa.array(drop), pa.scalar(self.drop_reason), batch.column(DROP))
        return batch.set_column(batch.schema.get_field_index(DROP), DROP, reasons)


def language_mismatches(op: QualityClassifier, scopes: dict[str, tuple[str, ...]]) -> list[str]:
    """``validate``'s language rule: every ``models.<lang>`` card lists ``<lang>``, and every
    language a record can reach the stage with (its source's, or those an earlier
    ``lang_id`` keeps) has a model. One line per problem."""
    problems = []
    hint = "or set allow_language_mismatch: true"
    for key, scope in scopes.items():
        lang = key.removeprefix("models.")
        if key != "model" and lang not in scope:
            problems.append(
                f"{key} {op.config.models[lang]} was trained on {list(scope) or 'unknown languages'}, "
                f"not {lang!r}: give a model of {lang!r} {hint}"
            )
    routes = op._routes(scopes)
    if "*" in routes:
        return problems + [
            f"model {op.config.model}: its card lists no languages (trained before cards "
            f"did): retrain it {hint}"
        ]
    served = sorted(routes)
    record_langs = op.context.record_langs
    if record_langs is not None:
        reaching = {f"lang_id keeps {lang!r}": lang for lang in record_langs}
    else:
        reaching = {
            f"source {src!r} has lang {lang!r}": lang for src, lang in op.context.sources.items()
        }
    for where, lang in reaching.items():
        if lang == "*" or lang not in routes:
            problems.append(
                f"{where}, which no model serves (models trained on {served}); its records "
                f"would pass unscored: add models: {{{lang}: DIR}} {hint}"
            )
    return problems
