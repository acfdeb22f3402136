"""Input encodings: real Chinese text re-encoded at test time comes back exactly."""

from __future__ import annotations

import codecs
import gzip
import json
import random
from pathlib import Path

import opencc
import pytest

from dataforge.cli import main
from dataforge.config import ConfigError, InputConfig, ReadConfig, load_pipeline
from dataforge.io.decoding import decide_encoding
from dataforge.io.readers import InputTask, TaskReader
from dataforge.runtime.executors.local import LocalExecutor
from dataforge.runtime.pipeline import run_pipeline

# Characters outside GBK that GB18030 encodes in 4 bytes (CJK Ext. B, emoji, Ext. A).
FOUR_BYTE = ["𠀀", "😀", "㐀", "𪚥"]


def read(path: Path, encoding: str, **read_kw) -> tuple[list[dict], TaskReader]:
    source = InputConfig(name="s", path=str(path), encoding=encoding)
    task = InputTask("000-000000", "s", str(path), path.name, path.stat().st_size)
    reader = TaskReader(task, source, ReadConfig(**read_kw))
    return [r for b in reader.batches() for r in b.to_pylist()], reader


def write_encoded(path: Path, texts: list[str], encoding: str, bom: bytes = b"") -> Path:
    lines = "".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in texts)
    data = bom + lines.encode(encoding)
    path.write_bytes(gzip.compress(data, mtime=0) if path.suffix == ".gz" else data)
    return path


def encodable(texts: list[str], encoding: str) -> list[str]:
    out = []
    for t in texts:
        try:
            t.encode(encoding)
        except UnicodeEncodeError:
            continue
        out.append(t)
    return out


def with_four_byte_chars(texts: list[str]) -> list[str]:
    return [t[:5] + FOUR_BYTE[i % 4] + t[5:] if i % 7 == 0 else t for i, t in enumerate(texts)]


@pytest.mark.parametrize(
    ("name", "codec", "bom", "decided", "decoded_as"),
    [
        ("gbk.jsonl", "gbk", b"", "detector", "gb18030"),
        ("gb18030.jsonl.gz", "gb18030", b"", "detector", "gb18030"),
        ("big5.jsonl", "big5", b"", "detector", "big5"),
        ("utf16.jsonl", "utf-16-le", codecs.BOM_UTF16_LE, "bom", "utf-16-le"),
        ("utf16be.jsonl", "utf-16-be", codecs.BOM_UTF16_BE, "bom", "utf-16-be"),
        ("utf16nobom.jsonl", "utf-16-le", b"", "detector", "utf-16-le"),
        ("utf8bom.jsonl", "utf-8", codecs.BOM_UTF8, "bom", "utf-8"),
    ],
)
def test_auto_gives_back_every_original_text(
    tmp_path: Path, demo_zh_texts: list[str], name, codec, bom, decided, decoded_as
) -> None:
    texts = demo_zh_texts
    if codec == "big5":
        # Taiwan-standard characters: Big5's own repertoire (s2t's 爲, 着, 裏 are not in it)
        s2tw = opencc.OpenCC("s2tw")
        texts = [s2tw.convert(t) for t in texts]
    if codec == "gb18030":
        texts = with_four_byte_chars(texts)
        assert sum(ch in t for t in texts for ch in FOUR_BYTE) >= 200
    kept = encodable(texts, codec)
    assert len(kept) >= 0.95 * len(texts)  # Big5 lacks ～, ‰ and a few rare characters
    path = write_encoded(tmp_path / name, kept, codec, bom)
    rows, reader = read(path, "auto")
    assert [r["drop"] for r in rows] == [None] * len(kept)
    assert [r["text"] for r in rows] == kept
    assert (reader.decision.encoding, reader.decision.decided_by) == (decoded_as, decided)
    assert reader.events.get("bom_stripped", 0) == (1 if bom else 0)
    transcoded = reader.events.get(f"transcoded:{decoded_as}", 0)
    assert transcoded == (0 if decoded_as == "utf-8" else len(kept))


