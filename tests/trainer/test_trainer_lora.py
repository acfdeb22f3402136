"""LoRA: only the adapters train, DPO's reference is the base model, exports are merged."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from trainer.config import ConfigError, config_from_mapping
from trainer.data.sources import ListBatchSource
from trainer.loop import train
from trainer.model.lora import LoRALinear, adapters_disabled, apply_lora, merge_lora
from trainer.model.transformer import Transformer
from trainer.objectives import build_objective, sequence_logps

LORA = {"r": 4, "alpha": 8.0, "targets": ["qkv", "proj", "up", "down"]}


def _pairs(seed: int, pairs: int, vocab: int = 32) -> dict:
    """The chosen response repeats the prompt's last token, the rejected one is random."""
    from dataforge.loader.collate import collate
    from dataforge.loader.config import LoaderConfig

    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(pairs):
        prompt = rng.integers(1, vocab, 6)
        rows.append(
            [
                {
                    "prompt_tokens": prompt,
                    "chosen_tokens": np.full(4, prompt[-1]),
                    "rejected_tokens": rng.integers(1, vocab, 4),
                }
            ]
        )
    config = LoaderConfig(streams=[{"path": "unused"}], mode="dpo", max_seq_len=16, max_tokens=64)
    return collate(rows, config)


def _lora_model(config, state: dict) -> Transformer:
    net = Transformer(config.model)
    apply_lora(net, config.lora)
    net.load_state_dict(state)
    return net.eval()


def test_sft_with_lora_trains_the_adapters_only_and_exports_merged(
    tmp_path, make_config, make_batch
):
    transformers = pytest.importorskip("transformers")
    batches = [make_batch(i) for i in range(4)]
    for batch in batches:
        batch["labels"][:, :10] = -100  # prompt positions
    config = make_config(tmp_path, lora=LORA, train={"max_steps": 12}, checkpoint={"interval": 12})
    result = train(config, "sft", source=ListBatchSource(batches))
    assert sum(result.losses[-3:]) < sum(result.losses[:3])
    state = torch.load(tmp_path / "ckpt" / "step_00000012" / "train_state.pt", weights_only=True)
    weights = state["model"]
    torch.manual_seed(config.train.seed)
    base = Transformer(config.model).state_dict()
    assert sorted(k for k in weights if k not in base) == sorted(
        f"blocks.{i}.{layer}.{ab}"
        for i in range(2)
        for layer in ("attn.q", "attn.k", "attn.v", "attn.proj", "mlp.gate", "mlp.up", "mlp.down")
        for ab in ("lora_a", "lora_b")
    )
    for key, value in base.items():  # the base model is untouched
        assert torch.equal(weights[key], value), key
    assert all(weights[k].abs().sum() > 0 for k in weights if k.endswith("lora_b"))
    # only the adapters have optimizer state
    assert len(state["optimizer"]["state"]) == 28

    trained = _lora_model(config, weights)
    exported = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "ckpt" / "export")
    ids = make_batch(7)["input_ids"]
    with torch.no_grad():
        torch.testing.assert_close(exported.eval()(ids).logits, trained(ids), atol=1e-4, rtol=0)
        with adapters_disabled(trained):
            base_net = Transformer(config.model).eval()
            base_net.load_state_dict(base)
            torch.testing.assert_close(trained(ids), base_net(ids), atol=0, rtol=0)


