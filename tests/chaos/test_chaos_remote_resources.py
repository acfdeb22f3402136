"""A tokenizer or model at a URI that cannot be fetched is a config problem: ``validate``
and ``run`` say it in one line naming the location, exit 2, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from chaos_kit import write_lines

from dataforge.cli import main

STAGES = {
    "tokenize": "{op: tokenize, tokenizer: 's3://no-bucket/tokenizers/bpe'}",
    "quality_classifier": "{op: quality_classifier, model: 's3://no-bucket/qc', min_score: 0.5}",
}


@pytest.mark.parametrize("op", sorted(STAGES))
def test_an_unreachable_s3_resource_is_one_line_exit_2(
    op: str, tmp_path: Path, write_pipeline, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    write_lines(tmp_path / "in" / "a.jsonl", ["a document"])
    pipeline = write_pipeline(
        tmp_path,
        f"""
        name: n
        inputs: [{{name: s, path: "in/*.jsonl"}}]
        stages: [{STAGES[op]}]
        output: {{path: out}}
        """,
    )
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "id")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "key")
    uri = "s3://no-bucket/tokenizers/bpe" if op == "tokenize" else "s3://no-bucket/qc"
    for command in ("validate", "run"):
        assert main([command, str(pipeline)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1, err
        assert err[0].startswith(f"error: stages[0] ({op}): ")
        assert f"{uri}: cannot reach the storage endpoint http://127.0.0.1:9" in err[0]
    assert not (tmp_path / "out").exists()
