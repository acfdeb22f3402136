"""Both executors on the demo-like recipe: the same shard bytes and counts, every task on
Ray actors (none in the driver) or on local worker processes (Ray never imported)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dataforge.config import load_pipeline
from dataforge.io.mds import iter_samples
from dataforge.runtime.executors.local import LocalExecutor
from dataforge.runtime.pipeline import run_pipeline

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "data" / "demo"
CLI = [sys.executable, "-m", "dataforge.cli"]


def demo_like(tmp_path: Path) -> Path:
    """Part of the demo corpus through the demo's recipe without its KenLM models (clean,
    quality_filter, MinHash dedup, sample, tokenize, MDS), split so that files are tasks."""
    if not (DEMO / ".done").is_file() or not (REPO / "tokenizers" / "demo").is_dir():
        pytest.fail("demo corpus or tokenizer not built: run `make demo-data demo-tokenizer`")
    path = tmp_path / "demo_like.yaml"
    path.write_text(
        textwrap.dedent(
            f"""
            name: demo_like
            seed: 1234
            inputs:
              - {{name: news_zh, path: "{DEMO}/news_zh/part-000[01].jsonl.zst", lang: zh, id_key: id}}
              - {{name: reviews_zh, path: "{DEMO}/reviews_zh/part-0000.jsonl.gz", lang: zh, id_key: id}}
              - {{name: docs_en, path: "{DEMO}/docs_en/*.jsonl", lang: en, id_key: id}}
              - {{name: pkgdesc_en, path: "{DEMO}/pkgdesc_en/*.parquet", format: parquet, lang: en}}
            read: {{split_bytes: 262144}}
            ray: {{num_cpus: 2}}
            stages:
              - {{op: clean}}
              - {{op: quality_filter}}
              - {{op: dedup, method: minhash}}
              - {{op: sample, alpha: 0.7, unit: chars, keep_total: true, max_epochs: 3}}
              - {{op: tokenize, tokenizer: {REPO}/tokenizers/demo, add_bos: true, add_eos: true}}
            output: {{path: out, format: mds, compression: zstd}}
            """
        )
    )
    return path


def shard_bytes(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted((out / "mds").rglob("*"))
            if p.is_file()}  # fmt: skip


@pytest.mark.ray
@pytest.mark.slow
def test_both_executors_write_the_same_bytes(tmp_path: Path) -> None:
    pipeline = demo_like(tmp_path)
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    outs = {}
    for executor in ("ray", "local"):
        outs[executor] = tmp_path / executor
        args = ["run", str(pipeline), "-o", str(outs[executor]), "--executor", executor]
        proc = subprocess.run([*CLI, *args], capture_output=True, text=True, env=env, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert f"executor: {executor} (--executor): every task runs on" in proc.stderr
    manifests = {e: json.loads((o / "manifest.json").read_text()) for e, o in outs.items()}
    assert shard_bytes(outs["ray"]) == shard_bytes(outs["local"])
    assert len(shard_bytes(outs["ray"])) > 2
    assert manifests["ray"]["counts"] == manifests["local"]["counts"]
    tasks = len(manifests["ray"]["inputs"]) * 3  # three segments: dedup, sample between
    for executor, manifest in manifests.items():
        runtime = manifest["runtime"]
        assert runtime["executor"] == executor and runtime["tasks_on_driver"] == 0
        assert runtime["num_cpus"] == 2 and runtime["nodes"] == 1
        assert sum(runtime["tasks_by_node"].values()) == tasks
        assert len(runtime["tasks_by_node"]) == 1


def test_the_local_executor_never_imports_ray(pipeline_file: Path, tmp_path: Path) -> None:
    program = textwrap.dedent(
        f"""
        import sys
        from dataforge.cli import main
        code = main(["run", {str(pipeline_file)!r}, "-o", {str(tmp_path / "out")!r},
                     "--executor", "local", "--progress", "off"])
        assert "ray" not in sys.modules, "Ray was imported"
        sys.exit(code)
        """
    )
    proc = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"running on {os.cpu_count()} local worker processes" in proc.stderr
    reference = tmp_path / "ref"
    run_pipeline(load_pipeline(pipeline_file), reference, LocalExecutor(), log=lambda m: None)
    assert list(iter_samples(tmp_path / "out")) == list(iter_samples(reference))


@pytest.mark.ray
def test_run_on_ray_leaves_the_process_as_it_found_it(pipeline_file: Path, tmp_path: Path) -> None:
    """A library caller goes on after the run: embedded Ray stopped, the SIGTERM handler
    the run installed for its own clean exit removed again, every task on an actor."""
    import ray

    from dataforge.runtime.executors.ray import run_on_ray

    config = load_pipeline(pipeline_file)
    before = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    logged: list[str] = []
    try:
        manifest = run_on_ray(config, tmp_path / "out", log=logged.append)
        assert "running on embedded local Ray" in "\n".join(logged)
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGTERM, before)
    assert not ray.is_initialized()
    assert manifest["runtime"]["tasks_on_driver"] == 0
    reference = tmp_path / "ref"
    run_pipeline(config, reference, LocalExecutor(), log=lambda m: None)
    assert list(iter_samples(tmp_path / "out")) == list(iter_samples(reference))