def test_big5_trail_byte_0x5c_never_breaks_a_json_line(tmp_path: Path) -> None:
    # 許 and 功 end in 0x5C, a backslash byte: read as UTF-8 the JSON line broke.
    texts = ["許多成功的功課", "這是許可證，功能正常"]
    path = write_encoded(tmp_path / "b.jsonl", texts, "big5")
    assert b"\x5c" in path.read_bytes()
    rows, _ = read(path, "auto")
    assert [(r["text"], r["drop"]) for r in rows] == [(t, None) for t in texts]
    rows, _ = read(path, "big5")
    assert [r["text"] for r in rows] == texts
    rows, _ = read(path, "utf-8")
    assert all(r["drop"] is not None for r in rows)  # never kept as mojibake


def test_explicit_codec_and_utf8_default_on_gbk(tmp_path: Path, demo_zh_texts) -> None:
    texts = demo_zh_texts[:300]
    path = write_encoded(tmp_path / "g.jsonl", texts, "gbk")
    rows, reader = read(path, "gb18030")
    assert [r["text"] for r in rows] == texts
    assert reader.decision.decided_by == "config"
    rows, reader = read(path, "utf-8")
    reasons = [r["drop"] for r in rows]
    assert reasons.count(None) == 0, "a GBK file read as UTF-8 keeps no mojibake"
    assert set(reasons) <= {"invalid_utf8", "error:json"}
    report = reader.decoding_report()
    assert report["suspect"] and report["invalid_records"] >= 0.99 * len(texts)


def test_auto_looks_past_an_ascii_start(tmp_path: Path, demo_zh_texts) -> None:
    english = [f"record {i}: plain ASCII text before any Chinese appears" for i in range(3000)]
    texts = english + demo_zh_texts[:200] + ["×÷ and a 4-byte 𠀀 late in the file"]
    path = write_encoded(tmp_path / "late.jsonl", texts, "gb18030")
    assert path.read_bytes()[: 1 << 16].isascii()
    rows, reader = read(path, "auto")
    assert [r["text"] for r in rows] == texts
    assert (reader.decision.encoding, reader.decision.decided_by) == ("gb18030", "detector")


def test_broken_utf16_is_repaired_not_a_crash(tmp_path: Path) -> None:
    # Bytes below 0x80 that a codec rejects (half a UTF-16 unit, a lone surrogate) are
    # escaped too, so they reach the invalid_utf8 policy instead of raising.
    unit = '{"text": "中文"}\n'.encode("utf-16-le")
    lone = '{"text": "a'.encode("utf-16-le") + b"\x00\xd8" + 'b"}\n'.encode("utf-16-le")
    path = tmp_path / "broken16.jsonl"
    path.write_bytes(codecs.BOM_UTF16_LE + unit + lone + unit + b"\x00")
    rows, reader = read(path, "auto")
    assert [(r["text"], r["drop"]) for r in rows] == [
        ("中文", None),
        ("a\ufffdb", None),
        ("中文", None),
        ("", "error:json"),
    ]
    assert reader.events["invalid_utf8_replaced"] == 2


def test_file_decoding_under_no_candidate_is_dropped_record_by_record(tmp_path: Path) -> None:
    rng = random.Random(0)
    lines = [bytes(rng.randrange(128, 256) for _ in range(60)) for _ in range(40)]
    path = tmp_path / "noise.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    assert decide_encoding(path.read_bytes(), "auto", True).decided_by == "undecodable"
    rows, reader = read(path, "auto")
    assert [r["drop"] for r in rows] == ["invalid_encoding"] * 40
    assert reader.decoding_report()["suspect"]


def test_utf8_bom_is_stripped_under_default_encoding(tmp_path: Path) -> None:
    # issue 12, case 5: the BOM made the first record error:json.
    path = tmp_path / "bom.jsonl"
    path.write_bytes(codecs.BOM_UTF8 + b'{"text": "first"}\n{"text": "second"}\n')
    rows, reader = read(path, "utf-8")
    assert [(r["text"], r["drop"]) for r in rows] == [("first", None), ("second", None)]
    assert reader.events == {"bom_stripped": 1}
    txt = tmp_path / "bom.txt"
    txt.write_bytes(codecs.BOM_UTF8 + "第一行\n".encode())
    source = InputConfig(name="s", path=str(txt), format="txt", txt_unit="file")
    reader = TaskReader(InputTask("t", "s", str(txt), "bom.txt", 1), source, ReadConfig())
    assert [r["text"] for b in reader.batches() for r in b.to_pylist()] == ["第一行\n"]


