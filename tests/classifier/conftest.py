"""Trained classifiers shared by the classifier tests (one training per language)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dataforge.cli import main as dataforge_main

from .corpus import write_corpus

SOURCES = {"en": ("docs_en", 358), "zh": ("news_zh", 1500)}


def train(pos: str, neg: str, out: Path, lang: str, *extra: str) -> int:
    args = ["train", "--positive", pos, "--negative", neg, "--out", str(out), "--lang", lang]
    return dataforge_main(["classifier", *args, *extra])


@pytest.fixture(scope="session")
def trained(tmp_path_factory, demo_reader):
    """``trained(lang) -> (corpus dir, model dir)``: a model per language, trained once."""
    done: dict[str, tuple[Path, Path]] = {}

    def get(lang: str) -> tuple[Path, Path]:
        if lang not in done:
            source, limit = SOURCES[lang]
            root = tmp_path_factory.mktemp(f"qc-{lang}")
            pos, neg = write_corpus(demo_reader(source, limit), lang, root / "corpus")
            assert train(pos, neg, root / "model", lang) == 0
            done[lang] = (root / "corpus", root / "model")
        return done[lang]

    return get
