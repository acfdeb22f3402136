"""The input format seam: a format added from this file alone (one class, one registry
entry) is validated, planned, split and read by a whole pipeline run; an unknown format
is refused naming the registered ones."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dataforge.cli import main
from dataforge.config import load_pipeline
from dataforge.io.formats.lines import LineFormat
from dataforge.io.formats.registry import FORMATS
from dataforge.io.input_config import INPUT_FORMATS, InputConfig
from dataforge.runtime.executors.local import LocalExecutor
from dataforge.runtime.pipeline import run_pipeline


class TsvFormat(LineFormat):
    """``<key>\\t<text>`` per line; the key goes to ``meta.key``. Split at line ends like
    every line format."""

    name = "tsv"
    suffixes = (".tsv",)

    def line_row(self, reader: Any, row: dict[str, Any], line: str) -> dict[str, Any]:
        key, tab, text = line.partition("\t")
        if not tab:
            row["drop"] = "tsv:no_tab"
            return row
        row["meta"] = json.dumps({"key": key})
        return reader.with_text(row, text)


PIPELINE = """\
name: tsv
inputs:
  - {{name: tab, path: "{root}/in/*.tsv", format: {fmt}, lang: en}}
read: {{split_bytes: 1024}}
stages:
  - {{op: clean}}
output: {{path: {root}/out, format: jsonl}}
"""


@pytest.fixture
def tsv(monkeypatch):
    monkeypatch.setitem(FORMATS, "tsv", TsvFormat())


def write_pipeline(root: Path, fmt: str) -> Path:
    path = root / "tsv.yaml"
    path.write_text(PIPELINE.format(root=root, fmt=fmt))
    return path


def test_registry_lists_the_formats():
    assert INPUT_FORMATS == ("jsonl", "parquet", "txt", "warc", "wet", "html")
    assert all(fmt.name == name for name, fmt in FORMATS.items())


def test_a_new_format_runs_a_pipeline_end_to_end(tsv, tmp_path):
    lines = [f"k{i:03d}\tdocument number {i} has a few more words" for i in range(60)]
    lines[7] = "no tab on this line"
    lines[20] = "k020\t   "
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.tsv").write_text("\n".join(lines) + "\n")
    assert (tmp_path / "in" / "a.tsv").stat().st_size > 2048  # three splits of 1024 bytes

    config = load_pipeline(write_pipeline(tmp_path, "tsv"))
    manifest = run_pipeline(config, tmp_path / "out", LocalExecutor(), log=lambda m: None)

    counts = manifest["counts"]["by_source"]["tab"]
    assert counts["input"] == 60 and counts["kept"] == 58
    assert counts["dropped"] == {"tsv:no_tab": 1, "empty": 1}
    splits = [task["task_id"] for task in manifest["inputs"]]
    assert splits == [f"000-000000-{k:06d}" for k in range(3)]
    parts = sorted((tmp_path / "out" / "jsonl").glob("*/data.jsonl"))
    records = [json.loads(line) for part in parts for line in part.read_text().splitlines()]
    expected = [
        {"id": f"tab/a.tsv:{i + 1}", "text": f"document number {i} has a few more words",
         "source": "tab", "lang": "en", "meta": {"key": f"k{i:03d}"}}
        for i in range(60) if i not in (7, 20)
    ]  # fmt: skip
    assert [{k: r[k] for k in expected[0]} for r in records] == expected


def test_an_unknown_format_is_refused_naming_the_valid_ones(tmp_path, capsys):
    with pytest.raises(ValueError, match="format='tsv' is not valid; valid: 'jsonl', 'parquet', "
                       "'txt', 'warc', 'wet', 'html'$"):  # fmt: skip
        InputConfig(name="a", path="x", format="tsv")
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.tsv").write_text("k\tv\n")
    assert main(["validate", str(write_pipeline(tmp_path, "tsv"))]) == 2
    err = capsys.readouterr().err
    assert "inputs[0]: format='tsv' is not valid; valid: 'jsonl', 'parquet', 'txt'" in err


def test_a_registered_format_is_valid(tsv):
    assert InputConfig(name="a", path="x", format="tsv").format == "tsv"