def test_max_doc_chars_counts_decoded_characters(tmp_path: Path, demo_zh_texts) -> None:
    # issue 12, case 6: escaped documents of 1,466-1,729 characters were too_long at 2000.
    docs = [t for t in demo_zh_texts if 1400 <= len(t) <= 2000][:5]
    docs += ["字" * 2000, "字" * 2001, "😀" * 2000]
    path = tmp_path / "escaped.jsonl"
    path.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs), encoding="ascii")
    rows, _ = read(path, "utf-8", max_doc_chars=2000)
    assert len(docs) >= 8 and max(len(line) for line in path.read_text().splitlines()) > 2000 * 6
    expected = [None] * (len(docs) - 3) + [None, "too_long", None]
    assert [r["drop"] for r in rows] == expected
    assert [r["text"] for r in rows if r["drop"] is None] == [d for d in docs if len(d) <= 2000]
    # A monster line is cut without being held whole, and the next record is intact.
    path.write_text('{"text": "' + "a" * 200_000 + '"}\n{"text": "ok"}\n', encoding="ascii")
    rows, _ = read(path, "utf-8", max_doc_chars=1000)
    assert [(r["text"], r["drop"]) for r in rows] == [("", "too_long"), ("ok", None)]


def test_unknown_codec_is_refused_by_validate(tmp_path: Path, write_pipeline, capsys) -> None:
    (tmp_path / "in").mkdir()
    write_encoded(tmp_path / "in" / "a.jsonl", ["x"], "utf-8")
    body = 'name: e\ninputs: [{name: a, path: "in/*.jsonl", encoding: %s}]\noutput: {path: o}\n'
    for bad in ("gbkk", "base64"):
        path = write_pipeline(tmp_path, body % bad)
        assert main(["validate", str(path)]) == 2
        err = capsys.readouterr().err
        assert f"encoding {bad!r} is not a known text codec" in err
        assert "inputs[0]" in err and "gb18030" in err and "big5" in err
        with pytest.raises(ConfigError):
            load_pipeline(path)
    assert main(["validate", str(write_pipeline(tmp_path, body % "auto"))]) == 0
    parquet = body.replace("}]", ", format: parquet}]") % "gbk"
    assert main(["validate", str(write_pipeline(tmp_path, parquet))]) == 2
    assert "parquet strings are UTF-8" in capsys.readouterr().err


def test_run_reports_wrong_encoding_and_records_decisions(
    tmp_path: Path, write_pipeline, demo_zh_texts
) -> None:
    texts = demo_zh_texts[:200]
    (tmp_path / "in").mkdir()
    write_encoded(tmp_path / "in" / "gbk.jsonl", texts, "gbk")
    write_encoded(tmp_path / "in" / "utf8.jsonl", texts[:10], "utf-8")
    body = 'name: e\ninputs: [{name: a, path: "in/*.jsonl", encoding: %s}]\noutput: {path: o}\n'
    pipeline = write_pipeline(tmp_path, body % "utf-8")
    logged: list[str] = []
    manifest = run_pipeline(
        load_pipeline(pipeline), tmp_path / "o1", LocalExecutor(), log=logged.append
    )
    counts = manifest["counts"]["by_source"]["a"]
    assert counts["kept"] == 10 and counts["input"] == 210
    assert counts["dropped"]["invalid_utf8"] + counts["dropped"].get("error:json", 0) == 200
    [warning] = manifest["warnings"]
    assert "gbk.jsonl" in warning and "inputs[0].encoding" in warning and "auto" in warning
    assert any(warning in line for line in logged)

    pipeline = write_pipeline(tmp_path, body % "auto")
    manifest = run_pipeline(load_pipeline(pipeline), tmp_path / "o2", LocalExecutor(), log=print)
    assert manifest["warnings"] == []
    decoding = {Path(i["path"]).name: i["decoding"] for i in manifest["inputs"]}
    assert decoding["gbk.jsonl"] == {
        "encoding": "gb18030",
        "decided_by": "detector",
        "bom": False,
        "records": 200,
        "invalid_records": 0,
        "suspect": False,
    }
    assert decoding["utf8.jsonl"]["decided_by"] == "utf-8"
    counts = manifest["counts"]["by_source"]["a"]
    assert counts["kept"] == 210 and counts["events"] == {"transcoded:gb18030": 200}
