"""Fixtures for the KenLM tests: a tiny sentencepiece tokenizer and small real-text models
(``lmplz`` from ``make kenlm`` is required for the models; tests skip without it)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # the test modules import lm_testkit too

from lm_testkit import DOCS_EN, HOLDOUT_PERCENT, KENLM_BIN, NEWS_ZH, SpmTokenizer, train_spm  # noqa: E402

from dataforge.lm import tokens as lm_tokens  # noqa: E402
from dataforge.lm.train import train_lm  # noqa: E402


@pytest.fixture(scope="session")
def spm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return train_spm(tmp_path_factory.mktemp("tok") / "demo_tok")


@pytest.fixture(scope="session")
def tokenizer(spm_dir: Path) -> SpmTokenizer:
    return SpmTokenizer(spm_dir)


@pytest.fixture(autouse=True)
def _spm_tokenizer_loader(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lm_tokens, "load_tokenizer", lambda path: SpmTokenizer(Path(path)))


@pytest.fixture(scope="session")
def kenlm_bin() -> Path:
    if not (KENLM_BIN / "lmplz").is_file() or not (KENLM_BIN / "build_binary").is_file():
        pytest.skip(
            f"{KENLM_BIN}/lmplz and build_binary are not built: run `make kenlm` (`make test` does)"
        )
    return KENLM_BIN


def _train(tmp: Path, fixture: Path, lang: str, tokenizer: SpmTokenizer, kenlm_bin: Path) -> Path:
    model = tmp / "models" / f"{lang}.bin"
    train_lm(
        str(fixture),
        model,
        lang=lang,
        tokenizer=tokenizer,
        order=4,
        memory="64M",
        holdout_percent=HOLDOUT_PERCENT,
        discount_fallback=True,
        kenlm_bin=kenlm_bin,
    )
    return model


@pytest.fixture(scope="session")
def lm_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("lm")


@pytest.fixture(scope="session")
def zh_model(lm_root: Path, tokenizer: SpmTokenizer, kenlm_bin: Path) -> Path:
    return _train(lm_root, NEWS_ZH, "zh", tokenizer, kenlm_bin)


@pytest.fixture(scope="session")
def en_model(lm_root: Path, tokenizer: SpmTokenizer, kenlm_bin: Path) -> Path:
    return _train(lm_root, DOCS_EN, "en", tokenizer, kenlm_bin)
