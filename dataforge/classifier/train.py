"""Train a fastText quality classifier from positive and negative inputs.

Documents are read through the pipeline's own readers (:class:`dataforge.io.readers.
TaskReader`: formats, encodings and repairs as in ``dataforge run``), turned into lines by
:class:`~dataforge.classifier.features.FeatureMaker` (what the ``quality_classifier`` op
does), and split by a keyed hash of the document id: a document is held out iff
``xxh64(id, seed) / 2**64 < heldout``, so the split does not depend on file order. The
training lines are ordered by the same hash. fastText's training is deterministic for a
given seed with ``thread: 1``; with more threads its lock-free updates race (Hogwild), so
models differ from run to run.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from dataforge.classifier import LANGS
from dataforge.classifier.features import FEATURES, FeatureMaker
from dataforge.classifier.model import (
    CARD,
    HELDOUT,
    MODEL,
    NEGATIVE,
    POSITIVE,
    ClassifierCard,
    QualityModel,
)
from dataforge.io.files import match_files
from dataforge.io.input_config import InputConfig, ReadConfig
from dataforge.io.readers import InputTask, TaskReader
from dataforge.text.stats import han_latin_counts
from dataforge.typed_config import check_range, to_plain

__all__ = ["TrainConfig", "auc", "document_langs", "heldout_figures", "train_classifier"]

HAN_SHARE = 0.3
"""Han share of Han characters + Latin letters from which a document is Chinese: the
``lang_id`` op's ``cjk_share`` and the quality filter's ``min_cjk_fraction`` for zh."""
LANG_MIN_SHARE = 0.05
"""Share of the training documents a language needs to be in the model's scope: fewer are
strays of the inputs (an English page in a Chinese crawl), not what the model learned."""


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """``dataforge classifier train`` settings (the YAML form maps 1:1 onto it)."""

    positive: tuple[InputConfig, ...]
    """Inputs of high-quality documents (pipeline ``inputs:`` entries)."""
    negative: tuple[InputConfig, ...]
    """Inputs of low-quality documents."""
    out: str
    """Model directory to write (model.bin, card.json, heldout.jsonl)."""
    lang: str = "auto"
    """``zh``/``auto``: segment CJK text with jieba; ``en``: no segmentation."""
    engine: str = "rjieba"
    """The jieba engine (``rjieba`` or ``jieba``)."""
    heldout: float = 0.1
    """Share of documents (by id hash) kept out of training for the held-out figures."""
    seed: int = 0
    """Seed of fastText and of the held-out split."""
    threads: int = 1
    """fastText threads; only 1 is deterministic."""
    epoch: int = 20
    """Passes over the training lines; 20 fits labeled sets of thousands of documents (at
    5, 1,000 Chinese documents stay underfit), fewer suffice for millions."""
    lr: float = 0.1
    dim: int = 64
    word_ngrams: int = 2
    """Word n-grams as features (2: bigrams, as DCLM's classifier)."""
    min_count: int = 1
    bucket: int = 100_000
    """Hash buckets of the n-gram features (fastText's default 2M makes 0.5 GB models at dim 64; this, 26 MB)."""

    def __post_init__(self) -> None:
        if not self.positive or not self.negative:
            raise ValueError("give at least one positive and one negative input")
        if self.lang not in LANGS:
            raise ValueError(f"lang {self.lang!r}; valid: {', '.join(LANGS)}")
        if not 0 < self.heldout < 1:
            raise ValueError(f"heldout must be in (0, 1), got {self.heldout}")
        for key in ("threads", "epoch", "dim", "word_ngrams", "min_count", "bucket"):
            check_range(key, getattr(self, key), 1)
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")

    def hyperparameters(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "lr": self.lr,
            "dim": self.dim,
            "wordNgrams": self.word_ngrams,
            "minCount": self.min_count,
            "bucket": self.bucket,
            "loss": "softmax",
            "seed": self.seed,
            "thread": self.threads,
            "heldout": self.heldout,
        }


def input_documents(source: InputConfig, read: ReadConfig) -> Iterator[tuple[str, str]]:
    """(id, text) of the usable documents of one input, as a pipeline would read them."""
    for file in match_files(source.path):
        task = InputTask(
            task_id=file.relpath,
            source=source.name,
            path=file.path,
            relpath=file.relpath,
            bytes=file.bytes,
        )
        one_file = dataclasses.replace(source, path=file.path)
        for batch in TaskReader(task, one_file, read).batches():
            usable = batch.filter(pc.is_null(batch.column("drop")))
            yield from zip(
                usable.column("id").to_pylist(), usable.column("text").to_pylist(), strict=True
            )


def document_langs(texts: list[str], declared: str) -> list[str]:
    """The language of each document of an input that declares ``declared``: ``zh`` when
    Han characters make at least :data:`HAN_SHARE` of its Han + Latin letters, else the
    input's language (``und`` when the input says ``zh``)."""
    han, latin = han_latin_counts(pa.array(texts, pa.string()))
    share = np.divide(han, han + latin, out=np.zeros(len(texts)), where=(han + latin) > 0)
    other = "und" if declared == "zh" else declared
    return ["zh" if s >= HAN_SHARE else other for s in share.tolist()]


def _scope(langs: list[str]) -> tuple[tuple[str, ...], dict[str, int]]:
    """The languages in the model's scope and the documents per language."""
    counts = dict(sorted(Counter(langs).items()))
    scope = tuple(
        lang for lang, n in counts.items() if lang != "und" and n >= LANG_MIN_SHARE * len(langs)
    )
    return scope, counts


def is_heldout(ids: list[str], seed: int, share: float) -> np.ndarray:
    """Whether each id falls in the held-out share (keyed hash, order-free)."""
    key = seed & 0xFFFF_FFFF_FFFF_FFFF
    hashes = np.fromiter((xxhash.xxh64_intdigest(i, key) for i in ids), np.uint64, len(ids))
    return hashes < np.uint64(int(share * 2**64))


def auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """Area under the ROC curve (Mann-Whitney U with tied ranks averaged)."""
    labels = np.asarray(labels, bool)
    order = np.argsort(scores, kind="stable")
    ranks = np.empty(len(scores))
    sorted_scores = np.asarray(scores)[order]
    # average ranks over ties
    _, first, counts = np.unique(sorted_scores, return_index=True, return_counts=True)
    avg = first + (counts + 1) / 2.0
    ranks[order] = np.repeat(avg, counts)
    n_pos, n_neg = int(labels.sum()), int((~labels).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    return float((ranks[labels].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def heldout_figures(labels: np.ndarray, scores: np.ndarray, threshold: float = 0.5) -> dict:
    """Precision, recall (of the positive class at ``threshold``), accuracy and AUC."""
    labels = np.asarray(labels, bool)
    predicted = scores >= threshold
    tp = int((predicted & labels).sum())
    return {
        "docs": len(labels),
        "threshold": threshold,
        "precision": tp / int(predicted.sum()) if predicted.any() else 0.0,
        "recall": tp / int(labels.sum()) if labels.any() else 0.0,
        "accuracy": float((predicted == labels).mean()) if len(labels) else 0.0,
        "auc": auc(labels, scores),
    }


def _collect(config: TrainConfig, maker: FeatureMaker) -> dict[str, Any]:
    """ids, lines, labels of all usable documents, and per-class counts."""
    read = ReadConfig()
    ids: list[str] = []
    lines: list[str] = []
    labels: list[bool] = []
    langs: list[str] = []
    for positive, sources in ((True, config.positive), (False, config.negative)):
        for source in sources:
            chunk: list[tuple[str, str]] = list(input_documents(source, read))
            ids += [i for i, _ in chunk]
            lines += maker.lines([t for _, t in chunk])
            langs += document_langs([t or "" for _, t in chunk], source.lang)
            labels += [positive] * len(chunk)
    return {"ids": ids, "lines": lines, "labels": np.asarray(labels, bool), "langs": langs}


def train_classifier(config: TrainConfig) -> dict[str, Any]:
    """Train, evaluate on the held-out share, write the model directory; return the card's
    held-out figures. The files are made aside and moved in with the card last (an old
    card is removed first), so a directory with a card always holds a complete model.

    Raises:
        ValueError: a class has no document with text, or none left for training.
    """
    data = _collect(config, FeatureMaker(config.lang, config.engine))
    ids, lines, labels = data["ids"], data["lines"], data["labels"]
    nonempty = np.array([bool(line) for line in lines], bool)
    held = is_heldout(ids, config.seed, config.heldout) & nonempty
    train = ~held & nonempty
    for positive, name in ((True, "positive"), (False, "negative")):
        if not (train & (labels == positive)).any():
            raise ValueError(f"{name} inputs give no document with text for training")
    langs, lang_docs = _scope([g for g, ok in zip(data["langs"], nonempty, strict=True) if ok])
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out) as tmp:
        staged = Path(tmp)
        _train_model(staged, config, ids, lines, labels, train)
        card = ClassifierCard(
            lang=config.lang,
            features=FEATURES,
            engine=config.engine,
            labels=(NEGATIVE, POSITIVE),
            hyperparameters=config.hyperparameters(),
            inputs={
                "positive": [to_plain(s) for s in config.positive],
                "negative": [to_plain(s) for s in config.negative],
            },
            counts=_class_counts(labels, nonempty, train, held),
            heldout={},
            langs=langs,
            lang_docs=lang_docs,
        )
        (staged / CARD).write_text(card.to_json(), encoding="utf-8")
        # held-out scores through the op's own scoring path (loaded model, same features)
        held_idx = np.flatnonzero(held)
        scorer = QualityModel(staged, threads=config.threads)
        p = scorer.probabilities_of_lines([lines[i] for i in held_idx])[:, 1]
        figures = heldout_figures(labels[held_idx], p)
        with open(staged / HELDOUT, "w", encoding="utf-8") as f:
            for i, score in zip(held_idx.tolist(), p.tolist(), strict=True):
                record = {"id": ids[i], "label": int(labels[i]), "score": score}
                f.write(json.dumps(record, ensure_ascii=False) + "\n")
        card = dataclasses.replace(card, heldout=figures)
        (staged / CARD).write_text(card.to_json(), encoding="utf-8")
        (out / CARD).unlink(missing_ok=True)
        for name in (MODEL, HELDOUT, CARD):
            os.replace(staged / name, out / name)
    return figures


def _train_model(
    staged: Path,
    config: TrainConfig,
    ids: list[str],
    lines: list[str],
    labels: np.ndarray,
    train: np.ndarray,
) -> None:
    """Write the training lines in id-hash order and train ``staged/model.bin``."""
    import fasttext_new

    order = np.argsort(
        np.fromiter((xxhash.xxh64_intdigest(i, 1) for i in ids), np.uint64, len(ids)),
        kind="stable",
    )
    train_file = staged / "train.txt"
    with open(train_file, "w", encoding="utf-8") as f:
        for i in order[train[order]]:
            f.write(f"{POSITIVE if labels[i] else NEGATIVE} {lines[i]}\n")
    hp = {k: v for k, v in config.hyperparameters().items() if k != "heldout"}
    model = fasttext_new.train_supervised(input=str(train_file), **hp, verbose=0)
    model.save_model(str(staged / MODEL))
    train_file.unlink()


def _class_counts(
    labels: np.ndarray, nonempty: np.ndarray, train: np.ndarray, held: np.ndarray
) -> dict[str, dict[str, int]]:
    return {
        name: {
            "docs": int((labels == positive).sum()),
            "empty": int(((labels == positive) & ~nonempty).sum()),
            "train": int((train & (labels == positive)).sum()),
            "heldout": int((held & (labels == positive)).sum()),
        }
        for positive, name in ((True, "positive"), (False, "negative"))
    }
