"""A real ``ray start`` cluster (token authentication on): ``--address``, ``ray job submit``
and embedded Ray give identical output; a node that cannot see a path fails the run."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from dataforge.config import load_pipeline
from dataforge.runtime.cluster import (
    ClusterError,
    auth_token_available,
    node_path_problems,
    resolve_run_paths,
)
from dataforge.runtime.executors.local import LocalExecutor
from dataforge.runtime.pipeline import run_pipeline

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "data" / "demo"
CLI = [sys.executable, "-m", "dataforge.cli"]


def demo_pipeline(tmp_path: Path) -> Path:
    """Part of the demo corpus through the stages that need no built model, split small so
    that the uncompressed files become several tasks."""
    if not (DEMO / ".done").is_file():
        pytest.fail(f"demo corpus not built ({DEMO}/.done missing): run `make demo-data`")
    path = tmp_path / "cluster.yaml"
    path.write_text(
        textwrap.dedent(
            f"""
            name: cluster
            seed: 5
            inputs:
              - {{name: news_zh, path: "{DEMO}/news_zh/part-000[01].jsonl.zst", lang: zh, id_key: id}}
              - {{name: docs_en, path: "{DEMO}/docs_en/*.jsonl", lang: en}}
              - {{name: pkgdesc_en, path: "{DEMO}/pkgdesc_en/*.parquet", format: parquet, lang: en}}
            read: {{split_bytes: 262144}}
            stages:
              - {{op: clean}}
              - {{op: quality_filter}}
              - {{op: dedup, method: minhash}}
            output: {{path: out, format: mds, compression: zstd}}
            """
        )
    )
    return path


def fingerprint(out: Path) -> tuple:
    """Shard names, sample counts and hashes from mds/index.json, and the manifest's counts."""
    index = json.loads((out / "mds" / "index.json").read_text())
    shards = [
        (s["raw_data"]["basename"], s["samples"], s["raw_data"]["hashes"], s["zip_data"]["hashes"])
        for s in index["shards"]
    ]
    manifest = json.loads((out / "manifest.json").read_text())
    return shards, manifest["counts"]


def run_cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, env=env, timeout=600)


@pytest.mark.ray
@pytest.mark.slow
def test_address_job_submit_and_embedded_give_identical_output(
    ray_start_cluster, tmp_path: Path
) -> None:
    pipeline = demo_pipeline(tmp_path)
    head = ray_start_cluster(num_cpus=2)

    # Without the cluster's token: one line that says where to put it, before any work.
    tokenless = {k: v for k, v in head.env.items() if k != "RAY_AUTH_TOKEN"}
    tokenless["HOME"] = str(tmp_path)  # no ~/.ray/auth_token there
    refused = run_cli("run", str(pipeline), "-o", str(tmp_path / "refused"),
                      "--address", head.address, env=tokenless)  # fmt: skip
    assert refused.returncode == 1 and "requires token authentication" in refused.stderr
    assert "RAY_AUTH_MODE=disabled;" in refused.stderr  # no token here: Ray's own rule
    assert not list((tmp_path / "refused").glob("_work/seg*/*.done"))
    embedded = run_cli("run", str(pipeline), "-o", str(tmp_path / "embedded"), env=head.env)
    assert embedded.returncode == 0, embedded.stderr[-3000:]

    # A relative -o: resolved on the driver, not in the workers' working directory.
    joined = subprocess.run(
        [*CLI, "run", str(pipeline), "-o", "joined", "--address", head.address],
        capture_output=True, text=True, env=head.env, cwd=tmp_path, timeout=600,
    )  # fmt: skip
    assert joined.returncode == 0, joined.stderr[-3000:]
    assert f"Ray cluster at {head.address} (1 nodes, 2 CPUs)" in joined.stderr
    assert "InvalidAuthToken" not in joined.stderr and "WARNING" not in joined.stderr.upper()

    submit_env = {**head.env, "RAY_AUTH_MODE": "token"}  # Ray's own CLI needs it said
    job = subprocess.run(
        [head.ray, "job", "submit", "--address", head.dashboard, "--working-dir", str(REPO),
         "--", *CLI, "run", str(pipeline), "-o", str(tmp_path / "job")],
        capture_output=True, text=True, env=submit_env, timeout=600,
    )  # fmt: skip
    assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-2000:]
    assert "succeeded" in job.stdout + job.stderr

    reference = fingerprint(tmp_path / "embedded")
    shards, counts = reference
    assert counts["total"]["input"] > 1000
    assert {"001-000000-000000", "001-000000-000001"} <= {n.split("/")[0] for n, *_ in shards}
    assert fingerprint(tmp_path / "joined") == reference
    assert fingerprint(tmp_path / "job") == reference


