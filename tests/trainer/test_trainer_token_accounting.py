"""The trainer says how many of the data's tokens an epoch trains on, and warns when
truncated or dropped samples lose more than 1% of them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from trainer.loop import train

LENGTHS = [30, 100, 64, 65, 200, 10, 50, 40, 64, 20, 33, 128]
MAX_SEQ_LEN = 64


def _write_mds(out: Path) -> int:
    """Pretrain shards with samples of LENGTHS tokens (ids below 257); returns their sum."""
    from streaming import MDSWriter

    columns = {"id": "str", "text": "str", "source": "str", "lang": "str", "meta": "json"}
    columns |= {"tokens": "ndarray:uint16", "num_tokens": "int"}
    rng = np.random.default_rng(0)
    with MDSWriter(out=str(out), columns=columns, size_limit=1 << 14) as writer:
        for i, n in enumerate(LENGTHS):
            tokens = rng.integers(1, 257, n).astype(np.uint16)
            writer.write(
                {"id": f"doc-{i}", "text": "", "source": "s", "lang": "en", "meta": {}}
                | {"tokens": tokens, "num_tokens": n}
            )
    return sum(LENGTHS)


@pytest.mark.parametrize("policy", ["truncate", "split"])
def test_trainer_logs_tokens_used_and_warns_when_truncation_loses_them(
    tmp_path, make_config, capsys, policy
):
    total = _write_mds(tmp_path / "mds")
    loader = {
        "streams": [{"path": str(tmp_path / "mds")}],
        "max_tokens": 4 * MAX_SEQ_LEN,
        "max_seq_len": MAX_SEQ_LEN,
        "packing": True,
        "cache_dir": str(tmp_path / "cache"),
    }
    if policy == "truncate":
        loader["long_samples"] = "truncate"  # split is the pretrain default
    config = make_config(
        tmp_path,
        model={"vocab_size": 257, "max_seq_len": MAX_SEQ_LEN},
        train={"max_steps": 2},
        optim={"warmup_steps": 1},
        data={"source": "loader", "loader": loader},
    )
    train(config, "pretrain")
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if "data" in line and "tokens" in line]
    long = sum(n > MAX_SEQ_LEN for n in LENGTHS)
    if policy == "truncate":
        used = sum(min(n, MAX_SEQ_LEN) for n in LENGTHS)
        lost = total - used
        assert lines[0] == (
            f"[trainer] data: epoch 0 trains on {used:,} of the data's {total:,} tokens "
            f"({used / total:.1%}); samples over max_seq_len 64 (data.loader.long_samples "
            f"truncate): {long} truncated, 0 dropped of {len(LENGTHS)}"
        )
        assert lines[1] == (
            f"[trainer] warning: {lost / total:.1%} of the data's tokens ({lost:,}) never reach "
            "the model (data.loader.long_samples truncate, max_seq_len 64); set long_samples: "
            "split to train on every token"
        )
    else:
        pieces = sum(-(-n // MAX_SEQ_LEN) for n in LENGTHS if n > MAX_SEQ_LEN)
        assert lines[0] == (
            f"[trainer] data: epoch 0 trains on {total:,} of the data's {total:,} tokens "
            f"(100.0%); samples over max_seq_len 64 (data.loader.long_samples split): "
            f"{long} split into {pieces} pieces of {len(LENGTHS)}"
        )
        assert "warning" not in out
        used = total
    seen = [line for line in out.splitlines() if "tokens seen, final loss" in line]
    tokens_seen = int(seen[0].split(" tokens seen")[0].rsplit(" ", 1)[1].replace(",", ""))
    assert lines[-1] == (
        f"[trainer] data: {tokens_seen:,} tokens seen = {tokens_seen / used:.3f} epochs of the "
        f"{used:,} tokens an epoch trains on (the data holds {total:,})"
    )
    assert len(lines) == (3 if policy == "truncate" else 2)
