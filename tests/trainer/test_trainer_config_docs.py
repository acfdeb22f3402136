"""docs/trainer.md's key reference is current; config paths resolve against the file."""

from __future__ import annotations

import dataclasses
import os
import typing

from trainer.config import TrainerConfig, load_config
from trainer.config.docs import field_docs, main, reference


def test_every_key_is_documented_and_the_reference_is_current(capsys):
    hints = typing.get_type_hints(TrainerConfig)
    keys = {key for key, *_ in reference()}
    for field in dataclasses.fields(TrainerConfig):
        section = hints[field.name]
        if dataclasses.is_dataclass(section):
            docs = field_docs(section)
            for sub in dataclasses.fields(section):
                assert docs.get(sub.name), f"{field.name}.{sub.name} has no docstring"
                assert f"{field.name}.{sub.name}" in keys
        else:
            assert field.name in keys
    assert (
        "train.grad_accum_steps",
        "int",
        "1",
        "Micro-batches per optimizer step on each rank.",
    ) in reference()
    assert main(["--check"]) == 0, capsys.readouterr().out


def test_paths_resolve_against_the_file_and_overrides_against_the_cwd(tmp_path, monkeypatch):
    configs = tmp_path / "project" / "configs"
    configs.mkdir(parents=True)
    (configs / "c.yaml").write_text(
        "tokenizer: ../tok\n"
        "init_from: ../export\n"
        "model: {preset: tiny}\n"
        "train: {max_steps: 2}\n"
        "optim: {warmup_steps: 0}\n"
        "data: {loader: {streams: [{path: ../mds}, ../more], cache_dir: cache}}\n"
        "eval: {streams: [{path: ../held}]}\n"
        "checkpoint: {interval: 5}\n"
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    config = load_config(configs / "c.yaml", ["checkpoint.export_dir=out/x"])
    project = str(tmp_path / "project")
    assert config.tokenizer == f"{project}/tok"
    assert config.init_from == f"{project}/export"
    assert config.data.loader["streams"] == [{"path": f"{project}/mds"}, f"{project}/more"]
    assert config.data.loader["cache_dir"] == f"{project}/configs/cache"
    assert config.eval.streams == ({"path": f"{project}/held"},)
    # defaults sit next to the file too; overrides are relative to where one types them
    assert config.run_dir == f"{project}/configs/runs/default"
    assert config.checkpoint.dir == f"{project}/configs/checkpoints"
    assert config.checkpoint.export_dir == os.path.join(str(elsewhere), "out/x")
    uri = load_config(configs / "c.yaml", ["tokenizer=s3://bucket/tok"])
    assert uri.tokenizer == "s3://bucket/tok"


def test_errors_show_the_resolved_path(tmp_path, monkeypatch, capsys):
    from trainer.__main__ import main as train_main

    (tmp_path / "c.yaml").write_text(
        "model: {preset: tiny, vocab_size: 64}\n"
        "train: {max_steps: 2, precision: fp32, device: cpu, tensorboard: false}\n"
        "optim: {warmup_steps: 0}\n"
        "data: {source: loader, loader: {streams: [{path: missing/mds}]}}\n"
    )
    monkeypatch.chdir(tmp_path.parent)
    assert train_main(["pretrain", str(tmp_path.name + "/c.yaml")]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path}/missing/mds" in err and err.count("\n") == 1
