"""The quality_classifier op in the real pipeline (in-process executor, no Ray)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dataforge.config import load_pipeline
from dataforge.runtime.executors.local import LocalExecutor
from dataforge.runtime.pipeline import run_pipeline
from dataforge.runtime.validate import validate_pipeline

PIPELINE = """
    name: scored
    seed: 3
    inputs:
      - {{name: positive0, path: "{corpus}/pos.jsonl", lang: {lang}}}
      - {{name: negative0, path: "{corpus}/neg.jsonl", lang: {lang}}}
    read: {{split_bytes: {split}}}
    stages:
      - {{op: quality_classifier, model: "{model}", {keep}}}
    output: {{path: out, format: jsonl}}
"""


class ReversedExecutor(LocalExecutor):
    """Runs the tasks in reverse order: a result that depends on task order would change."""

    def run_segment(self, config, segment, work_dir, tasks, on_task) -> None:
        super().run_segment(config, segment, work_dir, list(reversed(tasks)), on_task)


def run(tmp_path: Path, corpus: Path, model: Path, lang: str, keep: str, split="null", ex=None):
    text = PIPELINE.format(corpus=corpus, model=model, lang=lang, keep=keep, split=split)
    path = tmp_path / f"p{abs(hash((keep, split, type(ex).__name__)))}.yaml"
    path.write_text(text, encoding="utf-8")
    out = tmp_path / f"out-{path.stem}"
    manifest = run_pipeline(load_pipeline(path), out, ex or LocalExecutor(), log=lambda m: None)
    records = []
    for file in sorted(out.rglob("*.jsonl")):
        records += [json.loads(line) for line in file.read_text(encoding="utf-8").splitlines()]
    return manifest, records


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_op_reproduces_the_training_heldout_scores_exactly(trained, tmp_path, lang):
    corpus, model = trained(lang)
    _, records = run(tmp_path, corpus, model, lang, "min_score: 0.0")
    scored = {r["id"]: r["meta"]["quality_score"] for r in records}
    heldout = [json.loads(line) for line in (model / "heldout.jsonl").read_text().splitlines()]
    assert heldout and all(scored[h["id"]] == h["score"] for h in heldout)
    labels = records[0]["meta"]["quality_labels"]
    assert set(labels) == {"hq", "lq"} and labels["hq"] == records[0]["meta"]["quality_score"]


def test_min_score_drops_with_the_reason_and_counts_add_up(trained, tmp_path):
    corpus, model = trained("en")
    manifest, records = run(tmp_path, corpus, model, "en", "min_score: 0.5")
    assert all(r["meta"]["quality_score"] >= 0.5 for r in records)
    total_dropped = 0
    for counts in manifest["counts"]["by_source"].values():
        assert counts["input"] == counts["kept"] + sum(counts["dropped"].values())
        assert set(counts["dropped"]) <= {"quality_classifier"}
        total_dropped += counts["dropped"].get("quality_classifier", 0)
    assert total_dropped > 0 and len(records) == sum(
        c["kept"] for c in manifest["counts"]["by_source"].values()
    )


def test_keep_top_is_the_same_for_any_split_and_task_order(trained, tmp_path):
    corpus, model = trained("en")
    manifest, one_task = run(tmp_path, corpus, model, "en", "keep_top: 0.3")
    _, split = run(tmp_path, corpus, model, "en", "keep_top: 0.3", split=8192)
    _, reversed_split = run(
        tmp_path, corpus, model, "en", "keep_top: 0.3", split=4096, ex=ReversedExecutor()
    )
    ids = sorted(r["id"] for r in one_task)
    assert ids == sorted(r["id"] for r in split) == sorted(r["id"] for r in reversed_split)
    summary = next(s for s in manifest["stages"] if s["op"] == "quality_classifier")["summary"]
    for source, counts in manifest["counts"]["by_source"].items():
        kept = round(0.3 * counts["input"])
        assert counts["kept"] == kept == summary["sources"][source]["kept_docs"]
        scores = [r["meta"]["quality_score"] for r in one_task if r["source"] == source]
        assert min(scores) >= summary["sources"][source]["cut_score"]


def test_validate_names_a_missing_model(trained, tmp_path):
    corpus, _ = trained("en")
    text = PIPELINE.format(
        corpus=corpus, model=tmp_path / "nope", lang="en", keep="min_score: 0.5", split="null"
    )
    (tmp_path / "p.yaml").write_text(text)
    problems = validate_pipeline(load_pipeline(tmp_path / "p.yaml"))
    assert problems == [
        f"stages[0] (quality_classifier): model: {tmp_path / 'nope'}: no model.bin; train one "
        f"with `dataforge classifier train --out {tmp_path / 'nope'}`"
    ]


@pytest.mark.parametrize(
    "params, message",
    [
        ({"model": "m"}, "give min_score, max_score or keep_top"),
        ({"model": "m", "keep_top": 0.5, "min_score": 0.2}, "not both"),
        ({"model": "m", "keep_top": 1.5}, "keep_top must be in (0, 1]"),
        ({"model": "m", "min_score": 0.2, "name": "Edu"}, "name 'Edu'"),
    ],
)
def test_config_errors(params, message):
    from dataforge.ops.quality_classifier import QualityClassifier

    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        QualityClassifier.Config(**params)


def test_two_models_with_their_own_names_and_thresholds(trained, tmp_path):
    corpus, model = trained("en")
    keep = (
        "min_score: 0.2}\n      - {op: quality_classifier, "
        f'model: "{model}", name: spam, max_score: 0.9'
    )
    manifest, records = run(tmp_path, corpus, model, "en", keep)
    reasons = {}
    for counts in manifest["counts"]["by_source"].values():
        for reason, n in counts["dropped"].items():
            reasons[reason] = reasons.get(reason, 0) + n
    assert set(reasons) == {"quality_classifier", "quality_classifier:spam"}
    for r in records:
        assert r["meta"]["quality_score"] >= 0.2 and r["meta"]["spam_score"] <= 0.9
        assert r["meta"]["spam_score"] == r["meta"]["quality_score"]  # the same model twice
