"""Hugging Face interop: import Llama/Qwen2/Mistral checkpoints, export to transformers.

Small random models built and saved by the tests themselves (CPU, fp32, no download).
"""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from trainer.checkpoint.export import write_export
from trainer.config import ConfigError, config_from_mapping
from trainer.model.pretrained import load_exported
from trainer.model.transformer import Transformer

transformers = pytest.importorskip("transformers")

SHAPE = dict(
    vocab_size=96,
    hidden_size=64,
    intermediate_size=112,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
)


def _save(model_cls, config, path, shard: bool = False):
    torch.manual_seed(0)
    model = model_cls(config).eval()
    with torch.no_grad():  # non-trivial norms and biases, so a misplaced tensor shows
        for name, param in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                param.add_(torch.randn_like(param) * 0.1)
    max_shard = "40KB" if shard else "5GB"
    model.save_pretrained(path, safe_serialization=True, max_shard_size=max_shard)
    return model


def _ours(path) -> Transformer:
    config, weights = load_exported(path)
    net = Transformer(config).eval()
    net.load_state_dict(weights)
    return net


def _ids(seed: int = 1, rows: int = 2, width: int = 24) -> torch.Tensor:
    return torch.randint(
        0, SHAPE["vocab_size"], (rows, width), generator=torch.Generator().manual_seed(seed)
    )


@pytest.mark.parametrize(
    "kind",
    ["llama_gqa_llama3_rope_sharded", "llama_tied_linear_rope", "qwen2_bias", "mistral_window"],
)
def test_import_matches_transformers_logits(tmp_path, kind):
    if kind.startswith("llama"):
        scaling = (
            {
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 16,
            }
            if "llama3" in kind
            else {"rope_type": "linear", "factor": 2.0}
        )
        config = transformers.LlamaConfig(
            **SHAPE, rope_theta=50000.0, rope_scaling=scaling, tie_word_embeddings="tied" in kind
        )
        cls = transformers.LlamaForCausalLM
    elif kind == "qwen2_bias":
        config = transformers.Qwen2Config(**SHAPE, tie_word_embeddings=True, rope_theta=1e6)
        cls = transformers.Qwen2ForCausalLM
    else:
        config = transformers.MistralConfig(**SHAPE, sliding_window=5)
        cls = transformers.MistralForCausalLM
    config._attn_implementation = "eager"
    reference = _save(cls, config, tmp_path, shard="sharded" in kind)
    if "sharded" in kind:
        assert (tmp_path / "model.safetensors.index.json").is_file()
    ids = _ids()
    with torch.no_grad():
        expected = reference(ids).logits
        got = _ours(tmp_path)(ids)
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=0)


def test_export_loads_in_transformers_with_equal_logits(tmp_path):
    for qkv_bias, window, tied in ((False, None, False), (True, None, True), (False, 6, False)):
        raw = {
            "model": {
                "vocab_size": 96,
                "hidden_size": 64,
                "n_layers": 2,
                "n_heads": 4,
                "n_kv_heads": 2,
                "intermediate_size": 112,
                "max_seq_len": 64,
                "qkv_bias": qkv_bias,
                "sliding_window": window,
                "tie_embeddings": tied,
            },
            "train": {"max_steps": 1},
            "optim": {"warmup_steps": 0},
        }
        config = config_from_mapping(raw)
        torch.manual_seed(0)
        net = Transformer(config.model).eval()
        with torch.no_grad():
            for name, param in net.named_parameters():
                if "norm" in name or name.endswith("bias"):
                    param.add_(torch.randn_like(param) * 0.1)
        out = tmp_path / f"export_{qkv_bias}_{window}"
        write_export(net.state_dict(), config, out, {"stage": "pretrain", "step": 1})
        card = json.loads((out / "config.json").read_text())
        assert card["architectures"] == [
            "Qwen2ForCausalLM"
            if qkv_bias
            else "MistralForCausalLM"
            if window
            else "LlamaForCausalLM"
        ]
        assert (out / "generation_config.json").is_file()
        hf = transformers.AutoModelForCausalLM.from_pretrained(
            out, attn_implementation="eager"
        ).eval()
        ids = _ids(seed=2, width=20)
        with torch.no_grad():
            torch.testing.assert_close(hf(ids).logits, net(ids), atol=1e-4, rtol=0)
        # and back: the export imports to the same weights
        config_back, weights = load_exported(out)
        assert config_back == config.model
        assert all(torch.equal(weights[k], v) for k, v in net.state_dict().items())


