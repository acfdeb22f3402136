"""Input splits: large files become several tasks whose records are those of the file."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dataforge.cli import main
from dataforge.config import ConfigError, InputConfig, ReadConfig, load_pipeline
from dataforge.inspect import iter_samples
from dataforge.io.readers import InputTask, TaskReader
from dataforge.io.splits import split_task
from dataforge.runtime.executors.local import LocalExecutor
from dataforge.runtime.pipeline import run_pipeline


def file_task(path: Path) -> InputTask:
    return InputTask("000-000007", "s", str(path), path.name, path.stat().st_size)


def read_tasks(tasks: list[InputTask], source: InputConfig) -> list[tuple]:
    rows = []
    for task in tasks:
        reader = TaskReader(task, source, ReadConfig(batch_rows=7))
        rows += [(r["id"], r["text"], r["drop"]) for b in reader.batches() for r in b.to_pylist()]
    return rows


def mixed_line_file(path: Path) -> bytes:
    """JSONL with CRLF and LF line ends, a blank and a broken line, a long line, a lone CR
    line end, and no final newline."""
    parts = []
    for i in range(400):
        text = json.dumps({"text": f"第{i}行 line {i} " + "x" * (i % 37)}, ensure_ascii=False)
        end = "\r\n" if i % 3 == 0 else "\n"
        if i == 100:
            text = ""
        if i == 200:
            text = '{"text": "broken'
        if i == 250:
            text += "\r" + json.dumps({"text": "after a lone CR"})
        parts.append(text + end)
    data = ("".join(parts) + json.dumps({"text": "last, no newline"})).encode()
    path.write_bytes(data)
    return data


@pytest.mark.parametrize("split_bytes", [1024, 1500, 4096, 65536])
def test_line_splits_number_lines_as_the_whole_file(tmp_path: Path, split_bytes: int) -> None:
    path = tmp_path / "mixed.jsonl"
    data = mixed_line_file(path)
    source = InputConfig(name="s", path=str(path))
    whole = read_tasks([file_task(path)], source)
    splits = split_task(file_task(path), source, split_bytes)
    assert read_tasks(splits, source) == whole
    assert whole[-1][0] == "s/mixed.jsonl:402" and whole[-1][1] == "last, no newline"
    if split_bytes < len(data):
        assert len(splits) > 1
        assert [t.task_id for t in splits] == sorted(t.task_id for t in splits)
        assert sum(t.length for t in splits) == len(data)
        assert all(data[t.offset - 1 : t.offset] == b"\n" for t in splits[1:])
    else:
        assert splits == [file_task(path)]


def test_a_line_ending_exactly_at_the_boundary_starts_the_next_split(tmp_path: Path) -> None:
    path = tmp_path / "exact.txt"
    # 16 lines of 64 bytes each (63 chars and "\n"): line 16 ends exactly at byte 1024.
    lines = [f"{i:02d}" + "a" * 61 + "\n" for i in range(16)] + ["tail line\n", "end"]
    path.write_text("".join(lines))
    source = InputConfig(name="s", path=str(path), format="txt")
    splits = split_task(file_task(path), source, 1024)
    assert splits[1].offset == 1024 and splits[1].first_record == 16
    assert read_tasks(splits, source) == read_tasks([file_task(path)], source)
    assert read_tasks(splits[1:], source)[0][:2] == ("s/exact.txt:17", "tail line")


def test_parquet_splits_by_row_groups(tmp_path: Path) -> None:
    path = tmp_path / "rows.parquet"
    texts = [f"document number {i} " * (1 + i % 5) for i in range(3000)]
    pq.write_table(pa.table({"text": texts}), path, row_group_size=250)
    source = InputConfig(name="s", path=str(path), format="parquet")
    splits = split_task(file_task(path), source, 4096)
    assert len(splits) > 2
    assert [g for t in splits for g in t.row_groups] == list(range(12))
    assert read_tasks(splits, source) == read_tasks([file_task(path)], source)


def test_compressed_paragraph_and_non_utf8_files_stay_one_task(tmp_path: Path) -> None:
    gz = tmp_path / "big.jsonl.gz"
    with gzip.open(gz, "wt") as f:
        for i in range(3000):
            f.write(json.dumps({"text": f"doc {i} {i * i}"}) + "\n")
    source = InputConfig(name="s", path=str(gz))
    assert gz.stat().st_size > 1024 and split_task(file_task(gz), source, 1024) == [file_task(gz)]
    txt = tmp_path / "paras.txt"
    txt.write_text("para one\nstill one\n\npara two\n" * 200)
    para = InputConfig(name="s", path=str(txt), format="txt", txt_unit="paragraph")
    assert split_task(file_task(txt), para, 1024) == [file_task(txt)]
    gbk = InputConfig(name="s", path=str(txt), format="txt", encoding="gbk")
    assert split_task(file_task(txt), gbk, 1024) == [file_task(txt)]  # decoded per file
    utf8 = InputConfig(name="s", path=str(txt), format="txt", encoding="UTF8")
    assert len(split_task(file_task(txt), utf8, 1024)) > 1


def test_split_bytes_is_validated(tmp_path: Path, write_pipeline) -> None:
    (tmp_path / "a.jsonl").write_text('{"text": "x"}\n')
    body = 'name: v\ninputs: [{name: s, path: "a.jsonl"}]\noutput: {path: out}\n'
    path = write_pipeline(tmp_path, body)
    with pytest.raises(ConfigError, match=r"read.split_bytes=100; valid range: >= 1024"):
        load_pipeline(path, ["read.split_bytes=100"])
    assert load_pipeline(path, ["read.split_bytes=null"]).read.split_bytes is None


def big_corpus(root: Path) -> None:
    """One ~150 KB JSONL file (CRLF, duplicates for dedup), one gzip file, one parquet."""
    root.mkdir(parents=True)
    lines = []
    for i in range(1200):
        text = f"这是第{i % 1000}篇文章，讨论城市交通和公园建设的问题。Document {i % 1000} is about parks."
        lines.append(json.dumps({"text": text}, ensure_ascii=False))
    (root / "big.jsonl").write_bytes(("\r\n".join(lines) + "\r\n").encode())
    with gzip.open(root / "small.jsonl.gz", "wt", encoding="utf-8") as f:
        for i in range(400):
            f.write(
                json.dumps({"text": f"Compressed document {i * 7919 % 4099} on trains."}) + "\n"
            )
    texts = [f"Parquet row {i} describes a package for parsing data files." for i in range(600)]
    pq.write_table(pa.table({"text": texts}), root / "rows.parquet", row_group_size=100)


PIPELINE = """
name: splits
seed: 3
inputs:
  - {name: big, path: "corpus/*.jsonl*", lang: zh}
  - {name: rows, path: "corpus/*.parquet", format: parquet, lang: en}