def test_dpo_with_lora_uses_the_base_model_as_reference(tmp_path, make_config):
    config = make_config(
        tmp_path,
        model={"vocab_size": 32},
        lora=LORA | {"alpha": 16.0},
        train={"max_steps": 48},
        optim={"lr": 5e-3, "min_lr": 5e-4, "warmup_steps": 2, "weight_decay": 0.0},
        checkpoint={"interval": 48},
    )
    objective = build_objective("dpo", config)
    net = Transformer(config.model)
    apply_lora(net, config.lora)
    objective.prepare(net, lambda frozen: frozen)
    assert objective.reference is None  # no second copy of the weights
    train(config, "dpo", source=ListBatchSource([_pairs(i, 8) for i in range(8)]))
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    assert records[0]["loss"] == pytest.approx(math.log(2), abs=1e-6)  # policy == base
    assert min(r["preference_accuracy"] for r in records[-3:]) >= 0.9

    state = torch.load(tmp_path / "ckpt" / "step_00000048" / "train_state.pt", weights_only=True)
    policy = _lora_model(config, state["model"])
    held = _pairs(99, 32)

    def margins(with_adapters: bool) -> torch.Tensor:
        def logps(prefix: str) -> torch.Tensor:
            return sequence_logps(policy(held[f"{prefix}input_ids"]), held[f"{prefix}labels"])

        with torch.no_grad():
            if with_adapters:
                return logps("chosen_") - logps("rejected_")
            with adapters_disabled(policy):
                return logps("chosen_") - logps("rejected_")

    accuracy = float((margins(True) > margins(False)).float().mean())
    assert accuracy >= 0.8


def test_merge_folds_the_update_and_bad_settings_are_refused(make_config, tmp_path):
    config = make_config(tmp_path, lora=LORA)
    net = Transformer(config.model)
    apply_lora(net, config.lora)
    assert isinstance(net.blocks[0].attn.q, LoRALinear)
    torch.nn.init.normal_(net.blocks[0].attn.q.lora_b)
    merged = merge_lora(net.state_dict(), config.lora)
    plain = Transformer(config.model)
    plain.load_state_dict(merged)
    ids = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(plain(ids), net(ids), atol=1e-5, rtol=0)
    base = {"model": {"preset": "tiny", "vocab_size": 64}, "optim": {"warmup_steps": 0}}
    with pytest.raises(ConfigError, match="valid names are qkv, proj, up, down, lm_head"):
        config_from_mapping(base | {"lora": {"r": 4, "targets": ["q_proj"]}})
    with pytest.raises(ConfigError, match="tie_embeddings"):
        config_from_mapping(
            base
            | {"model": {"preset": "tiny", "vocab_size": 64, "tie_embeddings": True}}
            | {"lora": {"r": 4, "targets": ["lm_head"]}}
        )


def test_export_holds_a_peft_adapter_that_gives_the_merged_logits(
    tmp_path, make_config, make_batch
):
    import peft
    import transformers

    from trainer.checkpoint.export import write_export

    base_config = make_config(tmp_path / "base")
    torch.manual_seed(0)
    base_state = Transformer(base_config.model).state_dict()
    write_export(
        base_state, base_config, tmp_path / "base_export", {"stage": "pretrain", "step": 0}
    )
    batches = [make_batch(i) for i in range(4)]
    config = make_config(
        tmp_path,
        init_from=str(tmp_path / "base_export"),
        lora={**LORA, "targets": ["qkv", "proj", "up", "down", "lm_head"]},
        model={"preset": "tiny", "vocab_size": 64, "tie_embeddings": False},
        train={"max_steps": 6},
    )
    train(config, "sft", source=ListBatchSource(batches))
    export = tmp_path / "ckpt" / "export"
    card = json.loads((export / "adapter" / "adapter_config.json").read_text())
    assert card["target_modules"] == sorted(
        ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head"]
    )
    assert card["base_model_name_or_path"] == str(tmp_path / "base_export")
    base = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "base_export")
    adapted = peft.PeftModel.from_pretrained(base, export / "adapter").eval()
    merged = transformers.AutoModelForCausalLM.from_pretrained(export).eval()
    ids = make_batch(7)["input_ids"]
    with torch.no_grad():
        expected = merged(ids).logits
        torch.testing.assert_close(adapted(ids).logits, expected, atol=1e-5, rtol=0)
        with adapted.disable_adapter():  # the adapters carry the whole update
            assert (adapted(ids).logits - expected).abs().max() > 1e-3
