"""The bad-input corpus through every reader path, failed tasks in one or two lines, and a
full disk mid-run (cases 9 and the corpus of the issue)."""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard
from chaos_kit import assert_accounted, mount_tmpfs, output_ids, run_local, snapshot, write_lines

from dataforge.cli import main
from dataforge.io.mds import iter_samples
from dataforge.runtime.failures import RunFailed

BAD_LINES = [
    b'{"text": "a good record"}\n',
    b'{"text": "broken\n',  # invalid JSON
    b"\n",  # blank line
    b"[1, 2, 3]\n",  # an array
    b'{"other": "no text key"}\n',
    b'{"text": 5}\n',  # non-string text
    b'{"text": "escaped \\u0000 NUL"}\n',
    b'{"text": "raw \x00 NUL"}\n',  # a control character JSON forbids
    b'{"text": "invalid \xff\xfe UTF-8"}\n',
    b'{"text": "a CRLF line"}\r\n',
    b'{"text": "   "}\n',  # empty after stripping
    b'{"text": "no final newline"}',
]


def _pipeline(tmp_path: Path, write_pipeline, inputs: str, extra: str = "") -> Path:
    return write_pipeline(
        tmp_path,
        f"""
        name: chaos
        max_error_rate: 1.0
        inputs: {inputs}
        output: {{path: out, rejects: true}}
        {extra}
        """,
    )