def test_node_path_problems_name_the_path(tmp_path: Path, write_pipeline) -> None:
    data = tmp_path / "in.jsonl"
    data.write_text('{"text": "hello"}\n')
    body = (
        'name: p\ninputs: [{name: s, path: "in.jsonl"}]\n'
        "stages: [{op: tokenize, tokenizer: no/such/tokenizer}]\noutput: {path: out}\n"
    )
    config = load_pipeline(write_pipeline(tmp_path, body))
    work = tmp_path / "out" / "_work"
    work.mkdir(parents=True)
    (work / ".node-probe").write_text("p1")
    spec = {
        "inputs": [(str(data), data.stat().st_size), (str(tmp_path / "gone.jsonl"), 5)],
        "work": str(work),
        "probe": "p1",
        "node": "n1",
        "config": config,
    }
    problems = node_path_problems(spec)
    assert problems[0] == f"cannot see input {tmp_path / 'gone.jsonl'} (No such file or directory)"
    assert problems[1].startswith("stages[0] (tokenize): ") and "no/such/tokenizer" in problems[1]
    assert len(problems) == 2 and not (work / ".node-probe-n1").exists()
    spec.update(inputs=[(str(data), 999)], probe="another run")
    problems = node_path_problems(spec)
    assert problems[0] == f"sees input {data} with {data.stat().st_size} bytes, the driver saw 999"
    assert problems[1].startswith(f"cannot see or write the output directory {work.parent} ")


def test_run_paths_are_made_absolute(tmp_path: Path, write_pipeline, monkeypatch) -> None:
    (tmp_path / "a.jsonl").write_text('{"text": "x"}\n')
    path = write_pipeline(
        tmp_path, 'name: v\ninputs: [{name: s, path: "a.jsonl"}]\noutput: {path: o}\n'
    )
    config = load_pipeline(path)
    monkeypatch.chdir(tmp_path)
    config, out = resolve_run_paths(dataclasses.replace(config, base_dir="."), Path("rel/out"))
    assert out == tmp_path / "rel" / "out" and config.base_dir == str(tmp_path)
    assert config.resolve("a.jsonl") == tmp_path / "a.jsonl"
    uploaded = tmp_path / "session" / "runtime_resources" / "working_dir_files" / "_ray_pkg_1"
    uploaded.mkdir(parents=True)
    monkeypatch.chdir(uploaded)
    with pytest.raises(ClusterError, match="inside the copy of --working-dir"):
        resolve_run_paths(config, Path("out"))
    assert resolve_run_paths(config, tmp_path / "shared")[1] == tmp_path / "shared"


def test_auth_token_lookup_follows_rays_order(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    for var in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(var, raising=False)
    assert not auth_token_available()
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text("t" * 32)
    assert auth_token_available()
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "missing"))
    assert not auth_token_available()  # an explicit path wins over the default file
    monkeypatch.setenv("RAY_AUTH_TOKEN", "secret")
    assert auth_token_available()


