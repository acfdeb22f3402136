"""One document iterator and one file/id rule for the pipeline, `lm train` and `tokenizer train`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dataforge.config import InputConfig, OutputConfig, PipelineConfig
from dataforge.io.documents import iter_documents
from dataforge.io.files import match_files
from dataforge.io.formats.registry import format_for_suffix
from dataforge.io.readers import TaskReader, plan_input_tasks
from dataforge.lm.corpus import read_documents
from dataforge.tokenization.corpus import iter_records


def _write(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


@pytest.fixture()
def corpus(tmp_path: Path) -> Path:
    _write(tmp_path / "c" / "a" / "x.jsonl", [{"text": "one"}, {"text": ""}, {"text": "two"}])
    _write(tmp_path / "c" / "b" / "x.jsonl", [{"text": "three"}, {"no_text": 1}])
    return tmp_path / "c"


def test_ids_are_glob_relative_everywhere(corpus: Path) -> None:
    pattern = str(corpus / "**" / "*.jsonl")
    docs = [
        (i, t)
        for batch in iter_documents(pattern, source="s", id_key=None)
        for i, t in zip(batch["id"].to_pylist(), batch["text"].to_pylist(), strict=True)
    ]
    # same-named files in two folders keep distinct ids; empty / text-less records are skipped
    assert docs == [("s/a/x.jsonl:1", "one"), ("s/a/x.jsonl:3", "two"), ("s/b/x.jsonl:1", "three")]
    lm = [i for b in read_documents(pattern, id_key=None) for i in b["id"].to_pylist()]
    assert lm == ["lm/a/x.jsonl:1", "lm/a/x.jsonl:3", "lm/b/x.jsonl:1"]
    tok = [i for i, _ in iter_records([pattern], id_key=None)]
    assert tok == ["tokenizer/a/x.jsonl:1", "tokenizer/a/x.jsonl:3", "tokenizer/b/x.jsonl:1"]
    # the pipeline's planner + reader give the same ids for a source of the same name
    config = PipelineConfig(
        name="t",
        inputs=(InputConfig(name="s", path=pattern),),
        output=OutputConfig(path=str(corpus / "out")),
    )
    run_ids = []
    for task in plan_input_tasks(config):
        for batch in TaskReader(task, config.inputs[0], config.read).batches():
            run_ids += [
                i
                for i, d in zip(batch["id"].to_pylist(), batch["drop"].to_pylist(), strict=True)
                if d is None
            ]
    assert run_ids == [i for i, _ in docs]


def test_one_suffix_rule(tmp_path: Path) -> None:
    assert [format_for_suffix(n) for n in ("a.JSONL.ZST", "b.parquet", "c.txt", "d.json")] == [
        "jsonl",
        "parquet",
        "txt",
        "jsonl",
    ]
    (tmp_path / "a.jsonl").write_text('{"text": "x"}\n')
    (tmp_path / "b.csv").write_text("text\nx\n")
    with pytest.raises(ValueError, match=r"b\.csv: unknown input format; valid suffixes: .jsonl"):
        next(iter_documents(str(tmp_path / "*"), source="s"))
    with pytest.raises(ValueError, match="unknown input format"):
        next(read_documents(str(tmp_path / "*")))
    with pytest.raises(FileNotFoundError, match="matches no file"):
        match_files(str(tmp_path / "*.parquet"))
