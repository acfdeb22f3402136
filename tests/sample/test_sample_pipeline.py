"""The sample stage inside the real pipeline (in-process executor, no Ray)."""

from __future__ import annotations

import json
from pathlib import Path

from dataforge.config import load_pipeline
from dataforge.io.mds import iter_samples
from dataforge.ops.sample import stream_proportions
from dataforge.runtime.executors.local import LocalExecutor
from dataforge.runtime.pipeline import run_pipeline

PIPELINE = """
    name: sampled
    seed: 7
    max_error_rate: 0.2
    inputs:
      - {name: news_zh, path: "corpus/zh/*.jsonl", lang: zh}
      - {name: docs_en, path: "corpus/en/*.jsonl", lang: en, id_key: doc_id}
    stages:
      - {op: sample, unit: docs, alpha: 0.0, keep_total: true, max_epochs: 4}
    output: {path: out, format: mds, size_limit: 4096, split_by_source: true}
"""


def run(path: Path, out: Path, overrides: list[str] | None = None) -> dict:
    config = load_pipeline(path, overrides)
    return run_pipeline(config, out, LocalExecutor(), log=lambda m: None)


def test_sample_stage_accounting_and_output(small_corpus, write_pipeline, tmp_path):
    path = write_pipeline(tmp_path, PIPELINE)
    manifest = run(path, tmp_path / "out")
    news, docs = (manifest["counts"]["by_source"][s] for s in ("news_zh", "docs_en"))
    # 15 valid news docs and 6 English docs; alpha 0 asks for 10.5 docs of each
    assert news["input"] == 16 and news["dropped"].get("error:json") == 1
    assert news["input"] == news["kept"] + sum(news["dropped"].values())
    assert docs["input"] == docs["kept"] + sum(docs["dropped"].values())
    summary = next(s for s in manifest["stages"] if s.get("op") == "sample")["summary"]
    assert summary["sources"]["news_zh"]["dropped_docs"] == news["dropped"]["sample"]
    assert summary["sources"]["docs_en"]["repeated_docs"] == docs["repeated"] > 0
    samples = list(iter_samples(tmp_path / "out"))
    assert (
        len(samples)
        == manifest["output"]["records"]
        == news["kept"] + docs["kept"] + docs["repeated"]
    )
    by_source = {s: sum(r["source"] == s for r in samples) for s in ("news_zh", "docs_en")}
    # 10.5 is a tie between 10 and 11 documents; ties take fewer, so 20 of the 21 asked for
    assert by_source == {"news_zh": 10, "docs_en": 10}
    assert (summary["requested_units"], summary["realized_units"]) == (21, 20)
    ids = [r["id"] for r in samples]
    assert len(set(ids)) == len(ids)
    assert any(i.startswith("docs_en/") and "#r1" in i for i in ids)
    # the Stream proportions are the shares of the records in each mds/<source>/ stream
    streams = stream_proportions({s: v["output_docs"] for s, v in summary["sources"].items()})
    records = {}
    for entry in streams:
        index = json.loads((tmp_path / "out" / entry["path"] / "index.json").read_text())
        records[entry["source"]] = sum(shard["samples"] for shard in index["shards"])
    assert records == by_source
    assert [e["proportion"] for e in streams] == [records[e["source"]] / 20 for e in streams]
