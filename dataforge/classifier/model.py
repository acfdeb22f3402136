"""A trained quality classifier on disk, and scoring documents with it.

A model directory holds ``model.bin`` (fastText, read by ``fasttext-new``, the maintained
Rust port of fastText's Python package, whose files the C++ package also reads),
``card.json`` (:class:`ClassifierCard`) and ``heldout.jsonl`` (the held-out documents'
ids, labels and scores, as training computed them).
"""

from __future__ import annotations

import dataclasses
import json
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dataforge.classifier.features import FEATURES, FeatureMaker

__all__ = [
    "CARD",
    "HELDOUT",
    "MODEL",
    "NEGATIVE",
    "POSITIVE",
    "ClassifierCard",
    "QualityModel",
    "check_model_dir",
    "fasttext_file_problem",
    "read_card",
]

MODEL = "model.bin"
CARD = "card.json"
HELDOUT = "heldout.jsonl"
POSITIVE = "__label__hq"
NEGATIVE = "__label__lq"
FASTTEXT_MAGIC = 793712314
"""The int32 a fastText model file starts with (``FASTTEXT_FILEFORMAT_MAGIC_INT32``)."""
FASTTEXT_VERSIONS = (11, 12)
"""Format versions fastText 0.9 reads (the int32 after the magic)."""


@dataclasses.dataclass(frozen=True)
class ClassifierCard:
    """What a model was trained on and how well it did on held-out documents."""

    lang: str
    features: str
    engine: str
    labels: tuple[str, ...]
    hyperparameters: dict[str, Any]
    inputs: dict[str, list[dict[str, Any]]]
    counts: dict[str, dict[str, int]]
    heldout: dict[str, float]
    langs: tuple[str, ...] = ()
    """Languages the model was trained on (each with at least ``LANG_MIN_SHARE`` of the
    documents): the records it may score. Empty on cards written before cards listed them."""
    lang_docs: dict[str, int] = dataclasses.field(default_factory=dict)
    """Training documents per language (:func:`dataforge.classifier.train.document_langs`)."""

    @property
    def scope(self) -> tuple[str, ...]:
        """The languages this model scores: ``langs``, or on an older card its ``lang``
        setting when that names one language; empty when unknown."""
        if self.langs:
            return self.langs
        return (self.lang,) if self.lang in ("zh", "en") else ()

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), ensure_ascii=False, indent=2, sort_keys=True)


def read_card(model_dir: Path) -> ClassifierCard:
    """The card of ``model_dir``.

    Raises:
        FileNotFoundError: no ``card.json``.
        ValueError: the card is not valid JSON or lacks a field.
    """
    path = Path(model_dir) / CARD
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        raw["labels"] = tuple(raw["labels"])
        raw["langs"] = tuple(raw.get("langs", ()))
        return ClassifierCard(**raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not JSON ({exc})") from exc
    except (KeyError, TypeError) as exc:
        raise ValueError(f"{path}: not a classifier card ({exc})") from exc


def fasttext_file_problem(path: Path) -> str | None:
    """Why ``path`` is not a fastText model, from its first 8 bytes (the magic number and
    the format version, little-endian int32s); None when they are right. Reads nothing more:
    a model can be gigabytes, and the loader checks the rest."""
    try:
        with open(path, "rb") as f:
            head = f.read(8)
    except OSError as exc:
        return f"{path}: unreadable ({exc.strerror or exc})"
    if len(head) < 8:
        return f"{path}: {len(head)} bytes, not a fastText model"
    magic, version = struct.unpack("<ii", head)
    if magic != FASTTEXT_MAGIC:
        return (
            f"{path}: not a fastText model (starts with {head[:4]!r}, not magic {FASTTEXT_MAGIC})"
        )
    if version not in FASTTEXT_VERSIONS:
        return f"{path}: fastText format version {version}; valid: {list(FASTTEXT_VERSIONS)}"
    return None


def check_model_dir(model_dir: Path) -> list[str]:
    """Problems that make ``model_dir`` unusable, without loading the model."""
    model_dir = Path(model_dir)
    if not (model_dir / MODEL).is_file():
        return [
            f"{model_dir}: no {MODEL}; train one with `dataforge classifier train --out {model_dir}`"
        ]
    if problem := fasttext_file_problem(model_dir / MODEL):
        return [problem]
    try:
        card = read_card(model_dir)
    except (FileNotFoundError, ValueError) as exc:
        return [f"{model_dir}: {exc}"]
    problems = []
    if card.features != FEATURES:
        problems.append(
            f"{model_dir}: trained with features {card.features!r}, code has {FEATURES!r} (retrain)"
        )
    if POSITIVE not in card.labels:
        problems.append(f"{model_dir}: labels {list(card.labels)} lack {POSITIVE!r}")
    return problems


class QualityModel:
    """A loaded classifier: ``scores(texts)`` is P(high quality) per document.

    Args:
        model_dir: a directory written by ``dataforge classifier train``.
        threads: fastText prediction threads (predictions do not depend on it).
    """

    def __init__(self, model_dir: Path, threads: int = 1) -> None:
        import fasttext_new

        self.card = read_card(model_dir)
        self.model = fasttext_new.load_model(str(Path(model_dir) / MODEL))
        self.features = FeatureMaker(self.card.lang, self.card.engine)
        self.threads = threads

    def label_probabilities(self, texts: Sequence[str | None]) -> np.ndarray:
        """Probabilities, shape ``(len(texts), len(card.labels))``, in ``card.labels`` order."""
        return self.probabilities_of_lines(self.features.lines(texts))

    def probabilities_of_lines(self, lines: list[str]) -> np.ndarray:
        """:meth:`label_probabilities` of lines already made by :class:`FeatureMaker`."""
        out = np.zeros((len(lines), len(self.card.labels)), dtype=np.float64)
        if not lines:
            return out
        # k=-1, threshold -1: every label's probability, none pruned
        labels, probs = self.model.predict_batch(lines, k=-1, threshold=-1.0, threads=self.threads)
        column = {label: j for j, label in enumerate(self.card.labels)}
        for i, (names, values) in enumerate(zip(labels, probs, strict=True)):
            for name, value in zip(names, values.tolist(), strict=True):
                out[i, column[name]] = value
        return out

    def scores(self, texts: Sequence[str | None]) -> np.ndarray:
        """P(high quality) of each text (float64 of fastText's float32)."""
        return self.label_probabilities(texts)[:, self.card.labels.index(POSITIVE)]
