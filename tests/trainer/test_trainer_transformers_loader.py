"""docs/loader.md's transformers example runs, and its loss is the trainer's own loss."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch

from dataforge.loader import LoaderConfig, build_dataloader
from trainer.checkpoint.export import write_export
from trainer.config import config_from_mapping
from trainer.model.transformer import Transformer
from trainer.objectives import SFT

transformers = pytest.importorskip("transformers")
DOC = Path(__file__).resolve().parents[2] / "docs" / "loader.md"
VOCAB = 96


def _example_code() -> str:
    text = DOC.read_text(encoding="utf-8")
    match = re.search(r"<!-- transformers-example -->\n```python\n(.*?)```", text, re.S)
    assert match, "docs/loader.md lost its transformers example"
    return match.group(1)


def _write_sft_mds(out: Path, n: int = 64) -> None:
    from streaming import MDSWriter

    rng = np.random.default_rng(0)
    columns = {"id": "str", "text": "str", "source": "str", "lang": "str", "meta": "json"}
    columns |= {"tokens": "ndarray:uint16", "loss_mask": "ndarray:uint8", "num_tokens": "int"}
    with MDSWriter(out=str(out), columns=columns, size_limit=1 << 14) as writer:
        for i in range(n):
            length = int(rng.integers(8, 60))
            tokens = rng.integers(1, VOCAB, length).astype(np.uint16)
            mask = (np.arange(length) >= length // 3).astype(np.uint8)
            base = {"id": f"s{i}", "text": "", "source": "t", "lang": "en", "meta": {}}
            writer.write(base | {"tokens": tokens, "loss_mask": mask, "num_tokens": length})


def test_docs_example_loss_equals_trainer_loss(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the loader's per-run cache
    _write_sft_mds(tmp_path / "mds")
    raw = {
        "model": {"preset": "tiny", "vocab_size": VOCAB, "n_kv_heads": 2, "max_seq_len": 128},
        "train": {"max_steps": 1},
        "optim": {"warmup_steps": 0},
    }
    config = config_from_mapping(raw)
    torch.manual_seed(0)
    net = Transformer(config.model).eval()
    write_export(net.state_dict(), config, tmp_path / "model", {"stage": "sft", "step": 0})

    scope = {"MODEL_DIR": str(tmp_path / "model"), "MDS_DIR": str(tmp_path / "mds"), "STEPS": 3}
    exec(compile(_example_code(), str(DOC), "exec"), scope)
    assert len(scope["losses"]) == 3

    loader_fields = dict(
        streams=[{"path": str(tmp_path / "mds")}], mode="sft", max_tokens=1024, max_seq_len=128
    )
    with build_dataloader(LoaderConfig(**loader_fields, shift_labels=True)) as ours:
        batch = next(iter(ours))
    with build_dataloader(LoaderConfig(**loader_fields, shift_labels=False)) as theirs:
        unshifted = next(iter(theirs))
    torch.testing.assert_close(unshifted["input_ids"], batch["input_ids"])
    assert torch.equal(unshifted["labels"][:, 1:], batch["labels"][:, :-1])
    assert (unshifted["labels"][:, 0] == -100).all()

    objective = SFT()
    with torch.no_grad():
        loss_sum, _ = objective.loss(net, batch, training=False)
    trainer_loss = float(loss_sum) / objective.weight(batch)
    assert scope["losses"][0] == pytest.approx(trainer_loss, abs=1e-5)


def test_packed_unshifted_labels_never_cross_documents(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    _write_sft_mds(tmp_path / "mds")
    config = LoaderConfig(
        streams=[{"path": str(tmp_path / "mds")}],
        mode="sft",
        max_tokens=512,
        max_seq_len=128,
        packing=True,
        shift_labels=False,
    )
    from transformers.modeling_flash_attention_utils import prepare_fa_kwargs_from_position_ids

    with build_dataloader(config) as loader:
        for batch in loader:
            starts = batch["position_ids"] == 0
            assert (batch["labels"][starts] == -100).all()
            assert (batch["labels"][batch["attention_mask"] == 0] == -100).all()
            # Flattened to one row (docs/loader.md), transformers' flash-attention path finds
            # exactly the loader's documents (padding becomes one-token sequences).
            (cu, _), _ = prepare_fa_kwargs_from_position_ids(batch["position_ids"].view(1, -1))
            real = batch["attention_mask"].view(-1).bool()
            theirs = {s for s in cu[:-1].tolist() if real[s]}
            ours = {s for s in batch["cu_seqlens"][:-1].tolist() if real[s]}
            assert theirs == ours and len(ours) > len(batch["input_ids"])
