"""Model cards: JSON round-trip and strict parsing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dataforge.lm.card import CARD_FORMAT, ModelCard, card_path, read_card, write_card


def make_card(**changes) -> ModelCard:
    fields = dict(
        lang="zh",
        order=5,
        prune=(0, 0, 1),
        normalization="ccnet-v1",
        tokenizer_path="../tokenizers/demo",
        tokenizer_fingerprint="ab" * 32,
        token_rendering="ids",
        inputs=("data/demo/news_zh/part-0000.jsonl.zst",),
        training_sha256="cd" * 32,
        documents=2850,
        lines=41000,
        tokens=1_700_000,
        holdout_percent=10.0,
        holdout_documents=317,
        model_sha256="ef" * 32,
        versions={"kenlm": "0.3.0", "python": "3.11.9"},
        segmentation="sentencepiece",
        extra={"heldout_ppl": {"documents": 317, "p50": 120.5}},
    )
    fields.update(changes)
    return ModelCard(**fields)


def test_round_trip_through_file(tmp_path: Path) -> None:
    card = make_card()
    model = tmp_path / "zh.bin"
    written = write_card(model, card)
    assert written == card_path(model) == tmp_path / "zh.bin.json"
    assert read_card(model) == card
    assert json.loads(written.read_text())["format"] == CARD_FORMAT
    assert not list(tmp_path.glob("*.tmp"))


def test_round_trip_is_stable_text() -> None:
    card = make_card(extra={})
    assert ModelCard.from_json(card.to_json()).to_json() == card.to_json()


def test_rejects_other_formats_and_fields(tmp_path: Path) -> None:
    plain = json.loads(make_card().to_json())
    with pytest.raises(ValueError, match="format"):
        ModelCard.from_json(json.dumps({**plain, "format": "something/2"}))
    with pytest.raises(ValueError, match=r"unknown \['surprise'\]"):
        ModelCard.from_json(json.dumps({**plain, "surprise": 1}))
    del plain["order"]
    with pytest.raises(ValueError, match=r"missing \['order'\]"):
        ModelCard.from_json(json.dumps(plain))


def test_read_card_missing(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="dataforge lm train"):
        read_card(tmp_path / "none.bin")


def test_cards_without_segmentation_were_trained_with_the_tokenizer() -> None:
    plain = json.loads(make_card().to_json())
    assert plain["segmentation"] == "sentencepiece"
    del plain["segmentation"]  # cards written before the field existed
    assert ModelCard.from_json(json.dumps(plain)).segmentation == "tokenizer"
