"""``quality_classifier``: score every document with a trained fastText classifier.

The model is a directory written by ``dataforge classifier train`` (local or a URI, copied
once per node into the node cache). ``prepare`` scores each live document (the features
are made as at training: :class:`dataforge.classifier.features.FeatureMaker`) and sets
``meta.<name>_score`` (P(high quality)) and ``meta.<name>_labels`` (every label's
probability). Documents are then kept

* by ``min_score`` / ``max_score`` (a toxicity model keeps low scores), or
* by ``keep_top``: the highest-scoring share of each source, counted over the whole run by
  the planner ``dataforge.runtime.barriers.quality_classifier`` (ties broken by a keyed hash
  of the id), so the kept set does not depend on task order, split size or worker count.

Dropped documents get reason ``quality_classifier`` (``quality_classifier:<name>`` for a
stage with another ``name``); several stages with their own names apply several models.
The stage is a barrier whatever its settings (the runtime cuts segments by op class).
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from dataforge.classifier.model import POSITIVE
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
    planner: ClassVar[str] = "dataforge.runtime.barriers.quality_classifier:plan"

    @dataclasses.dataclass(frozen=True)
    class Config:
        model: str
        """Model directory from ``dataforge classifier train`` (path or ``s3://`` URI)."""
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

    def validate(self) -> list[str]:
        from dataforge.classifier.model import check_model_dir

        try:
            model_dir = self.context.local_path(self.config.model)
        except OSError as exc:
            return [f"model {self.config.model}: {exc}"]
        return [f"model: {p}" for p in check_model_dir(model_dir)]

    def setup(self) -> None:
        from dataforge.classifier.model import QualityModel, check_model_dir

        model_dir = self.context.local_path(self.config.model)
        problems = check_model_dir(model_dir)
        if problems:
            raise ValueError(problems[0])
        self.model = QualityModel(model_dir, threads=self.config.threads)

    def prepare(self, batch: pa.Table) -> pa.Table:
        """Score the rows: ``_qc_score``, ``_qc_tie`` (the keyed id hash) and the meta keys."""
        if not hasattr(self, "model"):
            self.setup()
        probs = self.model.label_probabilities(batch.column("text").to_pylist())
        labels = [label.removeprefix("__label__") for label in self.model.card.labels]
        scores = probs[:, self.model.card.labels.index(POSITIVE)]
        metas = []
        for raw, row, score in zip(batch.column("meta").to_pylist(), probs, scores, strict=True):
            meta = json.loads(raw) if raw else {}
            meta[f"{self.config.name}_score"] = float(score)
            meta[f"{self.config.name}_labels"] = dict(zip(labels, row.tolist(), strict=True))
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
