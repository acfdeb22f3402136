"""Readers: every physical record becomes one row, kept or dropped with a reason."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from dataforge.config import ConfigError, InputConfig, OutputConfig, PipelineConfig, ReadConfig
from dataforge.io.readers import InputTask, ReadError, TaskReader, plan_input_tasks


def read_all(
    path: Path, source: InputConfig | None = None, read: ReadConfig | None = None
) -> list[dict]:
    source = source or InputConfig(name="s", path=str(path), lang="en")
    task = InputTask("000-000000", source.name, str(path), path.name, path.stat().st_size)
    reader = TaskReader(task, source, read or ReadConfig(batch_rows=3))
    rows = [r for b in reader.batches() for r in b.to_pylist()]
    assert [r["_ord"] for r in rows] == list(range(len(rows)))
    return rows


def test_jsonl_bad_records_are_counted_not_lost(tmp_path: Path) -> None:
    lines = [
        json.dumps({"text": "good one"}),
        "{not json",
        json.dumps({"body": "no text key"}),
        json.dumps({"text": 42}),
        json.dumps({"text": "   "}),
        json.dumps(["a list"]),
        json.dumps({"text": "nul\u0000inside"}),
        "",
    ]
    path = tmp_path / "x.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    rows = read_all(path)
    assert [r["drop"] for r in rows] == [
        None,
        "error:json",
        "error:missing_text",
        "error:text_type",
        "empty",
        "error:json_not_object",
        None,
        "error:json_blank_line",
    ]
    assert rows[0]["id"] == "s/x.jsonl:1"
    assert rows[6]["text"] == "nul\u0000inside"  # NUL survives reading; clean removes it


def test_invalid_utf8_replace_counts_and_drop_mode(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b'{"text": "ok"}\n{"text": "bad \xff\xfe bytes"}\n{"text": "after"}\n')
    src = InputConfig(name="s", path=str(path))
    task = InputTask("t", "s", str(path), "bad.jsonl", 1)
    reader = TaskReader(task, src, ReadConfig())
    rows = [r for b in reader.batches() for r in b.to_pylist()]
    assert [r["text"] for r in rows] == ["ok", "bad \ufffd bytes", "after"]
    assert reader.events["invalid_utf8_replaced"] == 1
    rows = read_all(path, src, ReadConfig(invalid_utf8="drop"))
    assert [r["drop"] for r in rows] == [None, "invalid_utf8", None]


def test_cr_only_line_endings_and_txt_units(tmp_path: Path) -> None:
    path = tmp_path / "mac.txt"
    path.write_bytes(b"first line\rsecond line\r\rfourth\r\n")
    rows = read_all(path, InputConfig(name="s", path=str(path), format="txt"))
    assert [(r["text"], r["drop"]) for r in rows] == [
        ("first line", None),
        ("second line", None),
        ("", "empty"),
        ("fourth", None),
    ]
    assert rows[3]["id"] == "s/mac.txt:4"
    paras = read_all(
        path, InputConfig(name="s", path=str(path), format="txt", txt_unit="paragraph")
    )
    assert [r["text"] for r in paras] == ["first line\nsecond line", "fourth"]
    whole = read_all(path, InputConfig(name="s", path=str(path), format="txt", txt_unit="file"))
    assert [r["text"] for r in whole] == ["first line\nsecond line\n\nfourth\n"]


def test_huge_single_line_is_dropped_with_bounded_memory(tmp_path: Path) -> None:
    path = tmp_path / "huge.jsonl"
    with open(path, "w") as f:
        f.write(json.dumps({"text": "before"}) + "\n")
        f.write('{"text": "' + "x" * (100 * 1024 * 1024) + '"}\n')
        f.write(json.dumps({"text": "after"}) + "\n")
    import tracemalloc

    tracemalloc.start()
    rows = read_all(path, read=ReadConfig(max_doc_chars=100_000))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert [(r["text"], r["drop"]) for r in rows] == [
        ("before", None),
        ("", "too_long"),
        ("after", None),
    ]
    assert peak < 20 * 1024 * 1024  # the 100 MB line was never held whole


def test_compressed_inputs_and_truncated_zstd(tmp_path: Path) -> None:
    data = b"".join(json.dumps({"text": f"doc {i}"}).encode() + b"\n" for i in range(100))
    gz = tmp_path / "a.jsonl.gz"
    gz.write_bytes(gzip.compress(data))
    zst = tmp_path / "a.jsonl.zst"
    zst.write_bytes(zstandard.ZstdCompressor().compress(data))
    assert [r["text"] for r in read_all(gz)] == [f"doc {i}" for i in range(100)]
    assert [r["text"] for r in read_all(zst)] == [f"doc {i}" for i in range(100)]
    truncated = tmp_path / "cut.jsonl.zst"
    truncated.write_bytes(zst.read_bytes()[:-7])
    with pytest.raises(ReadError, match="cut.jsonl.zst"):
        read_all(truncated)


def test_empty_file_and_duplicate_ids(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert read_all(empty) == []
    dup = tmp_path / "dup.jsonl"
    dup.write_text(
        "\n".join(json.dumps({"id": k, "text": f"t{i}"}) for i, k in enumerate("abac")) + "\n"
    )
    rows = read_all(dup, InputConfig(name="s", path=str(dup), id_key="id"))
    assert [(r["id"], r["drop"]) for r in rows] == [
        ("s/a", None),
        ("s/b", None),
        ("s/a", "duplicate_id"),
        ("s/c", None),
    ]


def test_parquet_reader_with_meta_and_missing_column(tmp_path: Path) -> None:
    path = tmp_path / "p.parquet"
    pq.write_table(pa.table({"content": ["x", None, "z"], "url": ["u1", "u2", "u3"]}), path)
    src = InputConfig(
        name="s", path=str(path), format="parquet", text_key="content", meta_keys=("url",)
    )
    rows = read_all(path, src)
    assert [(r["text"], r["drop"]) for r in rows] == [
        ("x", None),
        ("", "error:text_type"),
        ("z", None),
    ]
    assert json.loads(rows[2]["meta"]) == {"url": "u3"}
    with pytest.raises(ReadError, match="no column"):
        read_all(path, InputConfig(name="s", path=str(path), format="parquet"))


def test_nonexistent_glob_is_a_config_error(tmp_path: Path) -> None:
    config = PipelineConfig(
        name="x",
        inputs=(InputConfig(name="s", path="nothing/*.jsonl"),),
        output=OutputConfig(path="out"),
        base_dir=str(tmp_path),
    )
    with pytest.raises(ConfigError, match="matches no file"):
        plan_input_tasks(config)


def test_task_ids_and_relpaths_are_stable(small_corpus: Path, pipeline_file: Path) -> None:
    from dataforge.config import load_pipeline

    tasks = plan_input_tasks(load_pipeline(pipeline_file))
    assert [(t.task_id, t.source, t.relpath) for t in tasks] == [
        ("000-000000", "news_zh", "part-0.jsonl"),
        ("000-000001", "news_zh", "part-1.jsonl"),
        ("000-000002", "news_zh", "part-2.jsonl"),
        ("001-000000", "docs_en", "docs-0.jsonl"),
        ("001-000001", "docs_en", "docs-1.jsonl"),
    ]


def test_lone_surrogate_escapes_become_replacement_chars(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text('{"text": "a\\ud800b", "t": "\\udfff"}\n{"text": "\\ud83d\\ude00 ok"}\n')
    src = InputConfig(name="s", path=str(path), meta_keys=("t",))
    reader = TaskReader(InputTask("t", "s", str(path), "s.jsonl", 1), src, ReadConfig())
    rows = [r for b in reader.batches() for r in b.to_pylist()]
    assert [r["text"] for r in rows] == ["a\ufffdb", "\U0001f600 ok"]
    assert json.loads(rows[0]["meta"]) == {"t": "\ufffd"}
    assert reader.events["lone_surrogates_replaced"] == 1
