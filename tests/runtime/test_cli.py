"""CLI contract: every command has --help; exit codes 0 ok, 1 failed, 2 bad usage/config."""

from __future__ import annotations

from pathlib import Path

import pytest

from dataforge.cli import main


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["run"],
        ["validate"],
        ["inspect"],
        ["tokenizer", "train"],
        ["lm", "train"],
        ["train", "pretrain"],
        ["train", "sft"],
        ["train", "dpo"],
    ],
)
def test_every_command_has_help(argv: list[str], capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main([*argv, "--help"])
    assert exc.value.code == 0
    assert "usage: dataforge" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [["--help"], ["-h", "run"], ["--help", "lm"]])
def test_the_top_level_help_lists_every_command_wherever_the_command_stands(argv, capsys):
    """Only the command a line names first loads its module; ``-h run`` is the top level's
    help, which lists them all."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 0
    listed = capsys.readouterr().out
    for command in ("run", "report", "validate", "inspect", "tokenizer", "lm", "train"):
        assert f"    {command} " in listed or f"    {command}\n" in listed, command


def test_unknown_command_is_usage_error() -> None:
    with pytest.raises(SystemExit) as exc:
        main(["frobnicate"])
    assert exc.value.code == 2


def test_validate_exit_codes(pipeline_file: Path, tmp_path: Path, write_pipeline, capsys) -> None:
    assert main(["validate", str(pipeline_file)]) == 0
    assert "ok: small: 2 sources, 5 files" in capsys.readouterr().out
    assert main(["validate", str(pipeline_file), "--set", "inputs.0.path=nope/*.jsonl"]) == 2
    assert "matches no file" in capsys.readouterr().err
    (tmp_path / "bad").mkdir()
    bad = write_pipeline(tmp_path / "bad", "name: x\ninputs: []\noutput: {path: o}\nstagez: []\n")
    assert main(["validate", str(bad)]) == 2
    assert "unknown key(s) ['stagez']" in capsys.readouterr().err


def test_run_with_bad_config_fails_before_ray(pipeline_file: Path, capsys) -> None:
    assert main(["run", str(pipeline_file), "--set", "stages=[{op: nope}]"]) == 2
    assert "unknown op 'nope'" in capsys.readouterr().err


def test_validate_says_which_executor_runs_and_why(
    pipeline_file: Path, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    cpus = ["--set", "ray.num_cpus=3"]
    assert main(["validate", str(pipeline_file), *cpus]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "executor: ray (the default; executor: local or --executor local runs without Ray): "
        "every task runs on the actors of embedded local Ray with 3 CPUs (no --address, "
        "ray.address or RAY_ADDRESS)"
    )
    assert main(["validate", str(pipeline_file), *cpus, "--set", "executor=local"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "executor: local (the pipeline's executor key): every task runs on 3 forked worker "
        "processes on this machine, no Ray"
    )
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    assert main(["validate", str(pipeline_file), "--executor", "ray"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "executor: ray (--executor): every task runs on the actors of the Ray cluster at "
        "10.0.0.1:6379 (from RAY_ADDRESS)"
    )


def test_run_on_local_workers_with_an_address_fails_before_any_work(
    pipeline_file: Path, tmp_path: Path, capsys
) -> None:
    out = ["-o", str(tmp_path / "never")]
    assert main(["run", str(pipeline_file), *out, "--executor", "local", "--address", "a:1"]) == 2
    err = capsys.readouterr().err
    assert err == ("error: executor: local runs no Ray but --address is set; valid: one of them\n")
    assert not (tmp_path / "never").exists()


def test_inspect_of_a_non_dataset_is_usage_error(tmp_path: Path, capsys) -> None:
    assert main(["inspect", str(tmp_path)]) == 2
    assert "no index.json" in capsys.readouterr().err
