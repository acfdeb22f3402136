"""quality_classifier models carry their languages: the card lists the languages of the
training documents, records of other languages pass unscored (counted), ``models:``
routes each language to its own model, and validate refuses a mismatch unless told."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dataforge.classifier.model import QualityModel, read_card
from dataforge.cli import main as dataforge_main
from dataforge.config import load_pipeline
from dataforge.runtime.executors.local import LocalExecutor
from dataforge.runtime.pipeline import run_pipeline
from dataforge.runtime.validate import validate_pipeline

PIPELINE = """
name: mixed
inputs:
  - {{name: news, path: "{zh}/pos.jsonl", lang: zh}}
  - {{name: docs, path: "{en}/pos.jsonl", lang: en}}
stages:
  - {{op: quality_classifier, {models}, min_score: 0.5{extra}}}
output: {{path: out, format: jsonl}}
"""


def pipeline(tmp_path: Path, trained, models: str, extra: str = "") -> Path:
    (zh, _), (en, _) = trained("zh"), trained("en")
    path = tmp_path / f"p{abs(hash((models, extra)))}.yaml"
    path.write_text(PIPELINE.format(zh=zh, en=en, models=models, extra=extra), encoding="utf-8")
    return path


def run(path: Path) -> tuple[dict, list[dict]]:
    out = path.parent / f"out-{path.stem}"
    manifest = run_pipeline(load_pipeline(path), out, LocalExecutor(), log=lambda m: None)
    records = []
    for file in sorted(out.rglob("*.jsonl")):
        records += [json.loads(line) for line in file.read_text(encoding="utf-8").splitlines()]
    return manifest, records


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_the_card_lists_the_languages_of_the_training_documents(trained, lang):
    _, model = trained(lang)
    card = read_card(model)
    assert card.langs == (lang,) and card.scope == (lang,)
    docs = sum(c["docs"] - c["empty"] for c in card.counts.values())
    assert card.lang_docs == {lang: docs}
    # inputs given as globs with --lang are of that language (the input default is en)
    assert {i["lang"] for side in card.inputs.values() for i in side} == {lang}


def test_records_of_another_language_pass_unscored_and_are_counted(trained, tmp_path):
    _, zh_model = trained("zh")
    path = pipeline(tmp_path, trained, f'model: "{zh_model}"', ", allow_language_mismatch: true")
    assert validate_pipeline(load_pipeline(path)) == []
    manifest, records = run(path)
    counts = manifest["counts"]["by_source"]
    assert counts["docs"]["kept"] == counts["docs"]["input"] > 0 and counts["docs"]["dropped"] == {}
    assert counts["news"]["dropped"].get("quality_classifier", 0) > 0
    summary = next(s for s in manifest["stages"] if s["op"] == "quality_classifier")["summary"]
    assert summary["sources"]["docs"] == {
        "scored_docs": 0,
        "mean_score": None,
        "unscored": {"en": counts["docs"]["input"]},
    }
    assert "unscored" not in summary["sources"]["news"]
    for r in records:
        assert ("quality_score" in r["meta"]) == (r["lang"] == "zh")


def test_models_send_each_language_to_its_own_model(trained, tmp_path):
    (_, zh_model), (_, en_model) = trained("zh"), trained("en")
    path = pipeline(tmp_path, trained, f'models: {{zh: "{zh_model}", en: "{en_model}"}}')
    assert validate_pipeline(load_pipeline(path)) == []
    _, records = run(path)
    # each record's score is the one its language's model gives its text
    for lang, model in (("zh", zh_model), ("en", en_model)):
        mine = [r for r in records if r["lang"] == lang]
        expected = QualityModel(model).scores([r["text"] for r in mine]).tolist()
        assert mine and [r["meta"]["quality_score"] for r in mine] == expected
    assert {r["lang"] for r in records} == {"zh", "en"}


def test_validate_refuses_a_model_on_a_source_of_another_language(trained, tmp_path, capsys):
    _, zh_model = trained("zh")
    path = pipeline(tmp_path, trained, f'model: "{zh_model}"')
    assert validate_pipeline(load_pipeline(path)) == [
        "stages[0] (quality_classifier): source 'docs' has lang 'en', which no model serves "
        "(models trained on ['zh']); its records would pass unscored: add models: {en: DIR} "
        "or set allow_language_mismatch: true"
    ]
    assert dataforge_main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "source 'docs' has lang 'en'" in err


def test_validate_refuses_a_model_keyed_to_a_language_it_was_not_trained_on(trained, tmp_path):
    _, zh_model = trained("zh")
    models = f'models: {{zh: "{zh_model}", en: "{zh_model}"}}'
    assert validate_pipeline(load_pipeline(pipeline(tmp_path, trained, models))) == [
        f"stages[0] (quality_classifier): models.en {zh_model} was trained on ['zh'], not "
        "'en': give a model of 'en' or set allow_language_mismatch: true"
    ]
    allowed = pipeline(tmp_path, trained, models, ", allow_language_mismatch: true")
    assert validate_pipeline(load_pipeline(allowed)) == []


@pytest.mark.parametrize(
    "params",
    [{"min_score": 0.5}, {"model": "m", "models": {"zh": "m"}, "min_score": 0.5}],
)
def test_one_of_model_or_models(params):
    from dataforge.ops.quality_classifier import QualityClassifier

    with pytest.raises(ValueError, match="give model: DIR or models: {lang: DIR}, one of the two"):
        QualityClassifier.Config(**params)


def test_after_lang_id_the_languages_it_keeps_are_checked(trained):
    from dataforge.ops.base import OpContext
    from dataforge.ops.quality_classifier import QualityClassifier

    _, zh_model = trained("zh")
    config = QualityClassifier.Config(model=str(zh_model), min_score=0.5)
    context = OpContext(sources={"web": "zh"}, record_langs=("zh", "en"))
    assert QualityClassifier(config, context).validate() == [
        "lang_id keeps 'en', which no model serves (models trained on ['zh']); its records "
        "would pass unscored: add models: {en: DIR} or set allow_language_mismatch: true"
    ]
    assert QualityClassifier(config, OpContext(record_langs=("zh",))).validate() == []
