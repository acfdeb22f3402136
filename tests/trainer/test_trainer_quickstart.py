"""The quick start end to end on the demo data, with a tiny tokenizer (CPU, fp32).

The data comes from the shipped pipelines the Makefile runs (pipelines/sft_demo.yaml,
pipelines/dpo_demo.yaml over scripts/make_chat_demo.py's chat sets and their held-out
tenth), run Ray-free into a
temporary directory with the tokenizer and input paths overridden; the pretraining shards
come from a tokenize-only pipeline over the demo corpus's English docs (pipelines/demo.yaml
also filters with KenLM models that `make test` does not build).

Every shipped trainer config then runs on that data with these overrides: paths into the
temporary directory, CPU, fp32, a few steps, and, for the presets of 134M parameters and
more, no real model: their shape is built on the meta device (no memory) and their data
section is checked by building the loader and reading a batch.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from trainer.config import load_config
from trainer.data.sources import build_batch_source
from trainer.loop import train
from trainer.model.pretrained import resolve_model
from trainer.model.transformer import Transformer
from trainer.objectives import build_objective

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "data" / "demo"
CONFIGS = ROOT / "trainer" / "configs"
TOKENIZER_FIXTURES = ROOT / "tests" / "fixtures" / "tokenization" / "*.jsonl"

pytestmark = pytest.mark.slow


def _pipeline(path: Path, out: Path, overrides: list[str]) -> Path:
    from dataforge.config import load_pipeline
    from dataforge.runtime.executors.local import LocalExecutor
    from dataforge.runtime.pipeline import run_pipeline

    run_pipeline(load_pipeline(path, overrides), out, LocalExecutor(), log=lambda m: None)
    return out / "mds"


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """Tokenizer, chat sets and MDS shards in a temporary directory."""
    from dataforge.tokenization import TokenizerSpec, train_tokenizer

    if not (DEMO / ".done").is_file():
        pytest.fail("the demo corpus is missing: run `make demo-data` (make test does)")
    root = tmp_path_factory.mktemp("quickstart")
    tokenizer = root / "tokenizer"
    spec = TokenizerSpec(
        name="t",
        inputs=(str(TOKENIZER_FIXTURES),),
        vocab_size=2000,
        character_coverage=0.995,
        num_threads=1,
    )
    train_tokenizer(spec, tokenizer)
    chat = root / "chat"
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "make_chat_demo.py"),
            "--demo",
            str(DEMO),
            "--out",
            str(chat),
            "--reviews",
            "400",
        ],
        check=True,
        capture_output=True,
        cwd=ROOT,
    )
    out = {"tokenizer": tokenizer}
    for kind in ("sft", "dpo"):  # the train sets and their held-out tenth, as mk/loader.mk
        for part, name in (("train", kind), ("held", f"{kind}_heldout")):
            overrides = [
                f"inputs.0.path={chat / f'{name}.jsonl'}",
                f"stages.0.tokenizer={tokenizer}",
            ]
            pipeline = ROOT / "pipelines" / f"{kind}_demo.yaml"
            out[f"{kind}_{part}"] = _pipeline(pipeline, root / f"{kind}_{part}", overrides)
    pretrain = root / "pretrain.yaml"
    pretrain.write_text(
        f"name: pretrain\ninputs: [{{name: docs_en, path: '{DEMO}/docs_en/*.jsonl', "
        f"lang: en, id_key: id}}]\nstages: [{{op: tokenize, tokenizer: '{tokenizer}', "
        f"add_bos: true}}]\noutput: {{path: '{root}/demo', format: mds}}\n"
    )
    out["pretrain"] = _pipeline(pretrain, root / "demo", [])
    out["root"] = root
    return out


def _overrides(name: str, demo: dict, run: Path) -> list[str]:
    streams = {"pretrain": demo["pretrain"], "sft": demo["sft_train"], "dpo": demo["dpo_train"]}
    streams["reward"] = demo["dpo_train"]  # the reward model reads DPO's pairs
    stage = name.split("_")[0]
    held = "dpo" if stage == "reward" else stage
    held_out = [f"eval.streams=[{{path: '{demo[held + '_held']}'}}]"] if stage != "pretrain" else []
    return held_out + [
        f"tokenizer={demo['tokenizer']}",
        f"data.loader.streams=[{{path: '{streams[stage]}'}}]",
        f"run_dir={run / 'run'}",
        f"checkpoint.dir={run / 'ckpt'}",
        "train.device=cpu",
        "train.precision=fp32",
        "train.tensorboard=false",
        "data.loader.num_workers=0",
        "data.loader.pin_memory=false",
        "distributed.strategy=ddp",
    ]


TINY = ["pretrain_tiny", "sft_tiny", "dpo_tiny", "reward_tiny"]
RLHF = ["rlhf_sft_tiny", "rlhf_reward_tiny", "ppo_tiny"]  # make demo-rlhf: test_trainer_ppo.py
BIG = sorted(p.stem for p in CONFIGS.glob("*.yaml") if p.stem not in TINY + RLHF)


def test_tiny_configs_chain_pretrain_sft_dpo(demo, tmp_path, monkeypatch):
    """`make demo-sft demo-dpo`'s chain: each stage from the previous stage's export."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    previous = None
    for name in TINY:
        run = tmp_path / name
        overrides = _overrides(name, demo, run) + ["train.max_steps=3", "optim.warmup_steps=1"]
        if previous is not None:
            overrides.append(f"init_from={previous}")
        config = load_config(CONFIGS / f"{name}.yaml", overrides)
        result = train(config, name.split("_")[0])
        assert result.steps == 3 and len(result.losses) == 3
        previous = result.export_dir
        assert json.loads((previous / "config.json").read_text())["dataforge"]["step"] == 3
        records = [json.loads(x) for x in (run / "run" / "metrics.jsonl").open()]
        evals = [r for r in records if "val_loss" in r]  # sft/dpo_tiny evaluate on held-out
        assert [r["step"] for r in evals] == ([] if name == "pretrain_tiny" else [3])


