"""Sample's Config rules, its YAML spelling, pipeline checks and Stream proportions."""

from __future__ import annotations

import textwrap

import pytest

from dataforge.config import ConfigError, StageConfig, load_pipeline
from dataforge.ops.base import OpContext
from dataforge.ops.sample import Sample, check_pipeline, stream_proportions


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"alpha": 0.5, "temperature": 2.0, "keep_total": True}, "not both"),
        ({"alpha": -0.1, "keep_total": True}, "alpha"),
        ({"temperature": 0.0, "keep_total": True}, "temperature"),
        ({}, "exactly one of target"),
        ({"target": 10, "keep_total": True}, "exactly one of target"),
        ({"target": 0}, "positive"),
        ({"target": 10, "max_epochs": 0.5}, "max_epochs"),
        ({"target": 10, "weights": {"a": -1.0}}, "weights.a"),
    ],
)
def test_bad_configs_are_rejected(params, message):
    with pytest.raises(ValueError, match=message):
        Sample.Config(**params)


def sample_pipeline_file(tmp_path, stages: str):
    path = tmp_path / "p.yaml"
    path.write_text(
        textwrap.dedent(
            """\
            name: t
            seed: 7
            inputs:
              - {name: news_zh, path: a.jsonl, lang: zh}
              - {name: docs_en, path: b.jsonl, lang: en}
            output: {path: out}
            stages:
            """
        )
        + textwrap.indent(textwrap.dedent(stages), "  ")
    )
    return path


def test_yaml_from_the_issue_loads_and_is_checked_against_the_pipeline(tmp_path):
    path = sample_pipeline_file(
        tmp_path,
        """\
        - op: sample
          alpha: 0.7
          unit: tokens
          target: 50_000_000
          weights: {news_zh: 2.0}
          max_epochs: 4
          seed: 1234
        """,
    )
    config = load_pipeline(path)
    sample = config.stages[0].params
    assert sample == Sample.Config(
        alpha=0.7,
        unit="tokens",
        target=50_000_000,
        weights={"news_zh": 2.0},
        max_epochs=4.0,
        seed=1234,
    )
    problems = check_pipeline(list(config.stages), 0)
    assert len(problems) == 1 and "unit: tokens needs a tokenize stage" in problems[0]


def test_yaml_errors_name_the_valid_choices(tmp_path):
    with pytest.raises(ConfigError, match="'tokens', 'docs', 'chars'"):
        load_pipeline(
            sample_pipeline_file(tmp_path, "- {op: sample, unit: words, keep_total: true}\n")
        )
    with pytest.raises(ConfigError, match="not both"):
        load_pipeline(
            sample_pipeline_file(tmp_path, "- {op: sample, alpha: 1, temperature: 1, target: 5}\n")
        )


def stage(op, **params):
    return StageConfig(op=op, params=Sample.Config(**params) if op == "sample" else None)


def test_unit_tokens_needs_tokenize_before_sample():
    problems = check_pipeline([stage("clean"), stage("sample", unit="tokens", keep_total=True)], 1)
    assert len(problems) == 1 and "tokenize stage earlier" in problems[0]
    after = check_pipeline([stage("sample", unit="tokens", keep_total=True), stage("tokenize")], 0)
    assert len(after) == 1 and "stages[1] tokenize runs after it" in after[0]
    assert (
        check_pipeline([stage("tokenize"), stage("sample", unit="tokens", keep_total=True)], 1)
        == []
    )
    assert check_pipeline([stage("sample", unit="chars", keep_total=True)], 0) == []


def test_validate_flags_unknown_and_all_zero_weights():
    ctx = OpContext(sources={"news_zh": "zh", "docs_en": "en"})
    unknown = Sample(Sample.Config(keep_total=True, weights={"news": 2.0}), ctx).validate()
    assert len(unknown) == 1 and "'news'" in unknown[0]
    zero = Sample(Sample.Config(keep_total=True, weights={"news_zh": 0.0, "docs_en": 0.0}), ctx)
    assert "weight 0" in zero.validate()[0]
    assert Sample(Sample.Config(keep_total=True, weights={"news_zh": 2.0}), ctx).validate() == []


def test_stream_proportions_count_samples_and_skip_empty_sources():
    written = {"news_zh": 300, "empty": 0, "docs_en": 100}
    assert stream_proportions(written) == [
        {"source": "news_zh", "path": "mds/news_zh", "proportion": 0.75},
        {"source": "docs_en", "path": "mds/docs_en", "proportion": 0.25},
    ]


def test_dataforge_validate_rejects_unit_tokens_without_tokenize(tmp_path, capsys):
    from dataforge.cli import main

    (tmp_path / "a.jsonl").write_text('{"text": "新年讲话"}\n', encoding="utf-8")
    (tmp_path / "b.jsonl").write_text('{"text": "Return a new sorted list."}\n', encoding="utf-8")
    bad = sample_pipeline_file(tmp_path, "- {op: sample, unit: tokens, keep_total: true}\n")
    assert main(["validate", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "stages[0] (sample): unit: tokens needs a tokenize stage" in err
    good = sample_pipeline_file(tmp_path, "- {op: sample, unit: chars, alpha: 0.5, target: 9}\n")
    assert main(["validate", str(good)]) == 0
    weights = sample_pipeline_file(tmp_path, "- {op: sample, keep_total: true, weights: {x: 1}}\n")
    assert main(["validate", str(weights)]) == 2
    assert "stages[0] (sample): weights for unknown source(s) ['x']" in capsys.readouterr().err
