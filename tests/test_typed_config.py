"""The typed-config module shared by pipeline, tokenizer spec and trainer configs."""

from __future__ import annotations

import dataclasses
from typing import Literal

import pytest

from dataforge.typed_config import (
    ConfigError,
    apply_overrides,
    from_mapping,
    load_yaml,
    read_yaml_file,
    to_plain,
)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1e-6", 1e-6),
        ("1E+3", 1000.0),
        ("-2.5e3", -2500.0),
        ("3.0e-4", 3e-4),
        (".5", 0.5),
        ("1_000.5", 1000.5),
        ("-.inf", float("-inf")),
        ("12", 12),
        ("0x1f", 31),
        ("1e", "1e"),
        ("e5", "e5"),
        ("1.2.3", "1.2.3"),
        ("'1e-6'", "1e-6"),
    ],
)
def test_yaml_1_2_numbers(text: str, value: object) -> None:
    parsed = load_yaml(f"x: {text}")["x"]
    assert parsed == value and type(parsed) is type(value)


def test_python_tags_are_refused(tmp_path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("x: !!python/object/apply:os.system ['true']\n")
    with pytest.raises(ConfigError, match="no python tags"):
        read_yaml_file(path, "config")


@dataclasses.dataclass(frozen=True)
class _Inner:
    rate: float = 0.1
    mode: Literal["a", "b"] = "a"


@dataclasses.dataclass(frozen=True)
class _Outer:
    name: str
    inner: _Inner = _Inner()
    table: dict[str, _Inner] = dataclasses.field(default_factory=dict)
    sizes: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("name must not be empty")


def test_from_mapping_types_nested_values_and_names_the_path() -> None:
    raw = load_yaml("name: n\ninner: {rate: 1e-3}\ntable: {zh: {mode: b}}\nsizes: [1, 2]")
    config = from_mapping(_Outer, raw, "c.yaml")
    assert config == _Outer("n", _Inner(1e-3), {"zh": _Inner(mode="b")}, (1, 2))
    assert to_plain(config) == {
        "name": "n",
        "inner": {"rate": 1e-3, "mode": "a"},
        "table": {"zh": {"rate": 0.1, "mode": "b"}},
        "sizes": [1, 2],
    }
    cases = [
        (
            {"name": "n", "table": {"zh": {"rate": "abc"}}},
            "c.yaml.table.zh.rate: expected a number",
        ),
        (
            {"name": "n", "inner": {"mode": "c"}},
            "c.yaml.inner.mode: 'c' is not valid; valid: 'a', 'b'",
        ),
        ({"name": "n", "sizes": [1, "2"]}, "c.yaml.sizes[1]: expected an integer"),
        ({"name": "n", "extra": 1}, "c.yaml: unknown key(s) ['extra']; valid: "),
        ({}, "c.yaml: missing required key 'name'"),
        ({"name": ""}, "c.yaml: name must not be empty"),
    ]
    for raw, message in cases:
        with pytest.raises(ConfigError) as info:
            from_mapping(_Outer, raw, "c.yaml")
        assert message in str(info.value)


def test_overrides_parse_yaml_1_2_values() -> None:
    raw = {"stages": [{"op": "a"}, {"op": "b"}], "optim": {}}
    apply_overrides(raw, ["stages.1.threshold=1e-2", "optim.lr=3E-4"], "c.yaml")
    assert raw == {"stages": [{"op": "a"}, {"op": "b", "threshold": 0.01}], "optim": {"lr": 3e-4}}
    with pytest.raises(ConfigError, match="not an index of a 2-item list"):
        apply_overrides(raw, ["stages.5.x=1"], "c.yaml")


def test_every_config_reads_yaml_1_2_numbers(tmp_path) -> None:
    """Pipeline and trainer configs alike: ``1e-6`` is a number, not a string."""
    from dataforge.config import load_pipeline
    from trainer.config import load_config

    (tmp_path / "a.jsonl").write_text('{"text": "x"}\n')
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(
        "name: t\nmax_error_rate: 1e-3\ninputs: [{name: a, path: a.jsonl}]\noutput: {path: out}\n"
    )
    assert load_pipeline(pipeline).max_error_rate == 1e-3
    trainer = tmp_path / "t.yaml"
    trainer.write_text(
        "model: {preset: tiny, vocab_size: 64}\noptim: {lr: 1e-3, weight_decay: 1E-1}\n"
        "data: {source: synthetic}\n"
    )
    config = load_config(trainer)
    assert (config.optim.lr, config.optim.weight_decay) == (1e-3, 0.1)


def test_choices_are_written_once_and_checked_on_direct_construction() -> None:
    """A Literal field is checked when built in code too (``check_choices``), with the
    choices taken from the Literal itself."""
    from dataforge.config import OutputConfig
    from dataforge.io.input_config import INPUT_FORMATS, InputConfig
    from dataforge.loader.config import MODES

    assert INPUT_FORMATS == ("jsonl", "parquet", "txt", "warc", "wet", "html")
    assert MODES == ("pretrain", "sft", "dpo")
    with pytest.raises(ValueError, match="format='csv' is not valid; valid: 'jsonl', 'parquet'"):
        InputConfig(name="a", path="x", format="csv")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="txt_unit='page' is not valid"):
        InputConfig(name="a", path="x", txt_unit="page")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="format='csv' is not valid; valid: 'mds'"):
        OutputConfig(path="out", format="csv")  # type: ignore[arg-type]
