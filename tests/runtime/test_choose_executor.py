"""One rule picks the executor and the cluster (``runtime.executors.choose_executor``), and
``dataforge run`` follows it through the ``EXECUTORS`` registry."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from dataforge.cli import main
from dataforge.config import ConfigError, load_pipeline
from dataforge.runtime import executors
from dataforge.runtime.executors import EXECUTORS, ExecutorSpec, choose_executor
from dataforge.runtime.executors.local import LocalExecutor
from dataforge.runtime.pipeline import run_pipeline


@pytest.mark.parametrize(
    ("flag", "key", "env", "joined"),
    [
        ("a:1", "b:2", "c:3", ("a:1", "--address")),
        (None, "b:2", "c:3", ("b:2", "ray.address")),
        (None, None, "c:3", ("c:3", "RAY_ADDRESS")),
    ],
)
def test_ray_joins_the_first_address_named(
    pipeline_file: Path, monkeypatch: pytest.MonkeyPatch, flag, key, env, joined
) -> None:
    monkeypatch.setenv("RAY_ADDRESS", env)
    config = load_pipeline(pipeline_file, [f"ray.address={key}"] if key else [])
    choice = choose_executor("ray", flag, config)
    assert (choice.name, choice.address) == ("ray", joined[0])
    assert choice.why == (
        f"executor: ray (--executor): every task runs on the actors of the Ray cluster at "
        f"{joined[0]} (from {joined[1]})"
    )


def test_local_joins_nothing_and_refuses_an_address(
    pipeline_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAY_ADDRESS", "c:3")  # meant for Ray runs: a local run ignores it
    config = load_pipeline(pipeline_file, ["executor=local", "ray.num_cpus=2"])
    choice = choose_executor(None, None, config)
    assert (choice.name, choice.address) == ("local", None)
    assert choice.why == (
        "executor: local (the pipeline's executor key): every task runs on 2 forked worker "
        "processes on this machine, no Ray"
    )
    with pytest.raises(ConfigError, match="^executor: local runs no Ray but ray.address is set"):
        choose_executor(
            None,
            None,
            dataclasses.replace(config, ray=dataclasses.replace(config.ray, address="b:2")),
        )
    with pytest.raises(ConfigError, match="^executor 'spark' is not valid; valid: ray, local$"):
        choose_executor("spark", None, config)


def test_run_calls_the_registered_executor_with_the_chosen_cluster(
    pipeline_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """An executor is one registry entry: the CLI runs the chosen entry with the cluster the
    choice named (here in this process, so no Ray starts)."""
    calls = []

    def run_here(config, out, address, **kwargs):
        calls.append(address)
        return run_pipeline(config, out, LocalExecutor(), **kwargs)

    spec = ExecutorSpec(place=EXECUTORS["ray"].place, run=run_here)
    monkeypatch.setitem(executors.EXECUTORS, "ray", spec)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    out = tmp_path / "out"
    argv = ["run", str(pipeline_file), "-o", str(out), "--progress", "off"]
    assert main([*argv, "--address", "10.0.0.1:6379"]) == 0
    assert main(argv) == 0  # the same run again: complete, nothing to do
    assert calls == ["10.0.0.1:6379", None]
    err = capsys.readouterr().err
    assert "every task runs on the actors of the Ray cluster at 10.0.0.1:6379" in err
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["output"]["path"] == "mds"
