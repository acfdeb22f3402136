"""CUDA paths: flash varlen attention and bf16 training (run on a GPU machine:
``pytest -m gpu tests/trainer``); skipped without CUDA."""

from __future__ import annotations

import json

import pytest
import torch

from trainer.config import ModelConfig
from trainer.data.sources import ListBatchSource
from trainer.loop import train
from trainer.model.transformer import Transformer
from trainer.telemetry.metrics import device_peak_flops

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def test_flash_varlen_matches_masked_attention(monkeypatch):
    import trainer.model.attention as model_module

    if model_module._varlen_kernel() is None:
        pytest.skip("this torch build has no torch.nn.attention.varlen")
    torch.manual_seed(0)
    config = ModelConfig(vocab_size=100, hidden_size=128, n_layers=2, n_heads=2, max_seq_len=64)
    net = Transformer(config).cuda().eval()
    ids = torch.randint(100, (2, 64), device="cuda")
    positions = torch.cat([torch.arange(40), torch.arange(24)]).expand(2, 64).cuda()
    cu = torch.tensor([0, 40, 64, 104, 128], dtype=torch.int32, device="cuda")
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        flash = net(ids, positions, cu)
        monkeypatch.setattr(model_module, "_use_varlen", lambda device, half: False)
        masked = net(ids, positions, cu)
    torch.testing.assert_close(flash.float(), masked.float(), atol=3e-2, rtol=3e-2)


def test_bf16_training_overfits_and_reports_mfu(tmp_path, make_config, make_batch):
    config = make_config(tmp_path, train={"max_steps": 60, "precision": "bf16", "device": "cuda"})
    result = train(config, "pretrain", source=ListBatchSource([make_batch(0)]))
    assert result.losses[-1] < 0.5
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    assert records[-1]["mem_allocated_gib"] > 0
    if device_peak_flops(torch.device("cuda"), "bf16", None) is not None:
        assert 0 < records[-1]["mfu"] < 1
