"""The JSON model card written beside every KenLM model (``<model>.json``).

The card makes a model checkable without loading it: which normalization, which
tokenizer (by fingerprint) and which segmentation produced its training text, the n-gram order and pruning,
exactly which data it saw (sha256 of the tokenized training text), and tool versions.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["CARD_FORMAT", "ModelCard", "card_path", "read_card", "write_card"]

CARD_FORMAT = "dataforge-kenlm-card/1"


@dataclasses.dataclass(frozen=True)
class ModelCard:
    """What a KenLM model was trained on and how.

    Attributes:
        lang: language code the model is for.
        order: n-gram order.
        prune: lmplz ``--prune`` thresholds per order (empty: no pruning).
        normalization: normalization rules id (:data:`dataforge.text.normalize.NORMALIZATION`).
        tokenizer_path: tokenizer directory, relative to the model's ("" for ``chars``).
        tokenizer_fingerprint: sha256 of the tokenizer's ``spm.model`` ("" for ``chars``).
        token_rendering: how tokens are spelled in the model's vocabulary (``ids``, or
            ``chars`` for the ``chars`` segmentation).
        inputs: training input files.
        training_sha256: sha256 of the exact text fed to lmplz.
        documents: training documents (after the held-out split; empty ones excluded).
        lines: non-empty training lines.
        tokens: training tokens (without sentence boundaries).
        holdout_percent: share of documents held out by id hash (not trained on).
        holdout_documents: documents held out.
        model_sha256: sha256 of the binary model file.
        versions: tool versions (kenlm, dataforge, python).
        segmentation: how lines became tokens (:data:`dataforge.lm.tokens.SEGMENTATIONS`):
            ``sentencepiece`` (``spm.model`` alone), ``tokenizer`` (the project tokenizer,
            jieba + BPE) or ``chars``. Cards written before the field existed used
            ``tokenizer``.
        extra: free-form results (e.g. held-out perplexity quantiles).
    """

    lang: str
    order: int
    prune: tuple[int, ...]
    normalization: str
    tokenizer_path: str
    tokenizer_fingerprint: str
    token_rendering: str
    inputs: tuple[str, ...]
    training_sha256: str
    documents: int
    lines: int
    tokens: int
    holdout_percent: float
    holdout_documents: int
    model_sha256: str
    versions: dict[str, str]
    segmentation: str = "tokenizer"
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_json(self) -> str:
        plain = {"format": CARD_FORMAT, **dataclasses.asdict(self)}
        plain["prune"] = list(self.prune)
        plain["inputs"] = list(self.inputs)
        return json.dumps(plain, ensure_ascii=False, indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> ModelCard:
        """Parse a card.

        Raises:
            ValueError: not a card of this format, or missing/unknown fields.
        """
        raw = json.loads(text)
        if not isinstance(raw, dict) or raw.get("format") != CARD_FORMAT:
            found = raw.get("format") if isinstance(raw, dict) else type(raw).__name__
            raise ValueError(f"not a model card of format {CARD_FORMAT!r} (found {found!r})")
        raw.pop("format")
        names = {f.name for f in dataclasses.fields(cls)}
        required = {f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING}
        required -= {
            f.name for f in dataclasses.fields(cls) if f.default_factory is not dataclasses.MISSING
        }
        if set(raw) - names or required - set(raw):
            raise ValueError(
                f"model card fields: unknown {sorted(set(raw) - names)}, missing {sorted(required - set(raw))}"
            )
        raw["prune"] = tuple(raw["prune"])
        raw["inputs"] = tuple(raw["inputs"])
        return cls(**raw)


def card_path(model_path: str | Path) -> Path:
    """``models/zh.bin`` -> ``models/zh.bin.json``."""
    return Path(f"{model_path}.json")


def read_card(model_path: str | Path) -> ModelCard:
    """Read the card beside ``model_path``.

    Raises:
        FileNotFoundError: no card beside the model.
        ValueError: the card is malformed.
    """
    path = card_path(model_path)
    if not path.is_file():
        raise FileNotFoundError(
            f"model card {path} not found (models are trained by `dataforge lm train`)"
        )
    try:
        return ModelCard.from_json(path.read_text(encoding="utf-8"))
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{path}: {exc}") from exc


def write_card(model_path: str | Path, card: ModelCard) -> Path:
    """Write the card beside ``model_path`` atomically; returns its path."""
    path = card_path(model_path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.tmp-", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(card.to_json())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)  # ours: tmp made by mkstemp; the caller checked path
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)  # ours: made by mkstemp above
        raise
    return path
