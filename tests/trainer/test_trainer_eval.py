"""Held-out evaluation, epochs and start-up summary on tiny models (CPU, fp32)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from trainer.data.sources import ListBatchSource
from trainer.loop import train
from trainer.model.pretrained import load_exported
from trainer.model.transformer import Transformer
from trainer.objectives import causal_lm_loss_sum, count_targets


def _pref_pairs(seed: int, pairs: int, vocab: int = 32) -> dict:
    """DPO batches where chosen repeats the prompt's last token and rejected is random."""
    from dataforge.loader import LoaderConfig
    from dataforge.loader.collate import collate

    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(pairs):
        prompt = rng.integers(1, vocab, 6)
        chosen = np.full(4, prompt[-1])
        rejected = rng.integers(1, vocab, 4)
        rows.append(
            [{"prompt_tokens": prompt, "chosen_tokens": chosen, "rejected_tokens": rejected}]
        )
    config = LoaderConfig(streams=[{"path": "unused"}], mode="dpo", max_seq_len=16, max_tokens=64)
    return collate(rows, config)


def _records(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").open()]


def test_eval_logs_val_loss_at_interval_and_keeps_best(tmp_path, make_config, make_batch):
    held_out = [make_batch(100, pad=3), make_batch(101)]
    config = make_config(
        tmp_path,
        train={"max_steps": 10, "label_smoothing": 0.1},
        eval={"interval": 4, "keep_best": True},
    )
    train(
        config,
        "pretrain",
        source=ListBatchSource([make_batch(0)]),
        eval_source=ListBatchSource(held_out),
    )
    evals = [r for r in _records(tmp_path / "run") if "val_loss" in r]
    assert [r["step"] for r in evals] == [4, 8, 10]  # every 4 steps and after the last
    assert all(r["val_perplexity"] == pytest.approx(math.exp(r["val_loss"])) for r in evals)

    # The last evaluation is the exported model's plain cross-entropy (no label smoothing)
    # over all held-out targets.
    model_config, weights = load_exported(tmp_path / "ckpt" / "export")
    net = Transformer(model_config).eval()
    net.load_state_dict(weights)
    with torch.no_grad():
        total = sum(float(causal_lm_loss_sum(net(b["input_ids"]), b["labels"])) for b in held_out)
    targets = sum(int(count_targets(b["labels"])) for b in held_out)
    assert evals[-1]["val_loss"] == pytest.approx(total / targets, abs=1e-5)
    assert evals[-1]["val_weight"] == targets

    best = json.loads((tmp_path / "ckpt" / "best" / "config.json").read_text())["dataforge"]
    assert best["val_loss"] == min(r["val_loss"] for r in evals)
    assert best["step"] == min(evals, key=lambda r: r["val_loss"])["step"]


def test_dpo_eval_reports_reward_accuracy_on_held_out_pairs(tmp_path, make_config):
    config = make_config(
        tmp_path,
        model={"vocab_size": 32},
        train={"max_steps": 30},
        optim={"lr": 2e-3, "min_lr": 2e-4, "warmup_steps": 2, "weight_decay": 0.0},
        eval={"interval": 10, "max_batches": 2},
    )
    held_out = ListBatchSource([_pref_pairs(90 + i, 8) for i in range(3)])
    train(
        config,
        "dpo",
        source=ListBatchSource([_pref_pairs(i, 8) for i in range(8)]),
        eval_source=held_out,
    )
    evals = [r for r in _records(tmp_path / "run") if "val_loss" in r]
    assert [r["step"] for r in evals] == [10, 20, 30]
    assert all(r["val_weight"] == 16 for r in evals)  # max_batches 2 x 8 pairs
    assert evals[-1]["val_preference_accuracy"] >= 0.8
    assert evals[-1]["val_reward_margin"] > 0
    assert evals[-1]["val_chosen_reward"] - evals[-1]["val_rejected_reward"] == pytest.approx(
        evals[-1]["val_reward_margin"]
    )


def test_epochs_set_the_number_of_steps(tmp_path, make_config, make_batch, capsys):
    batches = [make_batch(i) for i in range(3)]
    config = make_config(tmp_path, train={"max_steps": None, "epochs": 2.5, "grad_accum_steps": 2})
    result = train(config, "pretrain", source=ListBatchSource(batches))
    assert result.steps == math.ceil(2.5 * 3 / 2)  # 4
    out = capsys.readouterr().out
    assert "train.epochs 2.5: 4 steps" in out
    # start-up summary: parameters and tokens per step (4 rows x 32 x 2 micro-batches)
    model = Transformer(config.model)
    assert f"{model.num_params() / 1e6:,.1f}M parameters" in out
    assert "up to 256 tokens per step" in out


def test_a_new_objective_is_one_class_and_one_registry_entry(
    tmp_path, make_config, make_batch, monkeypatch
):
    """An objective the loop has never heard of: causal LM that also logs top-1 accuracy."""
    from trainer.objectives import STAGES, CausalLM, Stage

    class CausalLMWithAccuracy(CausalLM):
        stat_names = ("correct",)

        def loss(self, model, batch, training=True):
            logits = model(batch["input_ids"], batch.get("position_ids"))
            loss = causal_lm_loss_sum(logits, batch["labels"])
            hits = (logits.argmax(-1) == batch["labels"]) & (batch["labels"] != -100)
            return loss, hits.sum().double().view(1)

        def metrics(self, loss_sum, stats, weight):
            return super().metrics(loss_sum, stats, weight) | {"accuracy": stats[0] / weight}

    monkeypatch.setitem(
        STAGES, "lm_accuracy", Stage("LM with accuracy", lambda c: CausalLMWithAccuracy())
    )
    config = make_config(tmp_path, train={"max_steps": 30})
    train(config, "lm_accuracy", source=ListBatchSource([make_batch(0)]))
    records = _records(tmp_path / "run")
    assert records[0]["accuracy"] < 0.2 and records[-1]["accuracy"] > 0.9  # memorised
    meta = json.loads((tmp_path / "ckpt" / "step_00000030" / "meta.json").read_text())
    assert meta["stage"] == "lm_accuracy"
