"""Helpers shared by the tokenization tests: the real-text fixtures and a tiny spec."""

from __future__ import annotations

import json
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "tokenization"
FIXTURE_GLOB = str(FIXTURES / "*.jsonl")


def fixture_texts(name: str | None = None) -> list[str]:
    """Texts of one fixture file (``zh_news``, ``zh_reviews``, ``en_docs``) or of all."""
    files = [FIXTURES / f"{name}.jsonl"] if name else sorted(FIXTURES.glob("*.jsonl"))
    return [
        json.loads(line)["text"]
        for f in files
        for line in f.read_text(encoding="utf-8").splitlines()
    ]


def tiny_spec(**overrides):
    """A spec that trains in a few seconds on the fixtures (60 KB of text)."""
    from dataforge.tokenization import TokenizerSpec

    fields = dict(
        name="tiny",
        inputs=(FIXTURE_GLOB,),
        vocab_size=2000,
        character_coverage=0.995,
        num_threads=1,
    )
    fields.update(overrides)
    return TokenizerSpec(**fields)
