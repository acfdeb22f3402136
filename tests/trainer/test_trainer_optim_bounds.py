"""Optimizer values at their boundaries: each runs a step or is a one-line error at load."""

from __future__ import annotations

import math

import pytest
import torch

from trainer.config import ConfigError, load_config
from trainer.data.sources import ListBatchSource
from trainer.loop import lr_factor, train
from trainer.model.pretrained import load_exported
from trainer.model.transformer import Transformer


def _initial_weights(config) -> dict[str, torch.Tensor]:
    torch.manual_seed(config.train.seed)  # as the loop builds its model
    return Transformer(config.model).state_dict()


def _moved(config, export_dir) -> list[str]:
    """Names of the tensors that differ (in any bit) from the starting weights."""
    _, after = load_exported(export_dir)
    before = _initial_weights(config)
    assert sorted(after) == sorted(before)
    return [k for k in before if not torch.equal(before[k], after[k])]


def test_lr_zero_step_leaves_every_weight_bit_identical(tmp_path, make_config, make_batch):
    optim = {"lr": 0.0, "min_lr": 0.0, "warmup_steps": 1, "weight_decay": 0.1}
    config = make_config(tmp_path / "zero", optim=optim, train={"max_steps": 2})
    result = train(config, "pretrain", source=ListBatchSource([make_batch(0)]))
    assert result.steps == 2 and result.skipped_steps == 0
    assert _moved(config, result.export_dir) == []
    assert lr_factor(config.optim, 2)(0) == 1.0  # the schedule of a zero lr: no division

    # the same step with a small lr moves every tensor: the comparison can fail
    optim |= {"lr": 1e-3, "min_lr": 1e-4}
    moving = make_config(tmp_path / "small", optim=optim, train={"max_steps": 2})
    moved = _moved(
        moving, train(moving, "pretrain", source=ListBatchSource([make_batch(0)])).export_dir
    )
    assert len(moved) == len(_initial_weights(moving))


@pytest.mark.parametrize(
    "optim",
    [
        {"min_lr": 3e-3},  # min_lr == lr: a constant schedule
        {"min_lr": 0.0},
        {"warmup_steps": 0},
        {"warmup_steps": 3},  # warmup == max_steps
        {"weight_decay": 0.0},
        {"betas": [0.0, 0.0]},
        {"eps": 1e-30},
        {"max_grad_norm": 0.0},  # 0: no clipping
        {"max_grad_norm": 1e-6},
    ],
    ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()),
)
def test_boundary_values_run_with_finite_losses(tmp_path, make_config, make_batch, optim):
    config = make_config(tmp_path, optim=optim, train={"max_steps": 3})
    result = train(config, "pretrain", source=ListBatchSource([make_batch(0)]))
    assert result.steps == 3 and result.skipped_steps == 0
    assert all(math.isfinite(x) for x in result.losses)
    assert result.losses[-1] < result.losses[0]  # every one of them still trains


def test_max_grad_norm_zero_does_not_clip(tmp_path, make_config, make_batch):
    """0 turns clipping off: the same update as an effectively infinite norm, unlike a tiny one."""
    losses = {}
    for norm in (0.0, 1e9, 1e-3):
        config = make_config(
            tmp_path / str(norm), optim={"max_grad_norm": norm}, train={"max_steps": 3}
        )
        losses[norm] = train(config, "pretrain", source=ListBatchSource([make_batch(0)])).losses
    assert losses[0.0] == losses[1e9]
    assert losses[1e-3][-1] != pytest.approx(losses[0.0][-1], abs=1e-3)


@pytest.mark.parametrize(
    ("optim", "message"),
    [
        ("{lr: -1.0e-4, min_lr: 0.0}", "optim.lr=-0.0001; valid range: >= 0.0"),
        ("{lr: .nan}", "optim.lr=nan; valid: a finite number"),
        ("{lr: .inf}", "optim.lr=inf; valid: a finite number"),
        ("{min_lr: -1.0e-5}", "need 0 <= min_lr <= lr, got min_lr=-1e-05 lr=0.0003"),
        ("{lr: 1.0e-4, min_lr: 2.0e-4}", "need 0 <= min_lr <= lr, got min_lr=0.0002 lr=0.0001"),
        ("{betas: [1.0, 0.95]}", "betas must be two numbers in [0, 1), got (1.0, 0.95)"),
        ("{betas: [0.9, -0.1]}", "betas must be two numbers in [0, 1), got (0.9, -0.1)"),
        ("{eps: 0.0}", "optim.eps=0.0; valid range: > 0"),
        ("{eps: -1.0e-8}", "optim.eps=-1e-08; valid range: > 0"),
        ("{weight_decay: -0.1}", "optim.weight_decay=-0.1; valid range: >= 0.0"),
        ("{warmup_steps: -1}", "optim.warmup_steps=-1; valid range: >= 0"),
        ("{max_grad_norm: -1.0}", "optim.max_grad_norm=-1.0; valid: >= 0 (0: off)"),
        ("{max_grad_norm: .nan}", "optim.max_grad_norm=nan; valid: >= 0 (0: off)"),
        ("{warmup_steps: 5}", "optim.warmup_steps 5 > train.max_steps 4"),
    ],
)
def test_out_of_range_values_are_one_line_errors_at_load(tmp_path, optim, message):
    path = tmp_path / "c.yaml"
    path.write_text(
        "model: {preset: tiny, vocab_size: 64}\n"
        "train: {max_steps: 4}\n"
        "data: {source: synthetic}\n"
        f"optim: {optim}\n"
    )
    with pytest.raises(ConfigError) as info:
        load_config(path)
    text = str(info.value)
    assert "\n" not in text and text.startswith(str(path)) and text.endswith(message), text
