"""``dataforge classifier train``: held-out quality, the card, determinism, YAML inputs."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from dataforge.classifier.features import FEATURES, FeatureMaker
from dataforge.classifier.model import read_card
from dataforge.classifier.train import auc, is_heldout
from dataforge.cli import main as dataforge_main

from .conftest import train


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_clean_against_corrupted_text_reaches_auc(trained, lang, capsys):
    corpus, model = trained(lang)
    card = read_card(model)
    assert card.heldout["auc"] >= 0.95
    assert card.features == FEATURES and card.lang == lang
    assert card.hyperparameters["thread"] == 1 and card.hyperparameters["epoch"] == 20
    for name in ("positive", "negative"):
        c = card.counts[name]
        lines = (corpus / f"{name[:3]}.jsonl").read_text(encoding="utf-8").splitlines()
        assert c["docs"] == len(lines) == c["train"] + c["heldout"] + c["empty"]
        assert card.inputs[name][0]["path"] == str(corpus / f"{name[:3]}.jsonl")
    rows = [json.loads(line) for line in (model / "heldout.jsonl").read_text().splitlines()]
    assert len(rows) == card.heldout["docs"] == sum(card.counts[n]["heldout"] for n in card.counts)
    labels = np.array([r["label"] for r in rows], bool)
    scores = np.array([r["score"] for r in rows])
    assert auc(labels, scores) == card.heldout["auc"]
    predicted = scores >= 0.5
    assert card.heldout["precision"] == (predicted & labels).sum() / predicted.sum()
    assert card.heldout["recall"] == (predicted & labels).sum() / labels.sum()


def test_training_is_deterministic_for_a_seed_with_one_thread(trained, tmp_path):
    corpus, model = trained("en")
    pos, neg = str(corpus / "pos.jsonl"), str(corpus / "neg.jsonl")
    assert train(pos, neg, tmp_path / "again", "en") == 0
    assert sha(tmp_path / "again" / "model.bin") == sha(model / "model.bin")
    assert (tmp_path / "again" / "heldout.jsonl").read_text() == (
        model / "heldout.jsonl"
    ).read_text()
    assert train(pos, neg, tmp_path / "seed1", "en", "--seed", "1") == 0
    assert sha(tmp_path / "seed1" / "model.bin") != sha(model / "model.bin")


def test_yaml_inputs_entries_read_as_a_pipeline_does(trained, tmp_path):
    """The same documents in GB18030 under a pipeline inputs: entry give the same model."""
    corpus, model = trained("en")
    data = tmp_path / "data"
    data.mkdir()
    for name in ("pos", "neg"):
        text = (corpus / f"{name}.jsonl").read_text(encoding="utf-8")
        (data / f"{name}.jsonl").write_bytes(text.encode("gb18030"))
    # the glob form names its inputs positive0 / negative0 and derives ids from file:line
    (tmp_path / "train.yaml").write_text(
        "positive: [{name: positive0, path: data/pos.jsonl, encoding: gb18030}]\n"
        "negative: [{name: negative0, path: data/neg.jsonl, encoding: gb18030}]\n"
        "out: yaml-model\nlang: en\n",
        encoding="utf-8",
    )
    assert dataforge_main(["classifier", "train", str(tmp_path / "train.yaml")]) == 0
    assert sha(tmp_path / "yaml-model" / "model.bin") == sha(model / "model.bin")
    card = read_card(tmp_path / "yaml-model")
    assert card.inputs["positive"][0]["encoding"] == "gb18030"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["train", "--positive", "x.jsonl", "--out", "o"], "negative: give --negative GLOB"),
        (["train", "--positive", "a", "--negative", "b"], "out: give --out DIR"),
    ],
)
def test_bad_usage_exits_2_with_one_line(argv, message, capsys):
    assert dataforge_main(["classifier", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_a_glob_matching_nothing_exits_2(tmp_path, capsys):
    argv = ["train", "--positive", str(tmp_path / "none*.jsonl"), "--negative", "x"]
    assert dataforge_main(["classifier", *argv, "--out", str(tmp_path / "m")]) == 2
    assert "matches no file" in capsys.readouterr().err


def test_yaml_unknown_key_names_it(tmp_path, capsys):
    (tmp_path / "t.yaml").write_text(
        "positive: [{name: a, path: a.jsonl, txt_units: file}]\nnegative: [{name: b, path: b}]\n"
        "out: m\n"
    )
    assert dataforge_main(["classifier", "train", str(tmp_path / "t.yaml")]) == 2
    assert "positive[0]: unknown key(s) ['txt_units']" in capsys.readouterr().err


def test_features_normalize_and_segment_chinese():
    maker = FeatureMaker("zh", "rjieba")
    assert maker.lines(["我爱北京天安门。\n\n  ＡＢＣ 123 "]) == ["我 爱 北京 天安门. ａｂｃ 000"]
    assert FeatureMaker("en").lines(["Hello,   World!\nNEXT line", None]) == [
        "hello, world! next line",
        "",
    ]


def test_heldout_split_is_a_property_of_the_id():
    ids = [f"doc{i}" for i in range(2000)]
    held = is_heldout(ids, 0, 0.1)
    assert 150 < held.sum() < 250
    assert (is_heldout(ids[::-1], 0, 0.1)[::-1] == held).all()


def test_auc_counts_ties_as_half():
    assert auc(np.array([1, 0]), np.array([0.5, 0.5])) == 0.5
    assert auc(np.array([1, 1, 0, 0]), np.array([0.9, 0.2, 0.3, 0.1])) == 0.75
