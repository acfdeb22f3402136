"""Training: determinism, the tokenizer directory, format checks, sampling, segmenters, CLI."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from tokenization_testkit import FIXTURE_GLOB, FIXTURES, fixture_texts, tiny_spec

from dataforge.config import ConfigError
from dataforge.tokenization import FORMAT_VERSION, Tokenizer, load_spec, train_tokenizer
from dataforge.tokenization.corpus import sample_texts
from dataforge.tokenization.segment import MARKER, Segmenter


def test_training_twice_is_byte_identical(tiny_dir, tmp_path):
    # Another thread count too: BPE merges do not depend on it, and it is not recorded.
    again = train_tokenizer(tiny_spec(num_threads=2), tmp_path / "again")
    for name in ("spm.model", "spm.vocab", "tokenizer.json"):
        assert (tmp_path / "again" / name).read_bytes() == (tiny_dir / name).read_bytes(), name
    assert again.fingerprint == Tokenizer.load(tiny_dir).fingerprint


def test_tokenizer_json_describes_the_model(tiny_dir, tiny):
    meta = json.loads((tiny_dir / "tokenizer.json").read_text())
    assert meta["format_version"] == FORMAT_VERSION
    assert meta["vocab_size"] == tiny.vocab_size == 2000
    assert meta["segmenter"] == {
        "engine": "rjieba",
        "hmm": True,
        "user_dict": None,
        "boundaries": "between two CJK ideographs where the segmenter ends a word",
    }
    specials = meta["special_tokens"]
    assert [specials[t] for t in ("<pad>", "<bos>", "<eos>", "<unk>")] == [0, 1, 2, 3]
    assert (tiny.pad_id, tiny.bos_id, tiny.eos_id, tiny.unk_id) == (0, 1, 2, 3)
    assert [specials[t] for t in ("<|system|>", "<|user|>", "<|assistant|>", "<|end|>")] == [
        4,
        5,
        6,
        7,
    ]
    assert [specials[f"<|reserved_{i}|>"] for i in range(8)] == list(range(8, 16))
    assert tiny.special_tokens == specials and MARKER not in specials
    assert meta["boundary_id"] == 16
    data = meta["training_data"]
    assert data["records_used"] == data["records_seen"] == len(fixture_texts())
    assert data["sha256"] == sample_texts([FIXTURE_GLOB], 10**9).sha256
    assert set(meta["versions"]) == {"dataforge", "sentencepiece", "jieba", "rjieba"}
    assert meta["spm_model_sha256"] == tiny.fingerprint
    lines = (tiny_dir / "spm.vocab").read_text(encoding="utf-8").splitlines()
    assert len(lines) == 2000 and lines[5] == '"<|user|>"\t5'


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_load_refuses_incompatible_or_missing(tiny_dir, tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        Tokenizer.load(tmp_path / "nope")
    old = _copy(tiny_dir, tmp_path / "old")
    meta = json.loads((old / "tokenizer.json").read_text())
    meta["format_version"] = FORMAT_VERSION + 1
    (old / "tokenizer.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=f"format version {FORMAT_VERSION + 1} is not supported"):
        Tokenizer.load(old)
    no_model = _copy(tiny_dir, tmp_path / "no_model")
    (no_model / "spm.model").unlink()
    with pytest.raises(FileNotFoundError, match="has no spm.model"):
        Tokenizer.load(no_model)
    mixed = _copy(tiny_dir, tmp_path / "mixed")
    (mixed / "spm.model").write_bytes((tiny_dir / "spm.model").read_bytes() + b"\x00")
    with pytest.raises(ValueError, match="sha256 does not match"):
        Tokenizer.load(mixed)


def test_sample_is_deterministic_and_order_free():
    files = sorted(str(p) for p in FIXTURES.glob("*.jsonl"))
    full = sample_texts(files, 10**9)
    assert sample_texts(list(reversed(files)), 10**9) == full
    small = sample_texts(files, 20_000)
    assert sum(map(len, small.texts)) <= 20_000 and 0 < len(small.texts) < len(full.texts)
    assert set(small.texts) <= set(full.texts)
    assert sample_texts(files, 20_000) == small
    assert sample_texts(files, 20_000, seed=1).sha256 != small.sha256


def test_training_rejects_existing_out_and_empty_input(tiny_dir, tmp_path):
    with pytest.raises(FileExistsError):
        train_tokenizer(tiny_spec(), tiny_dir)
    with pytest.raises(FileNotFoundError, match="matches no file"):
        train_tokenizer(tiny_spec(inputs=(str(tmp_path / "*.jsonl"),)), tmp_path / "x")
    with pytest.raises(ValueError, match="vocab_size"):
        tiny_spec(vocab_size=10)
    with pytest.raises(ValueError, match="valid: jieba, rjieba"):
        tiny_spec(engine="pkuseg")


@pytest.mark.parametrize("engine", ["jieba", "rjieba"])
def test_segmenter_batch_independent_and_lossless(engine):
    seg = Segmenter(engine)
    texts = fixture_texts("zh_news")[:4] + fixture_texts("zh_reviews")[:20] + ["", "abc", "中"]
    marked = seg.mark_batch(texts)
    assert marked == [seg.mark_batch([t])[0] for t in texts]
    assert [m.replace(MARKER, "") for m in marked] == texts
    assert seg.mark_batch(["我们中出了一个叛徒"]) == [
        MARKER.join(["我们", "中出", "了", "一个", "叛徒"])
    ]
    assert seg.mark_batch(["hello world 中文abc中文"]) == ["hello world 中文abc中文"]


@pytest.mark.parametrize("engine", ["jieba", "rjieba"])
def test_user_dict_changes_segmentation(engine, tmp_path):
    user_dict = tmp_path / "user.txt"
    user_dict.write_text("出了一个 100 n\n", encoding="utf-8")
    marked = Segmenter(engine, user_dict=user_dict).mark_batch(["我们中出了一个叛徒"])
    assert MARKER + "出了一个" + MARKER in marked[0]
    # The global default segmenter is untouched.
    assert "出了一个" not in Segmenter(engine).mark_batch(["我们中出了一个叛徒"])[0].split(MARKER)


def test_user_dict_is_copied_into_the_tokenizer(tmp_path):
    user_dict = tmp_path / "user.txt"
    user_dict.write_text("江泽民主席 1000\n", encoding="utf-8")
    tok = train_tokenizer(tiny_spec(user_dict=str(user_dict)), tmp_path / "tok")
    assert (tmp_path / "tok" / "userdict.txt").read_text(encoding="utf-8") == "江泽民主席 1000\n"
    assert tok.meta["segmenter"]["user_dict"] == "userdict.txt"
    assert tok._segmenter.mark_batch(["江泽民主席讲话"])[0].startswith("江泽民主席" + MARKER)


def test_load_spec_resolves_relative_paths(tmp_path):
    spec_path = tmp_path / "tokenizers" / "demo.yaml"
    spec_path.parent.mkdir()
    spec_path.write_text("name: demo\ninputs: ['../data/*.jsonl']\nvocab_size: 1000\n")
    spec, out = load_spec(spec_path)
    assert spec.inputs == (str(spec_path.parent / "../data/*.jsonl"),)
    assert spec.vocab_size == 1000 and out == spec_path.parent / "demo"
    spec_path.write_text("name: demo\ninputs: ['x']\nvocab: 1000\n")
    with pytest.raises(ConfigError, match="unknown key"):
        load_spec(spec_path)
    spec_path.write_text("name: demo\ninputs: ['x']\nengine: thulac\n")
    with pytest.raises(ConfigError, match="valid: jieba, rjieba"):
        load_spec(spec_path)


def test_cli_train(tmp_path, capsys):
    from dataforge.cli import main

    out = tmp_path / "cli_tok"
    argv = [
        "tokenizer",
        "train",
        "--input",
        FIXTURE_GLOB,
        "--vocab-size",
        "2000",
        "--character-coverage",
        "0.995",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert (
        report["vocab_size"] == 2000
        and report["spm_model_sha256"] == Tokenizer.load(out).fingerprint
    )
    assert main(argv) == 2  # exists, no --overwrite
    assert main(["tokenizer", "train", "--input", FIXTURE_GLOB]) == 2  # no --out
    spec_path = tmp_path / "t.yaml"
    spec_path.write_text(
        f"name: t\ninputs: ['{FIXTURE_GLOB}']\nvocab_size: 2000\ncharacter_coverage: 0.995\n"
    )
    assert main(["tokenizer", "train", str(spec_path)]) == 0
    assert (tmp_path / "t" / "spm.model").read_bytes() == (out / "spm.model").read_bytes()
    spec_path.write_text("name: t\ninputs: ['x']\nvocab_size: -1\n")
    assert main(["tokenizer", "train", str(spec_path)]) == 2
    assert (
        main(
            [
                "tokenizer",
                "train",
                "--input",
                str(tmp_path / "none*.jsonl"),
                "--out",
                str(tmp_path / "o"),
            ]
        )
        == 1
    )


def test_train_from_a_run_output_dir(tmp_path):
    from streaming import MDSWriter

    texts = fixture_texts()
    with MDSWriter(out=str(tmp_path / "run" / "mds"), columns={"id": "str", "text": "str"}) as out:
        for i, text in enumerate(texts):
            out.write({"id": f"r{i}", "text": text})
    sample = sample_texts([str(tmp_path / "run")], 10**9)
    assert sorted(sample.texts) == sorted(texts) and sample.num_records == len(texts)
    tok = train_tokenizer(tiny_spec(inputs=(str(tmp_path / "run"),)), tmp_path / "tok")
    assert tok.decode(tok.encode(texts[0])) == texts[0]
