"""`dataforge validate` catches perplexity_filter problems before Ray starts."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from lm_testkit import DOCS_EN, NEWS_ZH, train_spm

from dataforge.cli import main


def pipeline(tmp_path: Path, stage: str) -> Path:
    shutil.copy(NEWS_ZH, tmp_path / "news.jsonl")
    shutil.copy(DOCS_EN, tmp_path / "docs.jsonl")
    path = tmp_path / "p.yaml"
    path.write_text(
        "name: lmcheck\n"
        "inputs:\n"
        "  - {name: news, path: news.jsonl, lang: zh, id_key: id}\n"
        "  - {name: docs, path: docs.jsonl, lang: en, id_key: id}\n"
        f"stages:\n  - {stage}\n"
        "output: {path: out, format: jsonl}\n",
        encoding="utf-8",
    )
    return path


def test_validate_passes_with_models_for_every_language(
    tmp_path: Path, zh_model: Path, en_model: Path, capsys: pytest.CaptureFixture
) -> None:
    stage = f"{{op: perplexity_filter, models: {{zh: {zh_model}, en: {en_model}}}, max_ppl: {{zh: 3000}}}}"
    assert main(["validate", str(pipeline(tmp_path, stage))]) == 0
    assert "ok: lmcheck" in capsys.readouterr().out


def test_validate_fails_on_missing_language_and_tokenizer_mismatch(
    tmp_path: Path, zh_model: Path, capsys: pytest.CaptureFixture
) -> None:
    stage = f"{{op: perplexity_filter, models: {{zh: {zh_model}}}}}"
    assert main(["validate", str(pipeline(tmp_path, stage))]) == 2
    assert "source 'docs' has lang 'en' with no model" in capsys.readouterr().err
    other = train_spm(tmp_path / "other_tok", vocab_size=3300)
    stage = (
        f"{{op: perplexity_filter, models: {{zh: {zh_model}}}, tokenizer: {other}, "
        "missing_model: keep}"
    )
    assert main(["validate", str(pipeline(tmp_path, stage))]) == 2
    assert "tokenizer mismatch" in capsys.readouterr().err
    stage = (
        f"{{op: perplexity_filter, models: {{zh: {tmp_path / 'gone.bin'}}}, missing_model: drop}}"
    )
    assert main(["validate", str(pipeline(tmp_path, stage))]) == 2
    assert "cannot read model" in capsys.readouterr().err