def one_big_file(path: Path, records: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for i in range(records):
            text = f"第{i}条：今天天气很好，我们去公园散步，然后回家吃饭。Record {i} talks about a walk."
            f.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")


SPLIT_PIPELINE = """
name: nodes
inputs: [{{name: s, path: "{path}", lang: zh}}]
read: {{split_bytes: 65536}}
ray: {{actors: 2, max_task_retries: 3}}
stages: [{{op: clean}}, {{op: quality_filter}}]
output: {{path: out, format: mds, size_limit: 65536}}
"""


@pytest.mark.ray
@pytest.mark.slow
def test_two_nodes_path_check_then_node_loss(ray_start_cluster, tmp_path: Path) -> None:
    hidden = tmp_path / "hidden"
    one_big_file(hidden / "big.jsonl", 2000)
    head = ray_start_cluster(num_cpus=1)
    second = ray_start_cluster(num_cpus=1, hide=hidden)

    # Node 2 cannot see the input: the run fails before any work, naming node and path.
    blind = tmp_path / "blind.yaml"
    blind.write_text(SPLIT_PIPELINE.format(path=hidden / "big.jsonl"))
    proc = run_cli("run", str(blind), "-o", str(tmp_path / "blind"), "--address", head.address,
                   env=head.env)  # fmt: skip
    assert proc.returncode == 1, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if "cannot see input" in line]
    assert len(lines) == 1 and f"cannot see input {hidden / 'big.jsonl'}" in lines[0], proc.stderr
    assert not list((tmp_path / "blind" / "_work").glob("seg0/*.done"))

    # Node 2's raylet is killed mid-run: identical output, now or after a rerun.
    one_big_file(tmp_path / "seen" / "big.jsonl", 20000)
    pipeline = tmp_path / "nodes.yaml"
    pipeline.write_text(SPLIT_PIPELINE.format(path=tmp_path / "seen" / "big.jsonl"))
    out = tmp_path / "run"
    args = [*CLI, "run", str(pipeline), "-o", str(out), "--address", head.address]
    run = subprocess.Popen(args, env=head.env, stderr=subprocess.PIPE, text=True)
    markers = out / "_work" / "seg0"
    deadline = time.time() + 300
    while len(list(markers.glob("*.done"))) < 2 and run.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    assert run.poll() is None, "the run ended before the node could be lost"
    os.kill(second.raylet_pid(), signal.SIGKILL)
    _, stderr = run.communicate(timeout=600)
    first_rc = run.returncode
    print(f"run with a node lost: exit {first_rc}\n{stderr[-1500:]}")  # which ending it was
    if first_rc != 0:
        assert first_rc == 1 and not (out / "manifest.json").exists(), stderr[-3000:]
        rerun = run_cli(*args[len(CLI) :], env=head.env)
        assert rerun.returncode == 0, rerun.stderr[-3000:]
    reference = tmp_path / "reference"
    run_pipeline(load_pipeline(pipeline), reference, LocalExecutor(), log=lambda m: None)
    assert fingerprint(out) == fingerprint(reference)
    assert fingerprint(out)[1]["total"]["input"] == 20000


@pytest.mark.ray
@pytest.mark.slow
def test_three_nodes_dedup_a_duplicate_heavy_corpus_as_embedded_ray(
    ray_start_cluster, tmp_path: Path
) -> None:
    """A crawl-shaped corpus (30% near-copies of Zipf-drawn originals) on three ``ray start``
    nodes: the same shards as embedded Ray, with the tasks and the dedup index shards on
    every node."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    from recipe_corpus import pipeline_yaml  # noqa: PLC0415
    from scale import NEAR_COPY_SHARE, build_corpus, demo_texts  # noqa: PLC0415

    if not (DEMO / ".done").is_file():
        pytest.fail(f"demo corpus not built ({DEMO}/.done missing): run `make demo-data`")
    corpus = tmp_path / "corpus"
    docs = build_corpus(demo_texts(DEMO), corpus, 3 << 20, dup_share=NEAR_COPY_SHARE)
    pipeline = tmp_path / "dup-heavy.yaml"
    text = pipeline_yaml("dupheavy", corpus, tmp_path / "out", 3).replace(
        "ray: {num_cpus: 3}", "ray: {num_cpus: 3}\nread: {split_bytes: 262144}"
    )
    pipeline.write_text(text)
    head = ray_start_cluster(num_cpus=1)
    nodes = [head, ray_start_cluster(num_cpus=1), ray_start_cluster(num_cpus=1)]
    assert len(nodes) == 3

    embedded = run_cli("run", str(pipeline), "-o", str(tmp_path / "embedded"), env=head.env)
    assert embedded.returncode == 0, embedded.stderr[-3000:]
    joined = run_cli("run", str(pipeline), "-o", str(tmp_path / "joined"), "--address",
                     head.address, env=head.env)  # fmt: skip
    assert joined.returncode == 0, joined.stderr[-3000:]
    assert "(3 nodes, 3 CPUs)" in joined.stderr

    def outcome(out: Path) -> tuple:
        files = sorted((out / "jsonl").glob("*/*.jsonl"))
        records = [line for f in files for line in f.read_text().splitlines()]
        manifest = json.loads((out / "manifest.json").read_text())
        return records, manifest["counts"]

    reference = outcome(tmp_path / "embedded")
    assert reference[1]["total"]["input"] == docs
    total = reference[1]["total"]
    assert len(reference[0]) == total["kept"] > 0
    assert total["dropped"]["dedup:minhash"] > 0.1 * (
        total["kept"] + total["dropped"]["dedup:minhash"]
    )
    assert outcome(tmp_path / "joined") == reference
    runtime = json.loads((tmp_path / "joined" / "manifest.json").read_text())["runtime"]
    assert runtime["nodes"] == 3
    assert len(runtime["tasks_by_node"]) == 3, runtime
    assert len(runtime["barrier_work_by_node"]) == 3, runtime  # index shards SPREAD
    assert sum(runtime["barrier_work_by_node"].values()) == 1 + 3  # the planner, 3 shards
