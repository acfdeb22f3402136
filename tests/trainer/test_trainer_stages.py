"""The stage registry: the CLI's stages, their help and their objectives come from one table,
and a stage added from a test file alone runs through ``python -m trainer``'s path."""

from __future__ import annotations

import json
from typing import ClassVar

import pytest
import torch

from trainer.__main__ import main
from trainer.objectives import STAGES, CausalLM, Stage, build_objective
from trainer.objectives.losses import causal_lm_loss_sum


class CountingLM(CausalLM):
    """Causal LM that also sums the targets it saw: a statistic no built-in stage logs."""

    stat_names: ClassVar[tuple[str, ...]] = ("seen",)
    synthetic_data: ClassVar[bool] = True

    def loss(self, model, batch, training=True):
        logits = model(batch["input_ids"], batch.get("position_ids"))
        seen = (batch["labels"] != -100).sum().double().view(1)
        return causal_lm_loss_sum(logits, batch["labels"]), seen

    def metrics(self, loss_sum, stats, weight):
        return super().metrics(loss_sum, stats, weight) | {"seen_per_weight": stats[0] / weight}


def test_registry_lists_the_stages_and_which_loop_runs_each():
    assert list(STAGES) == ["pretrain", "sft", "dpo", "reward", "ppo"]
    assert {name: stage.loop for name, stage in STAGES.items()} == {
        "pretrain": "batch",
        "sft": "batch",
        "dpo": "batch",
        "reward": "batch",
        "ppo": "ppo",
    }
    assert STAGES["ppo"].objective is None


def test_a_stage_needs_an_objective_exactly_when_the_batch_loop_runs_it():
    with pytest.raises(ValueError, match="'batch' stage needs an objective"):
        Stage("no objective")
    with pytest.raises(ValueError, match="'ppo' stage takes no objective"):
        Stage("both", lambda config: CountingLM(), loop="ppo")
    with pytest.raises(ValueError, match="stage loop 'rl'; valid: batch, ppo"):
        Stage("unknown loop", loop="rl")


def test_build_objective_refuses_a_stage_without_objective(tmp_path, make_config):
    with pytest.raises(
        ValueError, match=r"stage 'ppo' is not valid; valid: pretrain, sft, dpo, rew"
    ):
        build_objective("ppo", make_config(tmp_path))


def test_a_stage_registered_from_a_test_runs_through_the_cli(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(STAGES, "counting", Stage("LM that counts targets", lambda c: CountingLM()))
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "LM that counts targets" in capsys.readouterr().out

    config = tmp_path / "counting.yaml"
    raw = {
        "model": {"preset": "tiny", "vocab_size": 64},
        "train": {"max_steps": 3, "precision": "fp32", "device": "cpu", "tensorboard": False},
        "optim": {"warmup_steps": 1},
        "checkpoint": {"dir": str(tmp_path / "ckpt")},
        "run_dir": str(tmp_path / "run"),
        "data": {"source": "synthetic", "batch_size": 2, "seq_len": 16},
    }
    config.write_text(json.dumps(raw), encoding="utf-8")  # JSON is YAML
    torch.manual_seed(0)
    assert main(["counting", str(config)]) == 0
    meta = json.loads((tmp_path / "ckpt" / "step_00000003" / "meta.json").read_text())
    assert meta["stage"] == "counting"
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    steps = [r for r in records if "seen_per_weight" in r]
    # synthetic rows have a target at every position: the counted targets equal the weight
    assert [r["seen_per_weight"] for r in steps] == [1.0, 1.0, 1.0]
