"""Hostile YAML is refused in one bounded line, exit 2, before any work (issue 31 case 5):
alias bombs, deep nesting (file and ``--set``), recursive aliases, duplicate keys."""

from __future__ import annotations

from pathlib import Path

import pytest
from chaos_kit import write_lines

from dataforge.cli import main
from dataforge.typed_config import ConfigError, load_yaml, read_yaml_file
from trainer.config import load_config

TAIL = 'inputs: [{name: s, path: "in/*.jsonl", lang: zh}]\noutput: {path: out}\n'


def _laughs(levels: int) -> str:
    """Aliased lists nested ``levels`` deep, each nine times the one below: 9**levels nodes."""
    lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels):
        lines.append(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]")
    return "\n".join(lines) + "\n"


def _validate(tmp_path: Path, body: str, *extra: str, capsys) -> tuple[int, list[str]]:
    write_lines(tmp_path / "in" / "a.jsonl", ["一篇文档"])
    path = tmp_path / "pipeline.yaml"
    path.write_text(body, encoding="utf-8")
    code = main(["validate", str(path), *extra])
    return code, capsys.readouterr().err.strip().splitlines()


def test_billion_laughs_is_refused_by_its_expanded_size(tmp_path: Path, capsys) -> None:
    # Nine levels: 9**9 = 387 million strings once expanded; the file is 1 KB.
    body = _laughs(9).replace("l8: &l8", "name:")
    code, err = _validate(tmp_path, body + TAIL, capsys=capsys)
    assert code == 2 and len(err) == 1, err
    # l5 is the first list past 100 000 nodes (9**6 = 531 441), on line 6.
    assert (
        err[0]
        == f"error: {tmp_path / 'pipeline.yaml'}:6: aliases expand to more than 100000 nodes (limit)"
    )


def test_a_large_aliased_value_is_quoted_in_a_bounded_line(tmp_path: Path, capsys) -> None:
    # Five levels (59 049 nodes) are under the budget; `name` must be a string.
    levels = ['&l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    levels += [f"&l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 5)]
    body = f"name: [{', '.join(levels)}]\n"
    code, err = _validate(tmp_path, body + TAIL, capsys=capsys)
    assert code == 2 and len(err) == 1, err
    prefix = f"error: {tmp_path / 'pipeline.yaml'}.name: expected a string, got [['lol', "
    assert err[0].startswith(prefix) and err[0].endswith("...")
    assert len(err[0]) == len(prefix) - len("[['lol', ") + 200  # the value cut to 200 chars


@pytest.mark.parametrize("where", ["file", "--set"])
def test_500_levels_of_nesting_are_one_line(tmp_path: Path, where: str, capsys) -> None:
    deep = "[" * 500 + "]" * 500
    if where == "file":
        code, err = _validate(tmp_path, f"name: {deep}\n" + TAIL, capsys=capsys)
        expected = f"{tmp_path / 'pipeline.yaml'}:1: nesting deeper than 100 levels (limit)"
    else:
        code, err = _validate(tmp_path, "name: n\n" + TAIL, "--set", f"name={deep}", capsys=capsys)
        expected = "--set 'name': value:1: nesting deeper than 100 levels (limit)"
    assert code == 2 and err == [f"error: {expected}"]


def test_a_500_part_set_key_path_is_one_line(tmp_path: Path, capsys) -> None:
    key = ".".join(["stages"] * 500)
    code, err = _validate(tmp_path, "name: n\n" + TAIL, "--set", f"{key}=1", capsys=capsys)
    assert code == 2 and len(err) == 1 and "key path deeper than 100 levels (limit)" in err[0]
    assert len(err[0]) < 300


def test_aliases_that_nest_past_the_depth_limit_are_refused() -> None:
    # Each anchor wraps the previous one 60 levels deeper: composed nesting stays under
    # 100, the expanded nesting reaches 180.
    body = "a: &a " + "[" * 60 + "1" + "]" * 60 + "\n"
    body += "b: &b " + "[" * 60 + "*a" + "]" * 60 + "\n"
    body += "c: " + "[" * 60 + "*b" + "]" * 60 + "\n"
    with pytest.raises(Exception, match="nesting deeper than 100 levels .limit. once aliases"):
        load_yaml(body)


def test_a_recursive_alias_is_refused(tmp_path: Path, capsys) -> None:
    code, err = _validate(tmp_path, "name: &n [*n]\n" + TAIL, capsys=capsys)
    assert code == 2 and err == [f"error: {tmp_path / 'pipeline.yaml'}:1: recursive alias"]


def test_a_duplicate_key_is_refused_naming_both_lines(tmp_path: Path, capsys) -> None:
    body = "name: n\n" + TAIL + "seed: 1\noutput: {path: elsewhere}\n"
    code, err = _validate(tmp_path, body, capsys=capsys)
    path = tmp_path / "pipeline.yaml"
    assert code == 2 and err == [f"error: {path}:5: duplicate key 'output' (first at line 3)"]
    assert not (tmp_path / "elsewhere").exists()


def test_duplicate_keys_compare_as_values_and_merges_may_override() -> None:
    with pytest.raises(Exception, match=r"duplicate key '0x1' \(first at line 1\)"):
        load_yaml("1: a\n0x1: b\n")
    # `<<` merges a mapping whose keys the mapping itself then overrides: not duplicates.
    assert load_yaml("base: &b {x: 1, y: 2}\nd: {<<: *b, x: 3}\n")["d"] == {"x": 3, "y": 2}


def test_a_trainer_config_with_a_duplicate_key_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text("optim:\n  lr: 0.1\n  lr: 10\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"t.yaml:3: duplicate key 'lr' \(first at line 2\)$"):
        load_config(path)


def test_config_errors_are_one_bounded_line(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("x: [1,\n  2\n", encoding="utf-8")  # a syntax error spread over lines
    with pytest.raises(ConfigError) as info:
        read_yaml_file(path, "config")
    assert "\n" not in str(info.value) and str(info.value).startswith(f"{path}:")
    long_key = "k" * 100_000
    error = ConfigError(f"x: unknown key {long_key}\nsecond line")
    assert len(str(error)) == 600 and "\n" not in str(error)
    assert str(error).endswith("...")