@pytest.mark.parametrize("name", BIG)
def test_big_configs_shape_on_meta_and_data(demo, tmp_path, monkeypatch, name):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    overrides = _overrides(name, demo, tmp_path)
    raw_config = load_config(CONFIGS / f"{name}.yaml", overrides + ["init_from=null"])
    config = resolve_model(raw_config)
    assert config.model.vocab_size == 2000
    with torch.device("meta"):
        params = Transformer(config.model).num_params()
    assert params > 80e6  # 134m at 32k ids; the test tokenizer has 2000
    objective = build_objective(name.split("_")[0], config)
    source = build_batch_source(config, objective, rank=0, world_size=1)
    try:
        batch = next(iter(source))
    finally:
        source.close()
    width = max(v.shape[1] for k, v in batch.items() if k.endswith("input_ids"))
    assert width <= config.model.max_seq_len
    assert (
        sum(v.numel() for k, v in batch.items() if k.endswith("input_ids"))
        <= (config.data.loader["max_tokens"])
    )


def test_sft_then_dpo_from_an_imported_llama(demo, tmp_path, monkeypatch):
    """A transformers Llama checkpoint (built here) -> SFT 50 steps with held-out eval ->
    DPO with held-out reward accuracy, on the demo chat shards."""
    transformers = pytest.importorskip("transformers")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    hf_config = transformers.LlamaConfig(
        vocab_size=2000,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
    )
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(hf_config).save_pretrained(tmp_path / "llama")

    sft_overrides = _overrides("sft_tiny", demo, tmp_path / "sft") + [
        f"init_from={tmp_path / 'llama'}",
        "train.max_steps=50",
        "train.log_interval=1000",
        "optim={lr: 3.0e-3, min_lr: 3.0e-4, warmup_steps: 5}",
        f"eval={{streams: [{{path: '{demo['sft_held']}'}}], interval: 25, max_batches: 4}}",
    ]
    sft = train(load_config(CONFIGS / "sft_tiny.yaml", sft_overrides), "sft")
    assert sum(sft.losses[-10:]) / 10 < 0.8 * sum(sft.losses[:10]) / 10  # 7.2 -> 5.3 seen
    records = [json.loads(x) for x in (tmp_path / "sft" / "run" / "metrics.jsonl").open()]
    evals = [r for r in records if "val_loss" in r]
    assert [r["step"] for r in evals] == [25, 50]
    assert evals[-1]["val_loss"] < evals[0]["val_loss"]
    # The export is a Llama again, with the imported model's shape.
    card = json.loads((sft.export_dir / "config.json").read_text())
    assert card["architectures"] == ["LlamaForCausalLM"] and card["num_key_value_heads"] == 2
    # ... with the run's Jieba+BPE tokenizer as remote code.
    from dataforge.tokenization import Tokenizer

    hf_tok = transformers.AutoTokenizer.from_pretrained(sft.export_dir, trust_remote_code=True)
    text = "这个商品质量很好，推荐购买。Quality is fine."
    # ... which normalizes raw text as clean did (NFKC: "，" is ",") and begins with <bos>.
    cleaned = text.replace("，", ",")
    assert hf_tok(text)["input_ids"] == Tokenizer.load(demo["tokenizer"]).encode(
        cleaned, add_bos=True
    )

    dpo_overrides = _overrides("dpo_tiny", demo, tmp_path / "dpo") + [
        f"init_from={sft.export_dir}",
        "train.max_steps=10",
        "optim={lr: 1.0e-3, min_lr: 1.0e-4, warmup_steps: 2, weight_decay: 0.0}",
        f"eval={{streams: [{{path: '{demo['dpo_held']}'}}], interval: 10}}",
    ]
    train(load_config(CONFIGS / "dpo_tiny.yaml", dpo_overrides), "dpo")
    records = [json.loads(x) for x in (tmp_path / "dpo" / "run" / "metrics.jsonl").open()]
    (final,) = [r for r in records if "val_loss" in r]
    assert 0.0 <= final["val_preference_accuracy"] <= 1.0
    held_out = (demo["root"] / "chat" / "dpo_heldout.jsonl").read_text().splitlines()
    assert final["val_weight"] == len(held_out)  # every held-out pair, once


def _config_paths(raw: dict) -> list[str]:
    """The local paths a shipped config names (relative to the YAML file)."""
    paths = [raw.get(k) for k in ("tokenizer", "init_from", "run_dir")]
    paths.append(raw.get("checkpoint", {}).get("dir"))
    for section in (raw.get("data", {}).get("loader", {}), raw.get("eval", {})):
        paths += [s.get("path") for s in section.get("streams", [])]
    for key in ("reward_model", "prompts"):
        paths.append(raw.get("ppo", {}).get(key))
    return [p for p in paths if isinstance(p, str) and "://" not in p]


@pytest.mark.parametrize("config", sorted(CONFIGS.glob("*.yaml")), ids=lambda p: p.stem)
def test_shipped_config_paths_point_at_the_repository_folders(config):
    import yaml

    # normpath, not resolve: a checkout may hold data/ or tokenizers/ as symlinks
    configs = Path(os.path.normpath(CONFIGS))
    for path in _config_paths(yaml.safe_load(config.read_text(encoding="utf-8"))):
        resolved = Path(os.path.normpath(config.parent / path))
        assert configs not in resolved.parents, f"{config.name}: {path}"
        assert configs.parent.parent in resolved.parents, f"{config.name}: {path}"
