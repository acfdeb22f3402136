"""The reward stage: a scalar head learns a keyword preference; checkpoints and exports
carry it as ``score.weight``."""

from __future__ import annotations

import argparse
import json
import math

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from trainer.cli import add_arguments
from trainer.data.sources import ListBatchSource
from trainer.loop import train
from trainer.model.pretrained import load_exported
from trainer.model.transformer import Transformer
from trainer.objectives.reward import last_token_scores

KEYWORD = 7


def _pairs(seed: int, pairs: int = 8, vocab: int = 32) -> dict:
    """Random prompts; the chosen response holds the keyword token somewhere, the rejected
    one never does. Responses have different lengths, so rows carry padding."""
    from dataforge.loader import LoaderConfig
    from dataforge.loader.collate import collate

    rng = np.random.default_rng(seed)
    others = np.array([t for t in range(1, vocab) if t != KEYWORD])
    rows = []
    for _ in range(pairs):
        prompt = rng.choice(others, 5)
        chosen = rng.choice(others, rng.integers(3, 7))
        chosen[rng.integers(len(chosen))] = KEYWORD
        rejected = rng.choice(others, rng.integers(3, 7))
        rows.append(
            [{"prompt_tokens": prompt, "chosen_tokens": chosen, "rejected_tokens": rejected}]
        )
    config = LoaderConfig(streams=[{"path": "unused"}], mode="dpo", max_seq_len=16, max_tokens=64)
    return collate(rows, config)


def _config(tmp_path, make_config, interval: int = 20, **train_keys):
    return make_config(
        tmp_path,
        model={"vocab_size": 32},
        train={"max_steps": 40, **train_keys},
        optim={"lr": 3e-3, "min_lr": 3e-4, "warmup_steps": 2, "weight_decay": 0.0},
        eval={"interval": 20},
        checkpoint={"interval": interval},
    )


def _accuracy(model: Transformer, batches: list[dict]) -> float:
    correct = pairs = 0
    with torch.no_grad():
        for b in batches:
            rewards = []
            for side in ("chosen_", "rejected_"):
                scores = model(b[side + "input_ids"], b[side + "position_ids"], head="score")
                rewards.append(last_token_scores(scores, b[side + "attention_mask"]))
            correct += int((rewards[0] > rewards[1]).sum())
            pairs += len(rewards[0])
    return correct / pairs


def test_reward_model_learns_a_keyword_preference(tmp_path, make_config):
    config = _config(tmp_path, make_config)
    held_out = [_pairs(900 + i) for i in range(4)]  # 32 pairs never trained on
    result = train(
        config,
        "reward",
        source=ListBatchSource([_pairs(i) for i in range(8)]),
        eval_source=ListBatchSource(held_out),
    )
    assert result.losses[0] == pytest.approx(math.log(2), abs=1e-6)  # zero head: r = 0
    assert np.mean(result.losses[-5:]) < 0.5 * result.losses[0]
    records = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").open()]
    evals = [r for r in records if "val_loss" in r]
    assert [r["step"] for r in evals] == [20, 40] and evals[-1]["val_weight"] == 32
    print(f"reward held-out pairwise accuracy: {evals[-1]['val_accuracy']:.4f}")
    assert evals[-1]["val_accuracy"] > 0.9
    assert evals[-1]["val_chosen_reward"] - evals[-1]["val_rejected_reward"] == pytest.approx(
        evals[-1]["val_reward_margin"]
    )

    # the export holds the LM weights and the head; loaded back, it scores the same
    exported = load_file(result.export_dir / "model.safetensors")
    assert exported["score.weight"].shape == (1, 64)
    assert "model.embed_tokens.weight" in exported and "lm_head.weight" in exported
    card = json.loads((result.export_dir / "config.json").read_text())
    assert card["dataforge"]["stage"] == "reward"
    model_config, weights = load_exported(result.export_dir)
    model = Transformer(model_config)
    model.add_score_head()
    model.load_state_dict(weights)
    assert _accuracy(model.eval(), held_out) == evals[-1]["val_accuracy"]
    # the LM head took no step (frozen), the body did
    torch.manual_seed(config.train.seed)
    initial = Transformer(config.model).state_dict()
    assert torch.equal(weights["lm_head.weight"], initial["lm_head.weight"])
    assert not torch.equal(weights["embed.weight"], initial["embed.weight"])


def test_reward_kill_and_resume_gives_identical_losses(tmp_path, make_config):
    """The head is in the checkpoint: a resumed run continues with the same losses."""
    batches = [_pairs(i) for i in range(4)]  # checkpoint at step 3: mid-epoch
    config_a = _config(tmp_path / "a", make_config, max_steps=6)
    full = train(config_a, "reward", source=ListBatchSource(batches))
    config = _config(tmp_path / "b", make_config, interval=3, max_steps=6)
    first = train(config, "reward", source=ListBatchSource(batches), stop_after=4)  # "killed"
    assert first.steps == 4 and first.checkpoint.name == "step_00000003"
    resumed = train(config, "reward", source=ListBatchSource(batches))
    assert resumed.steps == 6 and len(resumed.losses) == 3
    np.testing.assert_allclose(resumed.losses, full.losses[3:], rtol=0, atol=1e-6)
    head_a = load_file(tmp_path / "a" / "ckpt" / "export" / "model.safetensors")["score.weight"]
    head_b = load_file(tmp_path / "b" / "ckpt" / "export" / "model.safetensors")["score.weight"]
    torch.testing.assert_close(head_a, head_b, atol=1e-6, rtol=0)
    assert head_a.abs().sum() > 0  # trained away from its zero start


def test_cli_has_a_reward_stage():
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["reward", "trainer/configs/reward_tiny.yaml"])
    assert (args.stage, args.config) == ("reward", "trainer/configs/reward_tiny.yaml")
