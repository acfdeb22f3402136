"""`dataforge lm train` argument handling and the token renderer's two tokenizer paths."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pytest
from lm_testkit import NEWS_ZH, REAL_LOAD_TOKENIZER, SpmTokenizer

from dataforge.lm import cli
from dataforge.lm import tokens as lm_tokens
from dataforge.lm.card import read_card
from dataforge.lm.tokens import TokenRenderer


def test_subcommand_registers_train() -> None:
    parser = argparse.ArgumentParser(prog="dataforge")
    cli.add_subcommand(parser.add_subparsers(dest="command"))
    args = parser.parse_args(
        [
            "lm",
            "train",
            "--input",
            "a/*.jsonl",
            "--lang",
            "zh",
            "--tokenizer",
            "t",
            "--out",
            "m.bin",
            "--prune",
            "0",
            "0",
            "1",
            "--holdout-percent",
            "5",
        ]
    )
    assert (args.order, args.prune, args.memory, args.holdout_percent) == (5, [0, 0, 1], "1G", 5.0)
    assert args.segmentation == "sentencepiece"
    with pytest.raises(SystemExit):
        parser.parse_args(["lm", "train", "--segmentation", "chars"])
    assert args.func is cli._train


def test_train_via_cli(
    tmp_path: Path, spm_dir: Path, kenlm_bin: Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "models" / "zh.bin"
    code = cli.main(
        [
            "train",
            "--input",
            str(NEWS_ZH),
            "--lang",
            "zh",
            "--tokenizer",
            str(spm_dir),
            "--order",
            "3",
            "--prune",
            "0",
            "1",
            "--memory",
            "64M",
            "--discount-fallback",
            "--kenlm-bin",
            str(kenlm_bin),
            "--out",
            str(out),
        ]
    )
    assert code == 0
    card = read_card(out)
    assert (card.order, card.prune, card.lang) == (3, (0, 1), "zh")
    assert card.tokenizer_fingerprint == SpmTokenizer(spm_dir).fingerprint
    assert f"wrote {out}" in capsys.readouterr().out


def test_cli_usage_errors_exit_2(
    tmp_path: Path, spm_dir: Path, capsys: pytest.CaptureFixture
) -> None:
    base = ["train", "--lang", "zh", "--tokenizer", str(spm_dir), "--out", str(tmp_path / "m.bin")]
    assert cli.main([*base, "--input", str(tmp_path / "nothing*.jsonl")]) == 2
    assert "matches no file" in capsys.readouterr().err
    assert cli.main([*base, "--input", str(NEWS_ZH), "--order", "9"]) == 2
    assert "order must be in 1..6" in capsys.readouterr().err
    no_tokenizer = ["train", "--lang", "zh", "--input", str(NEWS_ZH), "--out", str(tmp_path / "m")]
    assert cli.main(no_tokenizer) == 2
    assert "'sentencepiece' needs a tokenizer directory" in capsys.readouterr().err


class FlatSpmTokenizer(SpmTokenizer):
    """Adds the project tokenizer's ``encode_batch_flat`` fast path."""

    def encode_batch_flat(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        ids = self.sp.encode(texts)
        offsets = np.concatenate([[0], np.cumsum([len(x) for x in ids])]).astype(np.int64)
        return np.array([i for x in ids for i in x], np.int32), offsets


def test_renderer_spells_ids_the_same_on_both_paths(spm_dir: Path) -> None:
    lines = ["中华人民共和国", "hello world", "x"]
    plain, flat = SpmTokenizer(spm_dir), FlatSpmTokenizer(spm_dir)
    sentences, counts = TokenRenderer(plain).render(lines)
    assert sentences == [" ".join(map(str, ids)) for ids in plain.sp.encode(lines)]
    assert counts.tolist() == [len(ids) for ids in plain.sp.encode(lines)]
    assert TokenRenderer(flat).render(lines)[0] == sentences
    assert TokenRenderer(plain).render([]) == ([], pytest.approx(np.zeros(0)))


def test_project_tokenizer_drives_the_renderer() -> None:
    demo = Path(__file__).resolve().parents[2] / "tokenizers" / "demo"
    if not (demo / "spm.model").is_file():
        pytest.skip(f"{demo} not built: run `make demo-tokenizer`")
    tokenizer = REAL_LOAD_TOKENIZER(demo)  # the production loader, not the test stand-in
    assert isinstance(tokenizer, lm_tokens.PieceTokenizer)
    sentences, counts = TokenRenderer(tokenizer).render(["中华人民共和国成立了.", "hello"])
    assert [len(s.split()) for s in sentences] == counts.tolist()
    assert tokenizer.decode([int(x) for x in sentences[0].split()]) == "中华人民共和国成立了."
