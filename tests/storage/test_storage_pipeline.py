"""Inputs, tokenizer and output on a real S3 server (moto): the demo corpus through
``dataforge run`` on embedded Ray gives the same output as a local run, ``inspect`` and the
loader read it from ``s3://``, and the tiny model trains on it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dataforge.config import load_pipeline
from dataforge.runtime.executors.local import LocalExecutor
from dataforge.runtime.pipeline import run_pipeline

pytestmark = [pytest.mark.slow, pytest.mark.ray]

REPO = Path(__file__).resolve().parents[2]
DEMO = (REPO / "data" / "demo").resolve()
FIXTURES = REPO / "tests" / "fixtures" / "tokenization"

PIPELINE = """\
name: demo_storage
seed: 1234
inputs:
  - {{name: news_zh, path: "{corpus}/news_zh/part-000[0-3].jsonl.zst", lang: zh, id_key: id, meta_keys: [title]}}
  - {{name: reviews_zh, path: "{corpus}/reviews_zh/part-0000.jsonl.gz", lang: zh, id_key: id}}
  - {{name: docs_en, path: "{corpus}/docs_en/**/*.jsonl", lang: en, id_key: id, meta_keys: [title]}}
  - {{name: pkgdesc_en, path: "{corpus}/pkgdesc_en/*.parquet", format: parquet, lang: en, id_key: id}}
stages:
  - {{op: clean}}
  - {{op: quality_filter}}
  - {{op: dedup, method: minhash}}
  - {{op: sample, alpha: 0.7, unit: chars, keep_total: true, max_epochs: 3}}
  - {{op: tokenize, tokenizer: "{tokenizer}", add_bos: true, add_eos: true}}
output: {{path: out, format: mds, compression: zstd, size_limit: 1048576, rejects: true}}
"""


def cli(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "dataforge.cli", *args],
        capture_output=True, text=True, timeout=timeout, env=dict(os.environ),
    )  # fmt: skip


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from dataforge.tokenization import TokenizerSpec, train_tokenizer

    out = tmp_path_factory.mktemp("tok") / "tokenizer"
    spec = TokenizerSpec(name="storage", inputs=(str(FIXTURES / "*.jsonl"),), vocab_size=2000,
                         character_coverage=0.995, num_threads=1)  # fmt: skip
    train_tokenizer(spec, out)
    return out


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_demo_pipeline_on_s3_equals_local_run_then_trains(
    s3, bucket: str, tokenizer_dir: Path, tmp_path: Path
) -> None:
    if not (DEMO / "news_zh").is_dir():
        pytest.fail("the demo corpus is missing: run `make demo-data` (make test does)")
    s3.upload_tree(DEMO, bucket, "corpus")
    s3.upload_tree(tokenizer_dir, bucket, "tokenizers/storage")
    remote_yaml = tmp_path / "remote.yaml"
    remote_yaml.write_text(PIPELINE.format(corpus=f"s3://{bucket}/corpus",
                                           tokenizer=f"s3://{bucket}/tokenizers/storage"))  # fmt: skip
    local_yaml = tmp_path / "local.yaml"
    local_yaml.write_text(PIPELINE.format(corpus=DEMO, tokenizer=tokenizer_dir))
    out = f"s3://{bucket}/runs/demo"

    assert cli("validate", str(remote_yaml)).returncode == 0
    # In-process executor: Ray actors writing to S3 are covered by test_storage_errors (the
    # lease takeover run), and Ray's start-up would triple this test's time.
    run_pipeline(load_pipeline(remote_yaml), out, LocalExecutor(), log=lambda m: None)
    local = run_pipeline(
        load_pipeline(local_yaml), tmp_path / "local", LocalExecutor(), log=lambda m: None
    )

    # Everything but the manifest is byte-identical; nothing else is left in the bucket.
    keys = s3.keys(bucket, "runs/demo/")
    assert not any("/_work/" in k or k.endswith("_lease.json") for k in keys)
    remote_dir = tmp_path / "remote"
    for key in keys:
        (remote_dir / key).parent.mkdir(parents=True, exist_ok=True)
        s3.client().download_file(bucket, key, str(remote_dir / key))
    remote_files = _files(remote_dir / "runs" / "demo")
    local_files = _files(tmp_path / "local")
    del local_files[".dataforge-lock"]  # the local flock's file; S3 holds a lease, released
    assert sorted(remote_files) == sorted(local_files)
    different = sorted(k for k in local_files if remote_files[k] != local_files[k])
    assert different == ["manifest.json", "plan.json"]  # they name the inputs' paths
    remote = json.loads(remote_files["manifest.json"])
    assert remote["status"] == "complete" and remote["counts"] == local["counts"]
    assert remote["output"] == local["output"] and remote["output"]["records"] > 1000
    assert [i["path"] for i in remote["inputs"]] == [
        f"s3://{bucket}/corpus/" + Path(i["path"]).relative_to(DEMO).as_posix()
        for i in local["inputs"]
    ]
    # A second run resumes nothing and changes nothing.
    messages: list[str] = []
    run_pipeline(load_pipeline(remote_yaml), out, LocalExecutor(), log=messages.append)
    assert "nothing to do" in messages[-1]
    assert s3.keys(bucket, "runs/demo/") == keys

    inspect = cli("inspect", out, "--verify", "--json", "--head", "1")
    assert inspect.returncode == 0, inspect.stderr
    report = json.loads(inspect.stdout)
    assert report["verify"]["ok"] and report["samples"] == remote["output"]["records"]
    assert report["head"][0]["decoded"] == report["head"][0]["text"]

    _train_five_steps_from_s3(out, f"s3://{bucket}/tokenizers/storage", tmp_path)


def _train_five_steps_from_s3(out: str, tokenizer: str, tmp_path: Path) -> None:
    import numpy as np
    import torch

    from trainer.config import load_config
    from trainer.loop import train

    config = load_config(
        REPO / "trainer" / "configs" / "pretrain_tiny.yaml",
        [
            f"tokenizer={tokenizer}",
            f"run_dir={tmp_path / 'train'}",
            f"checkpoint.dir={tmp_path / 'ckpt'}",
            "train.max_steps=5",
            "optim.warmup_steps=2",
            "train.tensorboard=false",
            f"data.loader.streams=[{{path: '{out}/mds'}}]",
            f"data.loader.cache_dir={tmp_path / 'loader-cache'}",
        ],
    )
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        result = train(config, "pretrain")
    finally:
        torch.set_num_threads(threads)
    assert result.steps == 5 and len(result.losses) == 5
    assert all(np.isfinite(result.losses))
    assert result.losses[0] == pytest.approx(np.log(2000), abs=0.6)
    # the export beside the checkpoints carries the tokenizer fetched from s3://
    exported = sorted(p.name for p in (tmp_path / "ckpt" / "export").iterdir())
    assert "dataforge_bpe.json" in exported, exported