stages:
  - {op: clean}
  - {op: dedup, method: minhash}
  - {op: sample, alpha: 0.5, unit: docs, keep_total: true}
output: {path: out, format: mds, size_limit: 8192}
"""


def test_output_does_not_depend_on_the_split_size(tmp_path: Path, write_pipeline) -> None:
    big_corpus(tmp_path / "corpus")
    path = write_pipeline(tmp_path, PIPELINE)
    results = {}
    for split in ("null", "1024", "65536"):
        config = load_pipeline(path, [f"read.split_bytes={split}"])
        out = tmp_path / f"out-{split}"
        manifest = run_pipeline(config, out, LocalExecutor(), log=lambda m: None)
        results[split] = (manifest["counts"], list(iter_samples(out)), len(manifest["inputs"]))
    counts, samples, n_tasks = results["null"]
    assert n_tasks == 3 and results["1024"][2] > 100 and 3 < results["65536"][2] < 10
    assert counts["total"]["input"] == 2200 and counts["total"]["dropped"]["dedup:minhash"] > 0
    for split in ("1024", "65536"):
        assert results[split][0] == counts
        assert results[split][1] == samples


class _CrashBefore(LocalExecutor):
    """Runs segment 0 except one task, then dies (as a killed driver would)."""

    def __init__(self, task_id: str) -> None:
        self.task_id = task_id

    def run_segment(self, config, segment, work_dir, tasks, log) -> None:
        super().run_segment(
            config, segment, work_dir, [t for t in tasks if t["task_id"] != self.task_id], log
        )
        raise KeyboardInterrupt("simulated kill")


def test_resume_redoes_only_the_missing_split(tmp_path: Path, write_pipeline) -> None:
    big_corpus(tmp_path / "corpus")
    path = write_pipeline(tmp_path, PIPELINE)
    config = load_pipeline(path, ["read.split_bytes=8192"])
    reference = run_pipeline(config, tmp_path / "ref", LocalExecutor(), log=lambda m: None)
    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        run_pipeline(config, out, _CrashBefore("000-000000-000004"), log=lambda m: None)
    done = sorted(p.name for p in (out / "_work" / "seg0").glob("*.done"))
    assert "000-000000-000003.done" in done and "000-000000-000004.done" not in done
    logs: list[str] = []
    resumed = run_pipeline(config, out, LocalExecutor(), log=logs.append)
    assert any(m.startswith("segment 0: 1 of ") for m in logs), logs
    assert resumed["counts"] == reference["counts"]
    assert list(iter_samples(out)) == list(iter_samples(tmp_path / "ref"))


def test_validate_says_which_files_stay_one_task(tmp_path: Path, write_pipeline, capsys) -> None:
    big_corpus(tmp_path / "corpus")
    path = write_pipeline(tmp_path, PIPELINE)
    assert main(["validate", str(path), "--set", "read.split_bytes=1024"]) == 0
    out = capsys.readouterr().out
    assert "3 files" in out and "small.jsonl.gz (compressed single stream" in out


def test_duplicate_ids_across_splits_drop_as_in_the_whole_file(
    tmp_path: Path, write_pipeline
) -> None:
    records = [
        {"id": f"doc{i}", "text": f"Text number {i} about a quiet walk."} for i in range(600)
    ]
    records[550]["id"] = "doc3"  # a repeat far from the first: another split
    records[551]["id"] = "doc549"  # ...and one near its first
    records[20]["id"] = "doc19"  # a repeat within the first split
    records[570] = {"id": "doc571", "text": "{broken"}  # dropped while reading: no claim
    lines = [
        json.dumps(r) if "{" not in r["text"] else '{"id": "doc571", "text": ' for r in records
    ]
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "ids.jsonl").write_text("\n".join(lines) + "\n")
    path = write_pipeline(
        tmp_path,
        """
        name: ids
        max_error_rate: 0.5
        inputs: [{name: s, path: "corpus/ids.jsonl", id_key: id}]
        output: {path: out, format: jsonl}
        """,
    )
    results = {}
    for split in ("null", "1024", "4096"):
        config = load_pipeline(path, [f"read.split_bytes={split}"])
        manifest = run_pipeline(config, tmp_path / split, LocalExecutor(), log=lambda m: None)
        results[split] = (manifest["counts"], list(iter_samples_jsonl(tmp_path / split)))
    counts, rows = results["null"]
    assert counts["by_source"]["s"]["dropped"] == {"duplicate_id": 3, "error:json": 1}
    assert results["1024"] == results["null"] == results["4096"]
    assert [r["id"] for r in rows].count("s/doc3") == 1 and len(rows) == 596


def iter_samples_jsonl(out: Path) -> list[dict]:
    return [json.loads(line) for p in sorted(out.glob("jsonl/**/data.jsonl")) for line in open(p)]
