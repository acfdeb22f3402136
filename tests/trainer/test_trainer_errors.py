"""Data and shape mistakes end before the first step: one line on stderr, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from trainer.__main__ import main


def _mds(out: Path, columns: dict[str, str], sample: dict, n: int = 8) -> Path:
    from streaming import MDSWriter

    with MDSWriter(out=str(out), columns=columns, size_limit=1 << 10) as writer:
        for _ in range(n):
            writer.write(sample)
    return out


def _config(tmp_path: Path, **extra: str) -> Path:
    lines = {
        "model": "{preset: tiny, vocab_size: 64}",
        "train": "{max_steps: 2, precision: fp32, device: cpu, tensorboard: false}",
        "optim": "{warmup_steps: 0}",
        "run_dir": str(tmp_path / "run"),
        "checkpoint": f"{{dir: {tmp_path / 'ck'}}}",
    } | extra
    path = tmp_path / "c.yaml"
    path.write_text("".join(f"{k}: {v}\n" for k, v in lines.items()))
    return path


@pytest.fixture
def pretrain_mds(tmp_path):
    tokens = np.arange(1, 40, dtype=np.uint16)
    columns = {"tokens": "ndarray:uint16", "num_tokens": "int"}
    return _mds(tmp_path / "mds", columns, {"tokens": tokens, "num_tokens": len(tokens)}, n=40)


def _fails(tmp_path, capsys, monkeypatch, stage: str = "pretrain", **extra: str) -> str:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    assert main([stage, str(_config(tmp_path, **extra))]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("error: "), err
    assert not (tmp_path / "run" / "metrics.jsonl").exists()  # no step ran
    return err


def _loader(path: Path, **fields) -> str:
    return json.dumps({"source": "loader", "loader": {"streams": [{"path": str(path)}], **fields}})


def test_missing_data_directory(tmp_path, capsys, monkeypatch):
    err = _fails(tmp_path, capsys, monkeypatch, data=_loader(tmp_path / "nowhere"))
    assert "data.loader" in err and "no index.json" in err


def test_missing_shard_file(tmp_path, capsys, monkeypatch, pretrain_mds):
    shards = sorted(pretrain_mds.glob("shard.*.mds"))
    assert len(shards) > 1
    shards[-1].unlink()
    err = _fails(tmp_path, capsys, monkeypatch, data=_loader(pretrain_mds, max_tokens=256))
    assert shards[-1].name in err


def test_shards_without_the_stage_columns(tmp_path, capsys, monkeypatch, pretrain_mds):
    err = _fails(tmp_path, capsys, monkeypatch, "sft", data=_loader(pretrain_mds, max_tokens=256))
    assert "loss_mask" in err


def test_tokenizer_larger_than_the_model(tmp_path, capsys, monkeypatch, pretrain_mds):
    tok = tmp_path / "tok"
    tok.mkdir()
    (tok / "spm.model").write_bytes(b"")
    (tok / "tokenizer.json").write_text(json.dumps({"format_version": 1, "vocab_size": 2000}))
    err = _fails(tmp_path, capsys, monkeypatch, tokenizer=str(tok), data=_loader(pretrain_mds))
    assert "has 2000 ids but the model only 64 embeddings" in err


def test_shards_tokenized_with_a_larger_vocabulary(tmp_path, capsys, monkeypatch, pretrain_mds):
    tok = tmp_path / "tok"
    tok.mkdir()
    (tok / "spm.model").write_bytes(b"")
    (tok / "tokenizer.json").write_text(json.dumps({"format_version": 1, "vocab_size": 2000}))
    pipeline = {"base_dir": str(tmp_path), "stages": [{"op": "tokenize", "tokenizer": "tok"}]}
    (pretrain_mds.parent / "manifest.json").write_text(json.dumps({"config": pipeline}))
    err = _fails(tmp_path, capsys, monkeypatch, data=_loader(pretrain_mds))
    assert f"tokenized with {tok} (2000 ids) but the model has 64 embeddings" in err


def test_sequence_length_beyond_the_model(tmp_path, capsys, monkeypatch, pretrain_mds):
    data = _loader(pretrain_mds, max_seq_len=512, max_tokens=1024)
    err = _fails(tmp_path, capsys, monkeypatch, data=data)
    assert "data.loader.max_seq_len 512 > model.max_seq_len 256" in err
