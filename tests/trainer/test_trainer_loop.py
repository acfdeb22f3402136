"""The training loop end to end on tiny models (CPU, fp32 unless stated)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from trainer.config import ConfigError
from trainer.data.sources import ListBatchSource
from trainer.loop import TrainingError, lr_factor, train
from trainer.model.pretrained import load_exported
from trainer.model.transformer import Transformer
from trainer.objectives import sequence_logps

ROOT = Path(__file__).resolve().parents[2]


def test_overfits_a_small_batch(tmp_path, make_config, make_batch):
    config = make_config(tmp_path, train={"max_steps": 60})
    result = train(config, "pretrain", source=ListBatchSource([make_batch(0)]))
    assert result.steps == 60 and result.skipped_steps == 0
    assert result.losses[0] > math.log(64) - 0.3  # starts near uniform over 64 tokens
    assert result.losses[-1] < 0.3
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    assert [r["step"] for r in records] == list(range(1, 61))
    for key in (
        "loss",
        "lr",
        "grad_norm",
        "tokens_per_s",
        "mfu",
        "data_wait_frac",
        "skipped_steps",
    ):
        assert key in records[0]
    assert records[0]["mfu"] is None  # no known peak for a CPU
    assert records[0]["tokens_seen"] == 4 * 32 and records[-1]["tokens_seen"] == 60 * 4 * 32


def test_lr_schedule_warmup_then_cosine(make_config, tmp_path):
    optim = make_config(tmp_path, optim={"lr": 1.0, "min_lr": 0.1, "warmup_steps": 4}).optim
    factor = lr_factor(optim, max_steps=14)
    assert [factor(s) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert factor(9) == pytest.approx(0.55)  # halfway through the cosine
    assert factor(14) == pytest.approx(0.1) and factor(100) == pytest.approx(0.1)


def test_kill_and_resume_gives_identical_losses(tmp_path, make_config, make_batch):
    batches = [make_batch(i, pad=i % 3) for i in range(5)]  # 5 batches, 2 per step: epochs wrap
    common = dict(
        train={"max_steps": 8, "grad_accum_steps": 2}, checkpoint={"interval": 2, "keep_last": 2}
    )
    full = train(make_config(tmp_path / "a", **common), "pretrain", source=ListBatchSource(batches))

    config = make_config(tmp_path / "b", **common)
    first = train(config, "pretrain", source=ListBatchSource(batches), stop_after=5)  # "killed"
    assert first.steps == 5 and first.checkpoint.name == "step_00000004"
    resumed = train(config, "pretrain", source=ListBatchSource(batches))  # fresh source object
    assert resumed.steps == 8 and len(resumed.losses) == 4  # steps 5..8 redone from step 4
    records = (tmp_path / "b" / "run" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(r)["step"] for r in records] == list(range(1, 9))  # step 5 once
    np.testing.assert_allclose(resumed.losses, full.losses[4:], rtol=0, atol=1e-6)
    ckpts = sorted(p.name for p in (tmp_path / "b" / "ckpt").glob("step_*"))
    assert ckpts == ["step_00000006", "step_00000008"]  # keep_last 2
    weights_a = load_file(tmp_path / "a" / "ckpt" / "export" / "model.safetensors")
    weights_b = load_file(tmp_path / "b" / "ckpt" / "export" / "model.safetensors")
    for key in weights_a:
        torch.testing.assert_close(weights_a[key], weights_b[key], atol=1e-6, rtol=0)

    again = train(config, "pretrain", source=ListBatchSource(batches))  # already done
    assert again.steps == 8 and again.losses == []
    scratch = train(config, "pretrain", resume="scratch", source=ListBatchSource(batches))
    assert scratch.losses == pytest.approx(full.losses, abs=1e-6)
    assert len(list((tmp_path / "b" / "ckpt").glob("superseded-*/step_*"))) == 2


def test_sft_loss_ignores_prompt_positions(tmp_path, make_config, make_batch):
    """Perturbing the model's predictions at prompt positions (labels -100) leaves the SFT
    loss unchanged; perturbing one completion position changes it."""
    batch = make_batch(3)
    batch["labels"][:, :20] = -100  # prompt: 20 tokens, completion: the rest
    config = make_config(
        tmp_path, train={"max_steps": 1}, optim={"lr": 1e-9, "min_lr": 0.0, "warmup_steps": 0}
    )

    def loss_with_noise(positions):
        def add_noise(module, args, output):
            if not isinstance(module, Transformer):
                return output
            noise = torch.zeros_like(output)
            noise[:, positions] = 50 * torch.randn(
                output.shape[0], len(positions), output.shape[-1]
            )
            return output + noise

        handle = torch.nn.modules.module.register_module_forward_hook(add_noise)
        try:
            return train(config, "sft", resume="scratch", source=ListBatchSource([batch])).losses[0]
        finally:
            handle.remove()

    clean = loss_with_noise([])
    assert loss_with_noise(list(range(20))) == clean
    assert loss_with_noise([25]) != pytest.approx(clean, abs=1e-3)


def _pref_pairs(seed: int, pairs: int, vocab: int = 32) -> dict:
    """Prompt of random tokens; the chosen response repeats the prompt's last token, the
    rejected one is random: a rule a tiny model learns."""
    from dataforge.loader.collate import collate
    from dataforge.loader.config import LoaderConfig

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


def test_dpo_preference_accuracy_rises(tmp_path, make_config):
    train_set = [_pref_pairs(i, 8) for i in range(8)]
    config = make_config(
        tmp_path,
        model={"vocab_size": 32},
        train={"max_steps": 48},
        optim={"lr": 2e-3, "min_lr": 2e-4, "warmup_steps": 2, "weight_decay": 0.0},
        dpo={"beta": 0.1},
    )
    train(config, "dpo", source=ListBatchSource(train_set))
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    assert records[0]["preference_accuracy"] == 0.0  # policy == reference: margins are 0
    assert records[0]["loss"] == pytest.approx(math.log(2), abs=1e-6)
    assert min(r["preference_accuracy"] for r in records[-5:]) >= 0.9
    assert records[-1]["reward_margin"] > 0

    # Held-out pairs: the trained policy prefers chosen over rejected more than the start.
    _, trained = load_exported(tmp_path / "ckpt" / "export")
    torch.manual_seed(config.train.seed)
    start = Transformer(config.model).eval()
    policy = Transformer(config.model).eval()
    policy.load_state_dict(trained)
    held_out = _pref_pairs(99, 32)

    def accuracy(net):
        with torch.no_grad():
            chosen = sequence_logps(net(held_out["chosen_input_ids"]), held_out["chosen_labels"])
            rejected = sequence_logps(
                net(held_out["rejected_input_ids"]), held_out["rejected_labels"]
            )
            ref_c = sequence_logps(start(held_out["chosen_input_ids"]), held_out["chosen_labels"])
            ref_r = sequence_logps(
                start(held_out["rejected_input_ids"]), held_out["rejected_labels"]
            )
        return float(((chosen - ref_c) > (rejected - ref_r)).float().mean())

    assert accuracy(policy) >= 0.8


def test_dpo_precomputed_reference_matches_reference_model(tmp_path, make_config):
    config = make_config(tmp_path, model={"vocab_size": 32}, train={"max_steps": 3})
    batches = [_pref_pairs(i, 4) for i in range(3)]
    with_model = train(config, "dpo", source=ListBatchSource(batches))
    torch.manual_seed(config.train.seed)
    start = Transformer(config.model).eval()
    with torch.no_grad():
        for b in batches:
            b["ref_chosen_logps"] = sequence_logps(start(b["chosen_input_ids"]), b["chosen_labels"])
            b["ref_rejected_logps"] = sequence_logps(
                start(b["rejected_input_ids"]), b["rejected_labels"]
            )
    pre = make_config(
        tmp_path / "pre",
        model={"vocab_size": 32},
        train={"max_steps": 3},
        dpo={"reference": "precomputed"},
    )
    precomputed = train(pre, "dpo", source=ListBatchSource(batches))
    np.testing.assert_allclose(precomputed.losses, with_model.losses, atol=1e-6, rtol=0)


def test_fp16_with_grad_scaler_on_cpu(tmp_path, make_config, make_batch):
    config = make_config(
        tmp_path, train={"max_steps": 40, "precision": "fp16", "init_scale": 1024.0}
    )
    result = train(config, "pretrain", source=ListBatchSource([make_batch(0)]))
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    assert records[0]["loss_scale"] == 1024.0
    assert result.losses[-1] < 1.0 < result.losses[0]
    with pytest.raises(ConfigError, match="fp16 with fsdp"):
        fsdp = make_config(tmp_path, train={"precision": "fp16"}, distributed={"strategy": "fsdp"})
        train(fsdp, "pretrain", source=ListBatchSource([make_batch(0)]))


def _poisoned_start(tmp_path, make_config) -> Path:
    """An export whose embedding row of token 5 is NaN: batches containing 5 give NaN."""
    config = make_config(tmp_path)
    torch.manual_seed(0)
    net = Transformer(config.model)
    weights = {k: v.clone() for k, v in net.state_dict().items()}
    weights["embed.weight"][5] = float("nan")
    out = tmp_path / "poisoned"
    out.mkdir()
    save_file(weights, str(out / "model.safetensors"))
    from trainer.config import to_plain

    (out / "config.json").write_text(json.dumps({"model": to_plain(config.model)}))
    return out


def test_non_finite_steps_are_skipped_then_stop(tmp_path, make_config, make_batch):
    start = _poisoned_start(tmp_path, make_config)
    good = [make_batch(i) for i in range(3)]
    for b in good:
        b["input_ids"][b["input_ids"] == 5] = 6
        b["labels"][b["labels"] == 5] = 6
    bad = make_batch(10)
    bad["input_ids"][:, 3] = 5
    config = make_config(tmp_path, init_from=str(start), train={"max_steps": 6, "max_bad_steps": 2})
    result = train(
        config, "pretrain", source=ListBatchSource([good[0], bad, good[1], bad, good[2]])
    )
    assert result.steps == 6 and result.skipped_steps == 4  # g0 x g1 x g2 | g0 x g1 x g2
    assert all(math.isfinite(x) for x in result.losses)
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    assert [r["bad"] for r in records[:4]] == [0.0, 1.0, 0.0, 1.0]

    config = make_config(tmp_path / "x", init_from=str(start), train={"max_bad_steps": 2})
    with pytest.raises(TrainingError, match="2 consecutive non-finite steps"):
        train(config, "pretrain", source=ListBatchSource([good[0], bad, bad, good[1]]))


def test_export_round_trip_and_init_from(tmp_path, make_config, make_batch, capsys):
    config = make_config(tmp_path, model={"tie_embeddings": True}, train={"max_steps": 5})
    train(config, "pretrain", source=ListBatchSource([make_batch(0)]))
    export = tmp_path / "ckpt" / "export"
    assert "lm_head.weight" not in load_file(export / "model.safetensors")  # stored once
    card = json.loads((export / "config.json").read_text())
    assert card["dataforge"]["stage"] == "pretrain" and card["dataforge"]["step"] == 5
    model_config, weights = load_exported(export)
    assert model_config == config.model
    sft = make_config(
        tmp_path / "sft",
        model={"tie_embeddings": True},
        init_from=str(export),
        train={"max_steps": 1},
        optim={"lr": 1e-12, "min_lr": 0.0, "warmup_steps": 0},
    )
    net = Transformer(model_config).eval()
    net.load_state_dict(weights)
    batch = make_batch(0)
    with torch.no_grad():
        expected = torch.nn.functional.cross_entropy(
            net(batch["input_ids"]).flatten(0, 1), batch["labels"].flatten()
        )
    first = train(sft, "sft", source=ListBatchSource([batch])).losses[0]
    assert first == pytest.approx(float(expected), abs=1e-5)
    # The shape comes from init_from: an untied config is overridden, with a notice.
    untied = make_config(
        tmp_path / "y",
        init_from=str(export),
        train={"max_steps": 1},
        optim={"lr": 1e-12, "min_lr": 0.0, "warmup_steps": 0},
    )
    again = train(untied, "sft", source=ListBatchSource([batch]))
    assert again.losses[0] == pytest.approx(first, abs=1e-5)
    out = capsys.readouterr().out
    assert "tie_embeddings False->True" in out
    # Each run says what its weights began from.
    assert "starting from step 0 with new weights (train.seed" in out
    assert f"starting from step 0 with the weights of init_from {export}" in out


def test_tensorboard_events_written(tmp_path, make_config, make_batch):
    config = make_config(tmp_path, train={"max_steps": 2, "tensorboard": True})
    train(config, "pretrain", source=ListBatchSource([make_batch(0)]))
    assert list((tmp_path / "run" / "tensorboard").glob("events.out.tfevents.*"))


def test_cli_runs_and_reports_config_errors(tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text(
        f"""
