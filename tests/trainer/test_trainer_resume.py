"""Resuming with a config that no longer fits the checkpoint: one line, exit 2, the key."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from trainer.__main__ import main


def _mds(out: Path, n: int = 40) -> Path:
    from streaming import MDSWriter

    tokens = np.arange(1, 40, dtype=np.uint16)
    columns = {"tokens": "ndarray:uint16", "num_tokens": "int"}
    with MDSWriter(out=str(out), columns=columns, size_limit=1 << 10) as writer:
        for _ in range(n):
            writer.write({"tokens": tokens, "num_tokens": len(tokens)})
    return out


def _config(tmp_path: Path, max_tokens: int = 256, max_steps: int = 3, hidden: int = 64) -> Path:
    loader = {"streams": [{"path": str(tmp_path / "mds")}], "max_tokens": max_tokens}
    loader["max_seq_len"] = 64
    lines = {
        "model": json.dumps({"preset": "tiny", "vocab_size": 64, "hidden_size": hidden}),
        "train": f"{{max_steps: {max_steps}, precision: fp32, device: cpu, tensorboard: false}}",
        "optim": "{warmup_steps: 0}",
        "data": json.dumps({"source": "loader", "loader": loader}),
        "run_dir": str(tmp_path / "run"),
        "checkpoint": f"{{dir: {tmp_path / 'ck'}, interval: 1}}",
    }
    path = tmp_path / "c.yaml"
    path.write_text("".join(f"{k}: {v}\n" for k, v in lines.items()))
    return path


def _error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("error: "), err
    return err


def test_changed_settings_are_named_and_the_way_on_suggested(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    _mds(tmp_path / "mds")
    assert main(["pretrain", str(_config(tmp_path))]) == 0
    ckpt = tmp_path / "ck" / "step_00000003"
    capsys.readouterr()

    assert main(["pretrain", str(_config(tmp_path, max_tokens=128))]) == 2
    assert _error(capsys) == (
        f"error: {ckpt}: cannot resume, the data loader no longer fits this checkpoint "
        "(changed since it was saved: data.loader.max_tokens: 256 -> 128); restore the old "
        "values, or start anew with --from-scratch"
    )
    assert main(["pretrain", str(_config(tmp_path, hidden=32))]) == 2
    err = _error(capsys)
    assert "the model no longer fits" in err and "model.hidden_size: 64 -> 32" in err
    assert main(["pretrain", str(_config(tmp_path, max_steps=5))]) == 2
    assert _error(capsys) == (
        f"error: {ckpt}: train.max_steps is 5 but the run was saved with 3, and its "
        "learning-rate schedule (warmup, cosine to optim.min_lr) spans 3 steps; keep "
        "max_steps 3, or start a new run with --from-scratch (init_from an export to "
        "continue from its weights)"
    )
    # what the message suggests works
    assert main(["pretrain", str(_config(tmp_path, max_tokens=128)), "--from-scratch"]) == 0
    assert main(["pretrain", str(_config(tmp_path, max_tokens=128))]) == 0  # done: re-exports
