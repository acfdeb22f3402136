"""``dataforge validate`` reads a quality classifier's model.bin header: a file that is not
a fastText model is one line naming it, exit 2, before any run (a real model passes)."""

from __future__ import annotations

import json
import random
import shutil
import struct
from pathlib import Path

import pytest

from dataforge.classifier.model import (
    FASTTEXT_MAGIC,
    MODEL,
    QualityModel,
    fasttext_file_problem,
)
from dataforge.cli import main

from .conftest import train

PIPELINE = """
name: scored
inputs:
  - {{name: positive0, path: "{corpus}/pos.jsonl", lang: en}}
stages:
  - {{op: quality_classifier, model: "{model}", min_score: 0.5}}
output: {{path: out, format: jsonl}}
"""
HEADER = struct.pack("<ii", FASTTEXT_MAGIC, 12)
NOT_MODELS = {
    "text": b"this is not a model at all\n",
    "empty": b"",
    "short": HEADER[:6],
    "pickle": b"\x80\x04\x95\x10\x00\x00\x00\x00\x00\x00\x00",
    "big-endian magic": struct.pack(">ii", FASTTEXT_MAGIC, 12) + bytes(64),
    "future version": struct.pack("<ii", FASTTEXT_MAGIC, 13) + bytes(64),
}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> tuple[Path, Path]:
    """(corpus dir, model dir): a real model, trained in seconds on two made-up vocabularies
    (no demo corpus needed)."""
    root = tmp_path_factory.mktemp("tiny-qc")
    rng = random.Random(0)
    vocab = {
        "pos": "the committee published a detailed report on water quality in the basin",
        "neg": "click here buy now free casino win best price deal hurry",
    }
    for name, words in vocab.items():
        texts = [" ".join(rng.choice(words.split()) for _ in range(30)) for _ in range(60)]
        (root / f"{name}.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    assert train(str(root / "pos.jsonl"), str(root / "neg.jsonl"), root / "model", "en") == 0
    return root, root / "model"


def test_a_trained_model_has_the_header_that_is_checked(tiny) -> None:
    _, model = tiny
    assert (model / MODEL).read_bytes()[:8] == HEADER
    assert fasttext_file_problem(model / MODEL) is None


@pytest.mark.parametrize("case", sorted(NOT_MODELS))
def test_validate_refuses_a_model_bin_that_is_not_fasttext(
    tiny, tmp_path: Path, case: str, capsys
) -> None:
    corpus, real = tiny
    model = tmp_path / "model"
    shutil.copytree(real, model)  # a real card.json beside a garbage model.bin
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(PIPELINE.format(corpus=corpus, model=model))
    assert main(["validate", str(pipeline)]) == 0  # the copy is a model
    capsys.readouterr()
    (model / MODEL).write_bytes(NOT_MODELS[case])
    for command in ("validate", "run"):
        assert main([command, str(pipeline), "-o", str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1, err
        assert err[0].startswith(f"error: stages[0] (quality_classifier): model: {model / MODEL}: ")
    assert not (tmp_path / "out").exists()


def test_the_header_check_agrees_with_the_loader(tiny, tmp_path: Path) -> None:
    _, real = tiny
    model = tmp_path / "model"
    shutil.copytree(real, model)
    for case, data in NOT_MODELS.items():
        (model / MODEL).write_bytes(data)
        with pytest.raises(ValueError):
            QualityModel(model)
        assert fasttext_file_problem(model / MODEL) is not None, case