def test_unsupported_architecture_is_refused_with_the_supported_list(tmp_path):
    llama = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4}
    llama |= {"vocab_size": 8, "num_hidden_layers": 1, "intermediate_size": 8}
    (tmp_path / "config.json").write_text(
        json.dumps(llama | {"rope_scaling": {"rope_type": "yarn"}})
    )
    with pytest.raises(
        ConfigError,
        match="rope_scaling type 'yarn' is not supported; valid: default, linear, llama3",
    ):
        load_exported(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_embd": 64}))
    with pytest.raises(
        ConfigError,
        match=r"model_type 'gpt2' is not supported; supported architectures: llama \(LlamaForCausalLM\), mistral",
    ):
        load_exported(tmp_path)


def test_export_of_an_imported_model_carries_its_tokenizer(tmp_path):
    from tokenizers import Tokenizer, models

    config = transformers.LlamaConfig(**SHAPE, bos_token_id=1, eos_token_id=2)
    _save(transformers.LlamaForCausalLM, config, tmp_path / "llama")
    vocab = {f"t{i}": i for i in range(SHAPE["vocab_size"])}
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="t0")), unk_token="t0"
    )
    fast.save_pretrained(tmp_path / "llama")
    raw = {"model": {"vocab_size": 8}, "init_from": str(tmp_path / "llama")}
    trainer_config = config_from_mapping(raw | {"optim": {"warmup_steps": 0}})
    model_config, weights = load_exported(tmp_path / "llama")
    imported = dataclasses.replace(trainer_config, model=model_config)
    write_export(weights, imported, tmp_path / "out", {"stage": "sft", "step": 1})
    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert (tmp_path / "out" / name).read_bytes() == (tmp_path / "llama" / name).read_bytes()
    card = json.loads((tmp_path / "out" / "config.json").read_text())
    assert (card["bos_token_id"], card["eos_token_id"]) == (1, 2)
    reloaded = transformers.AutoTokenizer.from_pretrained(tmp_path / "out")
    assert reloaded("t5 t7")["input_ids"] == fast("t5 t7")["input_ids"]


def test_train_export_cli_writes_the_checkpoint_as_a_transformers_model(tmp_path, capsys):
    from trainer.__main__ import main
    from trainer.data.sources import ListBatchSource
    from trainer.loop import train

    raw = {
        "model": {"preset": "tiny", "vocab_size": 64, "n_kv_heads": 2},
        "train": {"max_steps": 2, "precision": "fp32", "device": "cpu", "tensorboard": False},
        "optim": {"warmup_steps": 0},
        "checkpoint": {"dir": str(tmp_path / "ck"), "interval": 1},
        "run_dir": str(tmp_path / "run"),
    }
    batch = {"input_ids": torch.randint(64, (2, 16), generator=torch.Generator().manual_seed(0))}
    batch["labels"] = torch.roll(batch["input_ids"], -1, 1)
    train(config_from_mapping(raw), "pretrain", source=ListBatchSource([batch]))
    capsys.readouterr()
    assert main(["export", str(tmp_path / "ck" / "step_00000002")]) == 0
    out = tmp_path / "ck" / "export-step_00000002"
    printed = capsys.readouterr().out.splitlines()
    # 2 layers x 9 tensors + embeddings, final norm, output layer; 4-byte floats
    n = 2 * 9 + 3
    size = 4 * (2 * 64 * 64 + 2 * (2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 176 + 2 * 64) + 64)
    assert printed[0] == (
        f"[trainer] export: writing {n} tensors ({size / 2**20:,.1f} MiB) -> {out}"
    )
    assert printed[1].startswith("[trainer] export: weights written in ")
    assert printed[2] == f"exported {tmp_path / 'ck' / 'step_00000002'} -> {out}"
    hf = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    final = _ours(tmp_path / "ck" / "export")  # the run's own final export: same weights
    ids = _ids(seed=3, width=12) % 64
    with torch.no_grad():
        torch.testing.assert_close(hf(ids).logits, final(ids), atol=1e-4, rtol=0)
    assert json.loads((out / "config.json").read_text())["dataforge"]["step"] == 2
    assert main(["export", str(tmp_path / "ck")]) == 2  # not a step directory
    assert "not a complete checkpoint" in capsys.readouterr().err