def test_bad_jsonl_corpus_every_record_accounted(tmp_path: Path, write_pipeline) -> None:
    corpus = tmp_path / "in"
    corpus.mkdir()
    (corpus / "bad.jsonl").write_bytes(b"".join(BAD_LINES))
    (corpus / "empty.jsonl").write_bytes(b"")
    (corpus / "bom.jsonl").write_bytes(b'\xef\xbb\xbf{"text": "after a BOM"}\n{"text": "2nd"}\n')
    with open(corpus / "huge.jsonl", "wb") as f:  # a 50 MB line between two good ones
        f.write(b'{"text": "before"}\n{"text": "' + b"x" * (50 << 20) + b'"}\n{"text": "after"}\n')
    (corpus / "bad.jsonl.gz").write_bytes(gzip.compress(b"".join(BAD_LINES)))
    (corpus / "bad.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(b"".join(BAD_LINES)))
    before = snapshot(corpus)
    path = _pipeline(tmp_path, write_pipeline, '[{name: s, path: "in/*"}]')
    manifest = run_local(path, tmp_path / "out")
    assert_accounted(manifest)
    counts = manifest["counts"]["by_source"]["s"]
    per_copy = {"error:json": 2, "error:json_blank_line": 1, "error:json_not_object": 1,
                "error:missing_text": 1, "error:text_type": 1, "empty": 1}  # fmt: skip
    assert counts["input"] == 3 * len(BAD_LINES) + 3 + 2
    assert counts["dropped"] == {**{k: 3 * v for k, v in per_copy.items()}, "too_long": 1}
    assert counts["kept"] == 3 * 5 + 2 + 2 and counts["events"]["invalid_utf8_replaced"] == 3
    assert counts["events"]["bom_stripped"] == 1
    texts = [s["text"] for s in iter_samples(tmp_path / "out")]
    assert texts.count("a CRLF line") == 3 and texts.count("no final newline") == 3
    assert "invalid \ufffd UTF-8" in texts and "before" in texts and "after" in texts
    assert "after a BOM" in texts
    assert len(output_ids(tmp_path / "out")) == counts["kept"]
    assert snapshot(corpus) == before


@pytest.mark.parametrize("kind", ["gz", "zst"])
def test_truncated_input_fails_in_one_line_with_trace(
    tmp_path: Path, write_pipeline, kind: str
) -> None:
    data = b"".join(json.dumps({"text": f"doc {i}"}).encode() + b"\n" for i in range(5000))
    packed = gzip.compress(data) if kind == "gz" else zstandard.ZstdCompressor().compress(data)
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / f"cut.jsonl.{kind}").write_bytes(packed[: len(packed) // 2])
    path = _pipeline(tmp_path, write_pipeline, '[{name: s, path: "in/*"}]',
                     "read: {batch_rows: 500}")  # fmt: skip
    with pytest.raises(RunFailed) as failed:
        run_local(path, tmp_path / "out")
    first, second = str(failed.value).splitlines()
    assert re.search(
        rf"cut.jsonl.{kind}, (after record \d+|before its first record)\): ReadError", first
    )
    assert "truncated" in first or "corrupt" in first
    trace = Path(second.removeprefix("full trace: "))
    assert trace.parent == tmp_path / "out" / "logs" and "Traceback" in trace.read_text()
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_wrong_parquet_schema_names_the_columns(tmp_path: Path, write_pipeline) -> None:
    (tmp_path / "in").mkdir()
    pq.write_table(pa.table({"body": ["x"]}), tmp_path / "in" / "p.parquet")
    path = _pipeline(tmp_path, write_pipeline, '[{name: s, path: "in/*.parquet", format: parquet}]')
    with pytest.raises(
        RunFailed, match=r"p.parquet.*no column\(s\) \['text'\]; columns: \['body'\]"
    ):
        run_local(path, tmp_path / "out")


def test_glob_matching_nothing_is_a_usage_error(tmp_path: Path, write_pipeline, capsys) -> None:
    path = _pipeline(tmp_path, write_pipeline, '[{name: s, path: "in/*.jsonl"}]')
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "inputs[0] (s): path 'in/*.jsonl' matches no file" in err[0]


@pytest.mark.slow
def test_full_disk_fails_in_one_line_and_resumes_identically(
    tmp_path: Path, write_pipeline
) -> None:
    disk = tmp_path / "disk"
    if os.geteuid() != 0 or not mount_tmpfs(disk, "400k"):
        pytest.skip("needs root and `mount -t tmpfs` to make a small full disk")
    try:
        for f in range(8):
            texts = [f"file {f} document {i} " + "内容" * 200 for i in range(60)]
            write_lines(tmp_path / "in" / f"f{f}.jsonl", texts)
        path = write_pipeline(
            tmp_path,
            """
            name: disk
            inputs: [{name: s, path: "in/*.jsonl", lang: zh}]
            output: {path: out, compression: null, size_limit: 65536}
            """,
        )
        before = snapshot(tmp_path / "in")
        with pytest.raises(RunFailed) as failed:
            run_local(path, disk / "out")
        lines = str(failed.value).splitlines()
        assert len(lines) <= 2 and "no space left on device" in lines[0]
        assert str(disk / "out") in lines[0]
        assert not (disk / "out" / "manifest.json").exists()
        subprocess.run(["mount", "-o", "remount,size=64m", str(disk)], check=True)
        manifest = run_local(path, disk / "out")
        assert_accounted(manifest)
        reference = run_local(path, tmp_path / "reference")
        assert list(iter_samples(disk / "out")) == list(iter_samples(tmp_path / "reference"))
        assert manifest["counts"] == reference["counts"]
        assert snapshot(tmp_path / "in") == before
    finally:
        subprocess.run(["umount", str(disk)], check=False)


TXT = (
    b"first line\r\nsecond \xff line\n\n\nafter blanks \x00 NUL\r\n" + b"y" * (5 << 20) + b"\nlast"
)


@pytest.mark.parametrize(
    ("unit", "kept", "dropped"),
    [
        ("line", 4, {"empty": 2, "too_long": 1}),
        ("paragraph", 3, {"too_long": 1}),
        ("file", 0, {"empty": 1, "too_long": 1}),  # an empty file is one empty document
    ],
)
def test_bad_txt_corpus_every_unit(
    tmp_path: Path, write_pipeline, unit: str, kept: int, dropped: dict
) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.txt").write_bytes(TXT)
    (tmp_path / "in" / "empty.txt").write_bytes(b"")
    before = snapshot(tmp_path / "in")
    path = _pipeline(tmp_path, write_pipeline,
                     f'[{{name: s, path: "in/*.txt", format: txt, txt_unit: {unit}}}]',
                     "read: {max_doc_chars: 1000000}")  # fmt: skip
    manifest = run_local(path, tmp_path / "out")
    assert_accounted(manifest)
    counts = manifest["counts"]["by_source"]["s"]
    assert (counts["kept"], counts["dropped"]) == (kept, dropped)
    assert len(output_ids(tmp_path / "out")) == kept and snapshot(tmp_path / "in") == before


def test_bad_parquet_corpus(tmp_path: Path, write_pipeline) -> None:
    (tmp_path / "in").mkdir()
    pq.write_table(pa.table({"text": ["good", None, "", "bad \udcff".encode(errors="surrogatepass")
                                      .decode("utf-8", "replace"), "x" * 2000]}),
                   tmp_path / "in" / "a.parquet")  # fmt: skip
    pq.write_table(pa.table({"text": pa.array([1, 2], pa.int64())}), tmp_path / "in" / "b.parquet")
    pq.write_table(pa.table({"text": pa.array([], pa.string())}), tmp_path / "in" / "c.parquet")
    path = _pipeline(tmp_path, write_pipeline,
                     '[{name: s, path: "in/*.parquet", format: parquet}]',
                     "read: {max_doc_chars: 1000}")  # fmt: skip
    manifest = run_local(path, tmp_path / "out")
    assert_accounted(manifest)
    counts = manifest["counts"]["by_source"]["s"]
    assert counts["input"] == 7 and counts["kept"] == 2
    assert counts["dropped"] == {"empty": 1, "error:text_type": 3, "too_long": 1}
