"""OpenCC script conversion: OpenCC's own test cases convert exactly, in batches."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pyarrow as pa
import pytest

from dataforge.config import ConfigError, load_pipeline
from dataforge.ops.clean import Clean
from dataforge.runtime.executors.local import LocalExecutor
from dataforge.runtime.pipeline import run_pipeline
from dataforge.text.script import CONVERSIONS, convert_script

CASES = Path(__file__).resolve().parents[1] / "fixtures" / "opencc_cases.tsv"


def opencc_cases() -> dict[str, list[tuple[str, str]]]:
    by_conversion: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for line in CASES.read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            conversion, source, expected = line.split("\t")
            by_conversion[conversion].append((source, expected))
    return by_conversion


def test_opencc_known_pairs_convert_exactly() -> None:
    cases = opencc_cases()
    assert sum(map(len, cases.values())) == 556
    assert set(cases) == set(CONVERSIONS)
    for conversion, pairs in cases.items():
        got = convert_script(pa.array([s for s, _ in pairs] + [None, "no han"]), conversion)
        assert got.to_pylist() == [e for _, e in pairs] + [None, "no han"], conversion


def test_clean_convert_counts_changed_records_as_an_event() -> None:
    op = Clean(Clean.Config(convert="t2s"))
    texts = ["頭髮很乾燥。", "已经是简体", "plain English", "發現新的理論"]
    batch = pa.table(
        {
            "text": texts,
            "lang": ["zh"] * 4,
            "meta": ["{}"] * 4,
            "drop": pa.array([None] * 4, pa.string()),
        }
    )
    out = op(batch)
    assert out["text"].to_pylist() == [
        "头发很干燥。",
        "已经是简体",
        "plain English",
        "发现新的理论",
    ]
    assert op.events == {"convert:t2s": 2}


def test_unknown_conversion_is_a_config_error(tmp_path: Path, write_pipeline) -> None:
    body = 'name: c\ninputs: [{name: a, path: "*.jsonl"}]\noutput: {path: o}\n'
    body += "stages: [{op: clean, convert: t2x}]\n"
    with pytest.raises(ConfigError, match="conversion 't2x' is not valid; valid: t2s, s2t"):
        load_pipeline(write_pipeline(tmp_path, body))


def test_pipeline_manifest_counts_conversions(tmp_path: Path, write_pipeline) -> None:
    (tmp_path / "in.jsonl").write_text(
        '{"text": "頭髮很乾燥。"}\n{"text": "简体中文"}\n{"text": "後來發現"}\n', encoding="utf-8"
    )
    body = 'name: c\ninputs: [{name: a, path: "in.jsonl", lang: zh}]\noutput: {path: o, format: jsonl}\n'
    body += "stages: [{op: clean, convert: t2s}]\n"
    manifest = run_pipeline(
        load_pipeline(write_pipeline(tmp_path, body)), tmp_path / "o", LocalExecutor(), log=print
    )
    assert manifest["counts"]["by_source"]["a"]["events"] == {"convert:t2s": 2}
    out = (tmp_path / "o" / "jsonl").rglob("*.jsonl")
    texts = sorted(line for f in out for line in f.read_text(encoding="utf-8").splitlines())
    assert [t for t in texts if "头发" in t or "后来发现" in t] and not any(
        "頭" in t for t in texts
    )
