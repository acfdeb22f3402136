"""A tiny tokenizer trained once per session on the real-text fixtures (60 KB, ~5 s)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # the test modules import tokenization_testkit

from tokenization_testkit import tiny_spec  # noqa: E402


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from dataforge.tokenization import train_tokenizer

    out = tmp_path_factory.mktemp("tok") / "tiny"
    train_tokenizer(tiny_spec(), out)
    return out


@pytest.fixture(scope="session")
def tiny(tiny_dir: Path):
    from dataforge.tokenization import Tokenizer

    return Tokenizer.load(tiny_dir)