model: {{preset: tiny, vocab_size: 64}}
train: {{max_steps: 3, precision: fp32, device: cpu, tensorboard: false}}
optim: {{warmup_steps: 1}}
data: {{source: synthetic, batch_size: 2, seq_len: 16}}
checkpoint: {{dir: {tmp_path / "ck"}}}
run_dir: {tmp_path / "run"}
"""
    )
    env = {"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "trainer", "pretrain", str(config), "--set", "train.max_steps=4"]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert len((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()) == 4
    assert (tmp_path / "ck" / "step_00000004" / "meta.json").is_file()

    from trainer.__main__ import main

    assert main(["pretrain", str(config), "--set", "optim.lr=fast"]) == 2
    assert "optim.lr: expected a number, got 'fast'" in capsys.readouterr().err


def test_add_subcommand_registers_train():
    import argparse

    from trainer.cli import add_subcommand

    parser = argparse.ArgumentParser(prog="dataforge")
    add_subcommand(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["train", "dpo", "x.yaml", "--from-scratch"])
    assert (args.stage, args.config, args.from_scratch) == ("dpo", "x.yaml", True)
    with pytest.raises(SystemExit):
        parser.parse_args(["train", "dpo", "x.yaml", "--resume", "auto", "--from-scratch"])


def _write_pipeline_mds(out: Path, docs: list[str]) -> None:
    """MDS in the pipeline's output layout (id, text, source, lang, meta, tokens,
    num_tokens); tokens are the UTF-8 bytes of each document plus EOS 256."""
    from streaming import MDSWriter

    columns = {"id": "str", "text": "str", "source": "str", "lang": "str", "meta": "json"}
    columns |= {"tokens": "ndarray:uint16", "num_tokens": "int"}
    with MDSWriter(out=str(out), columns=columns, size_limit=1 << 14) as writer:
        for i, text in enumerate(docs):
            tokens = np.frombuffer(text.encode(), np.uint8).astype(np.uint16)
            tokens = np.append(tokens, 256).astype(np.uint16)
            writer.write(
                {"id": f"pydoc-{i}", "text": text, "source": "docs_en", "lang": "en", "meta": {}}
                | {"tokens": tokens, "num_tokens": len(tokens)}
            )


def test_pipeline_output_through_loader_50_steps(tmp_path, make_config, text_docs):
    _write_pipeline_mds(tmp_path / "mds", text_docs(60))
    loader = {
        "streams": [{"path": str(tmp_path / "mds")}],
        "max_tokens": 512,
        "max_seq_len": 64,
        "packing": True,
        "shuffle_buffer": 64,
        "cache_dir": str(tmp_path / "cache"),
    }
    config = make_config(
        tmp_path,
        model={"vocab_size": 257, "max_seq_len": 64},
        train={"max_steps": 50},
        data={"source": "loader", "loader": loader},
        checkpoint={"interval": 25},
    )
    result = train(config, "pretrain")
    assert result.steps == 50 and result.skipped_steps == 0
    first, last = np.mean(result.losses[:10]), np.mean(result.losses[-10:])
    assert result.losses[0] > 5.0  # about ln(257) = 5.55 at the start
    assert last < first - 1.2, (first, last)  # measured: 4.53 -> 2.84
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    assert all(r["tokens_per_s"] > 0 and 0 <= r["data_wait_frac"] < 1 for r in records)
    state = torch.load(tmp_path / "ckpt" / "step_00000050" / "rank_00000.pt", weights_only=True)
    assert state["data"]["format"] == "dataforge.loader/1"


def test_kill_and_resume_with_the_loader(tmp_path, make_config, text_docs):
    _write_pipeline_mds(tmp_path / "mds", text_docs(24))
    loader = {
        "streams": [{"path": str(tmp_path / "mds")}],
        "max_tokens": 256,
        "max_seq_len": 64,
        "packing": True,
        "shuffle_buffer": 32,
        "cache_dir": str(tmp_path / "cache"),
    }

    def config(name):
        return make_config(
            tmp_path / name,
            model={"vocab_size": 257, "max_seq_len": 64},
            train={"max_steps": 8, "grad_accum_steps": 2},
            data={"source": "loader", "loader": loader},
            checkpoint={"interval": 3},
        )

    full = train(config("a"), "pretrain")
    killed = train(config("b"), "pretrain", stop_after=4)
    assert killed.checkpoint.name == "step_00000003"
    resumed = train(config("b"), "pretrain")
    np.testing.assert_allclose(resumed.losses, full.losses[3:], rtol=0, atol=1e-6)


@pytest.mark.parametrize(
    "option", ["activation_checkpointing", pytest.param("compile", marks=pytest.mark.slow)]
)
def test_activation_checkpointing_and_compile_keep_the_losses(
    tmp_path, make_config, make_batch, option
):
    batches = [make_batch(i, pad=i) for i in range(3)]
    plain = make_config(tmp_path / "plain", train={"max_steps": 3})
    other = make_config(tmp_path / "other", train={"max_steps": 3, option: True})
    expected = train(plain, "pretrain", source=ListBatchSource(batches)).losses
    got = train(other, "pretrain", source=ListBatchSource(batches)).losses
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5)


def _write_mds(out: Path, columns: dict, samples: list[dict]) -> None:
    from streaming import MDSWriter

    base = {"id": "str", "text": "str", "source": "str", "lang": "str", "meta": "json"}
    with MDSWriter(out=str(out), columns=base | columns, size_limit=1 << 14) as writer:
        for i, sample in enumerate(samples):
            writer.write(
                {"id": f"s{i}", "text": "", "source": "s", "lang": "en", "meta": {}} | sample
            )


def test_sft_and_dpo_batches_from_the_loader(tmp_path, make_config, text_docs):
    """The loader's SFT batches give the loss computed by hand on completion tokens only;
    its DPO batches start at loss log 2 (policy == reference)."""
    from dataforge.loader import LoaderConfig, build_dataloader

    rng = np.random.default_rng(0)
    sft, dpo = [], []
    for text in text_docs(16):
        tokens = np.frombuffer(text[:120].encode(), np.uint8).astype(np.uint16)
        prompt = int(rng.integers(5, len(tokens) - 5))
        mask = (np.arange(len(tokens)) >= prompt).astype(np.uint8)
        sft.append({"tokens": tokens, "loss_mask": mask, "num_tokens": len(tokens)})
        dpo.append(
            {
                "prompt_tokens": tokens[:prompt],
                "chosen_tokens": tokens[prompt:],
                "rejected_tokens": tokens[prompt:][::-1].copy(),
                "num_tokens": len(tokens),
            }
        )
    _write_mds(
        tmp_path / "sft",
        {"tokens": "ndarray:uint16", "loss_mask": "ndarray:uint8", "num_tokens": "int"},
        sft,
    )
    pair_columns = {
        k: "ndarray:uint16" for k in ("prompt_tokens", "chosen_tokens", "rejected_tokens")
    }
    _write_mds(tmp_path / "dpo", pair_columns | {"num_tokens": "int"}, dpo)

    def loader(name):
        return {
            "streams": [{"path": str(tmp_path / name)}],
            "max_tokens": 1024,
            "max_seq_len": 128,
            "cache_dir": str(tmp_path / f"cache_{name}"),
        }

    config = make_config(
        tmp_path / "run_sft",
        model={"vocab_size": 256, "max_seq_len": 128},
        train={"max_steps": 2},
        data={"source": "loader", "loader": loader("sft")},
    )
    losses = train(config, "sft").losses
    with build_dataloader(LoaderConfig(**loader("sft") | {"mode": "sft"})) as direct:
        batch = next(iter(direct))
    assert (batch["labels"] == -100).sum() > (batch["attention_mask"] == 0).sum()  # prompts
    torch.manual_seed(config.train.seed)
    start = Transformer(config.model)
    with torch.no_grad():
        logits = start(batch["input_ids"], batch["position_ids"])
    expected = torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten())
    assert losses[0] == pytest.approx(float(expected), abs=1e-5)

    config = make_config(
        tmp_path / "run_dpo",
        model={"vocab_size": 256, "max_seq_len": 128},
        train={"max_steps": 2},
        data={"source": "loader", "loader": loader("dpo")},
    )
    assert train(config, "dpo").losses[0] == pytest.approx(math.log(2), abs=1e-6)
