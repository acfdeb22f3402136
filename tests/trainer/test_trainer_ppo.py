"""The ppo stage: its formulas on hand-computed tensors, sampling and padding, a tiny run
whose reward rises under a keyword reward model, resume, and config errors."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from trainer.__main__ import main
from trainer.checkpoint.export import write_export
from trainer.data.sources import ListBatchSource
from trainer.loop import train
from trainer.model.transformer import Transformer
from trainer.ppo import train_ppo
from trainer.ppo.losses import (
    AdaptiveKLController,
    gae,
    masked_mean,
    masked_var,
    masked_whiten,
    policy_loss,
    token_rewards,
    value_loss,
)
from trainer.ppo.prompts import JsonlPrompts, prompts_of_batch
from trainer.ppo.rollout import generate, sequence_layout

KEYWORD, STOP, VOCAB = 7, 2, 32


def test_gae_matches_a_hand_computed_example():
    values = torch.tensor([[1.0, 2.0, 3.0], [1.0, 2.0, 5.0]])
    rewards = torch.tensor([[0.0, 0.0, 1.0], [0.0, 1.0, 9.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])  # row 2 ends after 2 tokens
    advantages, returns = gae(values, rewards, mask, gamma=0.9, lam=0.5)
    # row 1: deltas -2, 0.7, 0.8 -> A2 = -2, A1 = 0.7 + 0.45 * -2, A0 = 0.8 + 0.45 * -0.2
    # row 2: its third column is padding (V = r = 0): deltas -1, 0.8 -> A1 = -1, A0 = 0.35
    expected = torch.tensor([[0.71, -0.2, -2.0], [0.35, -1.0, 0.0]])
    torch.testing.assert_close(advantages, expected)
    torch.testing.assert_close(returns, expected + values * mask)
    # gamma = lam = 1: the advantage is the reward still to come minus the value
    advantages, returns = gae(values, rewards, mask, gamma=1.0, lam=1.0)
    to_come = (rewards * mask).flip(1).cumsum(1).flip(1)
    torch.testing.assert_close(advantages, (to_come - values) * mask)
    torch.testing.assert_close(returns, to_come * mask)


def test_whitening_gives_mean_0_variance_1_over_the_mask():
    gen = torch.Generator().manual_seed(0)
    values = torch.randn(4, 9, generator=gen) * 3 + 5
    mask = (torch.rand(4, 9, generator=gen) > 0.3).float()
    white = masked_whiten(values, mask)
    assert float(masked_mean(white, mask)) == pytest.approx(0.0, abs=1e-6)
    assert float(masked_var(white, mask)) == pytest.approx(1.0, abs=1e-5)
    assert torch.all(white[mask == 0] == 0)
    kept = masked_whiten(values, mask, shift_mean=False)
    assert float(masked_mean(kept, mask)) == pytest.approx(float(masked_mean(values, mask)))
    # an affine change of the input does not change the whitened values
    torch.testing.assert_close(masked_whiten(values * 7 - 3, mask), white, atol=1e-5, rtol=0)
    # masked-out entries have no say
    torch.testing.assert_close(masked_whiten(values + 100 * (1 - mask), mask), white)


def test_clipped_policy_loss_exact_values_and_gradients():
    ratios = torch.tensor([[1.5, 0.5, 0.5, 1.5, 3.0]])
    old = torch.zeros_like(ratios)
    logprobs = ratios.log().requires_grad_(True)
    advantages = torch.tensor([[1.0, 1.0, -1.0, -1.0, 5.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0, 0.0]])  # the last token is padding
    stats = policy_loss(logprobs, old, advantages, mask, clip_range=0.2)
    # per token max(-A r, -A clip(r, 0.8, 1.2)): -1.2 (clipped), -0.5, 0.8 (clipped), 1.5
    assert float(stats.loss_sum.detach()) == pytest.approx(-1.2 - 0.5 + 0.8 + 1.5)
    assert float(stats.clipped) == 2
    stats.loss_sum.backward()
    # d/dlogp of -A r = -A r where the unclipped term is taken, 0 where clipped or padded
    torch.testing.assert_close(logprobs.grad, torch.tensor([[0.0, -0.5, 0.0, 1.5, 0.0]]))


def test_clipped_value_loss_exact_values():
    values = torch.tensor([[0.5, 0.1, -0.5, 9.0]], requires_grad=True)
    old = torch.zeros(1, 4)
    returns = torch.ones(1, 4)
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    stats = value_loss(values, old, returns, mask, clip_range_value=0.2)
    # 0.5: clipped to 0.2 -> 0.5 * max(0.25, 0.64); 0.1: inside -> 0.5 * 0.81;
    # -0.5: clipped to -0.2 -> 0.5 * max(2.25, 1.44)
    assert float(stats.loss_sum.detach()) == pytest.approx(0.32 + 0.405 + 1.125)
    assert float(stats.clipped) == 1
    stats.loss_sum.backward()
    torch.testing.assert_close(values.grad, torch.tensor([[0.0, -0.9, -1.5, 0.0]]))


def test_token_rewards_and_the_adaptive_kl_coefficient():
    logprobs = torch.tensor([[-1.0, -2.0, -0.5], [-1.0, -1.0, -1.0]])
    ref = torch.tensor([[-1.5, -1.0, -0.5], [-2.0, -1.0, -3.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    rewards, kl = token_rewards(torch.tensor([2.0, -1.0]), logprobs, ref, mask, kl_coef=0.1)
    torch.testing.assert_close(kl, torch.tensor([[0.5, -1.0, 0.0], [1.0, 0.0, 0.0]]))
    # -0.1 * kl per token, the score added at each row's last response token
    torch.testing.assert_close(rewards, torch.tensor([[-0.05, 0.1, 2.0], [-0.1, -1.0, 0.0]]))
    fixed = AdaptiveKLController(0.1, None, 100)
    fixed.update(50.0, 16)
    assert fixed.coef == 0.1
    adaptive = AdaptiveKLController(0.1, 1.0, 100)
    adaptive.update(3.0, 16)  # KL over target: error clipped to +0.2
    assert adaptive.coef == pytest.approx(0.1 * (1 + 0.2 * 16 / 100))
    adaptive.update(0.9, 16)  # below target: the coefficient falls
    assert adaptive.coef == pytest.approx(0.1 * (1 + 0.2 * 0.16) * (1 - 0.1 * 0.16))


def test_left_padding_does_not_change_a_rows_outputs():
    torch.manual_seed(0)
    model = Transformer(_tiny_model()).eval()
    short, long = [5, 9, 4], [3, 8, 8, 6, 1, 12]
    pad_lens = torch.tensor([3, 0])
    ids = torch.tensor([[0, 0, 0, *short], long])
    positions, cu = sequence_layout(pad_lens, ids.shape[1])
    assert positions.tolist() == [[0, 0, 0, 0, 1, 2], [0, 1, 2, 3, 4, 5]]
    with torch.no_grad():
        batched = model(ids, positions, cu)
        alone = model(torch.tensor([short]))
    torch.testing.assert_close(batched[0, 3:], alone[0], atol=1e-5, rtol=0)
    torch.testing.assert_close(batched[1], model(torch.tensor([long]))[0], atol=1e-5, rtol=0)


def test_generation_stops_at_the_stop_id_and_masks_what_follows():
    torch.manual_seed(0)
    model = Transformer(_tiny_model()).eval()
    prompts = [[4, 5, 6], [9, 10]] * 4
    rollout = generate(model, prompts, 12, [STOP, 11], temperature=3.0)
    assert rollout.prompt_width == 3 and rollout.pad_lens.tolist() == [0, 1] * 4
    assert 0 < int(rollout.stopped.sum()) < 8  # some rows stop, others run to 12 tokens
    for row, mask, stopped in zip(rollout.responses, rollout.mask, rollout.stopped, strict=True):
        n = int(mask.sum())
        assert mask[:n].eq(1).all() and mask[n:].eq(0).all()
        hits = torch.isin(row[:n], torch.tensor([STOP, 11])).nonzero().flatten().tolist()
        assert hits == ([n - 1] if bool(stopped) else [])  # a stop id ends the response
        assert bool(stopped) or n == 12
        assert row[n:].eq(0).all()  # pads after it
    top1 = generate(model, [[4, 5, 6]], 4, [STOP], temperature=1.0, top_k=1)
    again = generate(model, [[4, 5, 6]], 4, [STOP], temperature=1.0, top_k=1)
    assert torch.equal(top1.sequences, again.sequences)  # top_k 1 is greedy


def test_prompts_from_dpo_and_sft_batches_end_where_the_response_starts():
    from dataforge.loader import LoaderConfig
    from dataforge.loader.collate import collate

    sample = {"prompt_tokens": np.array([1, 5, 8, 6]), "chosen_tokens": np.array([9, 7]),
              "rejected_tokens": np.array([3, 7])}  # fmt: skip
    config = LoaderConfig(streams=[{"path": "x"}], mode="dpo", max_seq_len=16, max_tokens=64)
    assert prompts_of_batch(collate([[sample]], config)) == [[1, 5, 8, 6]]
    sft = {"tokens": np.array([1, 5, 8, 6, 9, 7]), "loss_mask": np.array([0, 0, 0, 0, 1, 1])}
    config = LoaderConfig(streams=[{"path": "x"}], mode="sft", max_seq_len=16, max_tokens=64)
    assert prompts_of_batch(collate([[sft]], config)) == [[1, 5, 8, 6]]


def test_jsonl_prompts_wrap_around_and_count_long_ones(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt_tokens": [1, 2]}\n\n{"prompt_tokens": [1, 2, 3, 4]}\n')
    source = JsonlPrompts.read(path, None, VOCAB, max_len=3)
    assert source.take(3) == [[1, 2], [1, 2], [1, 2]] and source.dropped == 2
    restored = JsonlPrompts.read(path, None, VOCAB, max_len=3)
    restored.load_state_dict(source.state_dict())
    assert restored.take(1) == source.take(1)
    path.write_text('{"prompt_tokens": [1, 2]}\n{"text": "hi"}\n')
    with pytest.raises(ValueError, match=r"p.jsonl:2: need an object with prompt_tokens"):
        JsonlPrompts.read(path, None, VOCAB, max_len=3)


# -- a tiny run -------------------------------------------------------------------------


def _tiny_model():
    from trainer.config import ModelConfig

    return ModelConfig(vocab_size=VOCAB, hidden_size=64, n_layers=2, n_heads=4,
                       intermediate_size=176, max_seq_len=64)  # fmt: skip


def _pairs(seed: int, pairs: int = 8) -> dict:
    """Chosen responses hold the keyword somewhere, rejected ones never."""
    from dataforge.loader import LoaderConfig
    from dataforge.loader.collate import collate

    rng = np.random.default_rng(seed)
    others = np.array([t for t in range(3, VOCAB) if t != KEYWORD])
    rows = []
    for _ in range(pairs):
        chosen = rng.choice(others, rng.integers(3, 7))
        chosen[rng.integers(len(chosen))] = KEYWORD
        rows.append([{"prompt_tokens": rng.choice(others, 5), "chosen_tokens": chosen,
                      "rejected_tokens": rng.choice(others, rng.integers(3, 7))}])  # fmt: skip
    config = LoaderConfig(streams=[{"path": "unused"}], mode="dpo", max_seq_len=16, max_tokens=64)
    return collate(rows, config)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """A policy export (random weights, as an SFT export) and a keyword reward model."""
    from tests.trainer.conftest import tiny_config

    root = tmp_path_factory.mktemp("models")
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    reward_config = tiny_config(
        root / "reward", model={"vocab_size": VOCAB}, train={"max_steps": 40},
        optim={"lr": 3e-3, "min_lr": 3e-4, "warmup_steps": 2, "weight_decay": 0.0},
    )  # fmt: skip
    reward = train(reward_config, "reward", source=ListBatchSource([_pairs(i) for i in range(8)]))
    torch.manual_seed(1)
    policy_config = tiny_config(root / "policy", model={"vocab_size": VOCAB})
    policy = root / "policy" / "export"
    write_export(Transformer(policy_config.model).state_dict(), policy_config, policy,
                 {"stage": "sft", "step": 0})  # fmt: skip
    rng = np.random.default_rng(0)
    prompts = root / "prompts.jsonl"
    lines = [{"prompt_tokens": rng.integers(3, VOCAB, 5).tolist()} for _ in range(64)]
    prompts.write_text("".join(json.dumps(line) + "\n" for line in lines))
    torch.set_num_threads(previous)
    return {"reward": reward.export_dir, "policy": policy, "prompts": prompts}


def _ppo_config(tmp_path, make_config, models, max_steps=20, interval=1000, data=None, **ppo):
    extra = {"data": data} if data else {}
    return make_config(
        tmp_path, model={"vocab_size": VOCAB}, init_from=str(models["policy"]),
        train={"max_steps": max_steps},
        optim={"lr": 1e-3, "min_lr": 1e-4, "warmup_steps": 2, "weight_decay": 0.0},
        checkpoint={"interval": interval},
        ppo={"reward_model": str(models["reward"]), "prompts": str(models["prompts"]),
             "stop_token_ids": [STOP], "max_new_tokens": 8, "rollout_batch_size": 16,
             "mini_batch_size": 8, "ppo_epochs": 2, "kl_coef": 0.05, **ppo},
        **extra,
    )  # fmt: skip


def test_ppo_raises_the_keyword_reward_with_bounded_kl(tmp_path, make_config, models):
    config = _ppo_config(tmp_path, make_config, models)
    result = train_ppo(config)
    rewards = [r["reward"] for r in result.records]
    kls = [r["kl"] for r in result.records]
    start, end = np.mean(rewards[:5]), np.mean(rewards[-5:])
    print(f"ppo reward {start:.3f} -> {end:.3f}, max kl {max(kls):.3f}")
    assert end > start + 2.0
    assert max(kls) < 10.0  # nats per response of at most 8 tokens
    records = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").open()]
    assert [r["step"] for r in records] == list(range(1, 21))
    for key in ("reward", "kl", "entropy", "value_loss", "clip_fraction", "kl_coef"):
        assert all(math.isfinite(r[key]) for r in records), key
    assert records[0]["kl"] == pytest.approx(0.0, abs=1e-6)  # the policy starts as the reference
    card = json.loads((result.export_dir / "config.json").read_text())
    assert card["dataforge"]["stage"] == "ppo" and card["dataforge"]["step"] == 20


def test_adaptive_kl_moves_the_coefficient_toward_the_target(tmp_path, make_config, models):
    config = _ppo_config(tmp_path, make_config, models, max_steps=6, target_kl=0.01, kl_horizon=50)
    records = train_ppo(config).records
    coefs = [r["kl_coef"] for r in records]
    assert coefs[0] == 0.05
    for record, before, after in zip(records, coefs, coefs[1:], strict=False):
        error = min(max(record["kl"] / 0.01 - 1, -0.2), 0.2)
        assert after == pytest.approx(before * (1 + error * 16 / 50))


def _prompt_shards(out: Path) -> dict:
    """DPO-format MDS shards (the format_dpo op's columns): 40 pairs of random prompts."""
    from streaming import MDSWriter

    rng = np.random.default_rng(3)
    columns = {"prompt_tokens": "ndarray:uint16", "chosen_tokens": "ndarray:uint16",
               "rejected_tokens": "ndarray:uint16", "num_tokens": "int"}  # fmt: skip
    with MDSWriter(out=str(out), columns=columns, size_limit=1 << 10) as writer:
        for _ in range(40):
            prompt = rng.integers(3, VOCAB, rng.integers(3, 7)).astype(np.uint16)
            chosen, rejected = np.array([KEYWORD, STOP], np.uint16), np.array([9, STOP], np.uint16)
            writer.write({"prompt_tokens": prompt, "chosen_tokens": chosen,
                          "rejected_tokens": rejected, "num_tokens": len(prompt) + 2})  # fmt: skip
    loader = {"streams": [{"path": str(out)}], "mode": "dpo", "max_tokens": 96,
              "max_seq_len": 16, "num_workers": 0, "pin_memory": False}  # fmt: skip
    return {"source": "loader", "loader": loader}


def test_ppo_resume_after_a_kill_gives_the_same_next_metrics(tmp_path, make_config, models):
    """Prompts from MDS shards: the loader's position and the prompts left over from its
    last batch are in the checkpoint."""
    data = _prompt_shards(tmp_path / "mds")
    common = {"max_steps": 6, "data": data, "prompts": None, "rollout_batch_size": 10,
              "mini_batch_size": 5}  # fmt: skip
    full = train_ppo(_ppo_config(tmp_path / "a", make_config, models, **common))
    config = _ppo_config(tmp_path / "b", make_config, models, interval=3, **common)
    first = train_ppo(config, stop_after=4)  # "killed" after step 4: checkpoint 3 remains
    assert first.steps == 4 and first.checkpoint.name == "step_00000003"
    resumed = train_ppo(config)
    assert [r["step"] for r in resumed.records] == [4, 5, 6]
    keys = ("reward", "kl", "entropy", "value_loss", "policy_loss", "clip_fraction")
    for got, want in zip(resumed.records, full.records[3:], strict=True):
        for key in keys:
            assert got[key] == pytest.approx(want[key], abs=1e-6), key
    lines = (tmp_path / "b" / "run" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in lines] == [1, 2, 3, 4, 5, 6]


def _fails(tmp_path, capsys, **keys: str) -> str:
    lines = {
        "model": "{preset: tiny, vocab_size: 32}",
        "train": "{max_steps: 2, precision: fp32, device: cpu, tensorboard: false}",
        "optim": "{warmup_steps: 0}",
        "run_dir": str(tmp_path / "run"),
        "checkpoint": f"{{dir: {tmp_path / 'ck'}}}",
    } | keys
    path = tmp_path / "c.yaml"
    path.write_text("".join(f"{k}: {v}\n" for k, v in lines.items()))
    assert main(["ppo", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("error: "), err
    assert not (tmp_path / "run" / "metrics.jsonl").exists()
    return err


@pytest.mark.parametrize(
    ("ppo", "expected"),
    [
        ("{clip_range: 0}", "ppo.clip_range=0.0; valid range: > 0"),
        ("{clip_range_value: -0.1}", "ppo.clip_range_value=-0.1; valid range: > 0"),
        ("{rollout_batch_size: 6, mini_batch_size: 4}", "ppo.mini_batch_size 4 must divide"),
        ("{lam: 1.5}", "ppo.lam=1.5; valid range: 0.0 to 1.0"),
        ("{temperature: 0}", "ppo.temperature=0.0; valid range: > 0"),
        ("{target_kl: 0}", "ppo.target_kl=0.0; valid range: > 0"),
        ("{}", "ppo.reward_model: required"),
    ],
)
def test_bad_ppo_configs_are_one_line_exit_2(tmp_path, capsys, models, ppo, expected):
    err = _fails(tmp_path, capsys, init_from=str(models["policy"]), ppo=ppo)
    assert expected in err


def test_ppo_refuses_missing_models_and_a_reward_model_without_a_head(tmp_path, capsys, models):
    err = _fails(tmp_path, capsys, ppo=f"{{reward_model: {models['reward']}}}")
    assert "ppo needs init_from" in err
    no_head = f"{{reward_model: {models['policy']}, prompts: {models['prompts']}}}"
    err = _fails(tmp_path, capsys, init_from=str(models["policy"]), ppo=no_head)
    assert "no score.weight" in err
    missing = f"{{reward_model: {tmp_path / 'nowhere'}}}"
    err = _fails(tmp_path, capsys, init_from=str(models["policy"]), ppo=missing)
    assert "nowhere: not an export directory" in err


def test_cli_has_a_ppo_stage_and_the_quick_start_config_loads():
    import argparse

    from trainer.cli import add_arguments
    from trainer.config import load_config

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["ppo", "trainer/configs/ppo_tiny.yaml"])
    assert (args.stage, args.config) == ("ppo", "trainer/configs/ppo_tiny.yaml")
    config = load_config(args.config)
    assert config.ppo.reward_model.endswith("checkpoints/rlhf_reward_tiny/export")
    assert config.init_from.endswith("checkpoints/rlhf_sft_tiny/export")


def test_rlhf_demo_pairs_differ_by_the_keyword(tmp_path):
    import gzip
    import importlib.util

    spec = importlib.util.spec_from_file_location("demo", "scripts/make_rlhf_demo.py")
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    texts = ["质量还不错，很满意", "物流太慢了，不满意", "包装很好，还不错的", "一般般吧，凑合用",
             "价格便宜质量好", "短", "质量还不错，很满意"]  # fmt: skip
    (tmp_path / "reviews_zh").mkdir()
    with gzip.open(tmp_path / "reviews_zh" / "part-0000.jsonl.gz", "wt", encoding="utf-8") as f:
        for i, text in enumerate(texts):
            f.write(json.dumps({"id": f"r{i}", "text": text, "label": "pos"}) + "\n")
    reviews = demo.short_reviews(tmp_path)
    assert [r["text"] for r in reviews["pos"]] == texts[:5]  # too short and repeated: out
    pairs = demo.pref_records(reviews)
    assert [(p["chosen"], p["rejected"]) for p in pairs] == [
        (texts[0], texts[1]),
        (texts[2], texts[3]),
    ]
    assert len(demo.sft_records(reviews)) == 5


DEMO_TOKENIZER = Path(__file__).resolve().parents[2] / "tokenizers" / "demo"


@pytest.mark.skipif(not (DEMO_TOKENIZER / "spm.model").is_file(), reason="make demo-tokenizer")
def test_text_prompts_render_in_the_chat_layout(tmp_path):
    from dataforge.tokenization.hf_tokenizer import load_tokenizer

    tokenizer = load_tokenizer(DEMO_TOKENIZER)
    special = tokenizer.special_tokens
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"prompt": "写一条正面的商品评论。"}, ensure_ascii=False) + "\n")
    (ids,) = JsonlPrompts.read(path, str(DEMO_TOKENIZER), 1 << 20, max_len=64).prompts
    body = tokenizer.encode_batch(["写一条正面的商品评论。"])[0]
    marks = [special[m] for m in ("<|user|>", "<|end|>", "<|assistant|>")]
    assert ids == [tokenizer.bos_id, marks[0], *body, marks[1], marks[2]]


def test_a_signal_checkpoints_the_step_and_the_rerun_resumes_there(
    tmp_path, make_config, models, monkeypatch
):
    from trainer.control.stopping import Interrupted, StopRequest

    config = _ppo_config(tmp_path, make_config, models, max_steps=4)
    calls = iter([None, "SIGTERM"])
    monkeypatch.setattr(StopRequest, "requested", lambda self, env: next(calls))
    with pytest.raises(Interrupted) as stopped:
        train_ppo(config)
    assert stopped.value.step == 2 and (tmp_path / "ckpt" / "step_00000002").is_dir()
    monkeypatch.setattr(StopRequest, "requested", lambda self, env: None)
    resumed = train_ppo(config)
    assert [r["step"] for r in resumed.records] == [3, 4]
