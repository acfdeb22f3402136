"""Config loading is strict and its errors name the file, key and valid choices."""

from __future__ import annotations

from pathlib import Path

import pytest

from dataforge.config import ConfigError, config_sha256, load_pipeline

BASE = """
name: t
inputs:
  - {name: a, path: "x.jsonl"}
output: {path: out}
"""


def test_minimal_config_defaults(write_pipeline, tmp_path: Path) -> None:
    config = load_pipeline(write_pipeline(tmp_path, BASE))
    assert config.inputs[0].format == "jsonl" and config.output.format == "mds"
    assert config.base_dir == str(tmp_path.resolve())


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("bogus: 1\n", r"unknown key\(s\) \['bogus'\]; valid: .*'inputs'"),
        ("stages:\n  - {op: frobnicate}\n", r"unknown op 'frobnicate'; valid ops: .*clean"),
        ("ray: {adress: x}\n", r"ray: unknown key\(s\) \['adress'\]; valid: .*'address'"),
        ("seed: high\n", r"seed: expected an integer, got 'high'"),
        ("max_error_rate: 2\n", r"max_error_rate must be in \[0, 1\]"),
        ("read: {invalid_utf8: ignore}\n", r"'ignore' is not valid; valid: 'replace', 'drop'"),
    ],
)
def test_bad_configs_name_key_and_choices(
    write_pipeline, tmp_path: Path, extra: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        load_pipeline(write_pipeline(tmp_path, BASE + extra))


def test_python_tags_are_refused(write_pipeline, tmp_path: Path) -> None:
    body = BASE + "seed: !!python/object/apply:os.system ['echo pwned']\n"
    with pytest.raises(ConfigError, match="no python tags"):
        load_pipeline(write_pipeline(tmp_path, body))


def test_output_format_choices(write_pipeline, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="valid: 'mds', 'parquet', 'jsonl'"):
        load_pipeline(
            write_pipeline(tmp_path, BASE.replace("{path: out}", "{path: out, format: csv}"))
        )


def test_overrides_and_sha(write_pipeline, tmp_path: Path) -> None:
    path = write_pipeline(tmp_path, BASE)
    a = load_pipeline(path)
    b = load_pipeline(path, ["seed=5", "inputs.0.lang=zh", "output.keep_work=true"])
    assert (b.seed, b.inputs[0].lang, b.output.keep_work) == (5, "zh", True)
    assert config_sha256(a) != config_sha256(b)
    c = load_pipeline(path, ["output.keep_work=true", "output.path=elsewhere"])
    assert config_sha256(a) == config_sha256(c)  # neither changes the output data
    with pytest.raises(ConfigError, match="is not an index"):
        load_pipeline(path, ["inputs.3.lang=zh"])
