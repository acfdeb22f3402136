"""The JSON-lines fast path (C++ block parser) gives exactly the per-line reader's rows."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dataforge.config import InputConfig, ReadConfig
from dataforge.io import jsonl_fast
from dataforge.io.readers import InputTask, TaskReader

pytestmark = pytest.mark.skipif(
    not jsonl_fast.available(), reason="dataforge.io._jsonl is not built (make jsonl-reader)"
)
_jsonl = jsonl_fast._jsonl if jsonl_fast.available() else None


def read(path: Path, source: InputConfig, read_config: ReadConfig, fast: bool, monkeypatch):
    """Tables, events, decoding report and accepted ids of one file, fast path on or off."""
    with monkeypatch.context() as patch:
        if not fast:
            patch.setattr(jsonl_fast, "available", lambda: False)
        task = InputTask("000-000000", source.name, str(path), path.name, path.stat().st_size)
        reader = TaskReader(task, source, read_config)
        tables = list(reader.batches())
    return tables, dict(reader.events), reader.decoding_report(), reader.accepted_ids()


def assert_same(path: Path, source: InputConfig, read_config: ReadConfig, monkeypatch) -> list:
    slow = read(path, source, read_config, False, monkeypatch)
    fast = read(path, source, read_config, True, monkeypatch)
    assert [t.num_rows for t in fast[0]] == [t.num_rows for t in slow[0]]
    for mine, theirs in zip(fast[0], slow[0], strict=True):
        assert mine.to_pylist() == theirs.to_pylist()
        assert mine.schema == theirs.schema
    assert fast[1:] == slow[1:]
    return [row for t in fast[0] for row in t.to_pylist()]


# Pieces of lines that json.loads and the per-line reader treat in every way they can.
_TEXTS = [
    '"plain text"',
    '"中文 文本，带标点。"',
    '"tab\\there \\"quoted\\" back\\\\slash \\/ \\b\\f\\n\\r"',
    '"\\u4e2d\\u6587 \\u00e9 \\uD83D\\uDE00 pair"',
    '"lone \\ud800 high"',
    '"lone \\udc00 low"',
    '"high then \\ud83d\\u0041 not low"',
    '"nul \\u0000 inside"',
    '"raw control \x01 char"',
    '"bad escape \\x41"',
    '"short \\u12 escape"',
    '""',
    '"   "',
    '"\\u3000\\u00a0\\u2028 \\u001c"',
    '"\u3000\u00a0"',
    '"\u200b"',
    '"x\\u0085"',
    "42",
    "null",
    '["list"]',
    '{"nested": "obj"}',
    '"' + "long " * 12 + '"',
    '"\U0001f600 astral raw"',
]
_IDS = ['"a"', '"é/1"', '""', "7", "-3", "-0", "0", "1.5", "1e3", "true", "null", '["x"]', "007"]
_OTHERS = [
    '"x": 1',
    '"y": [1, 2.5e-3, -0.0, true, false, null, {"k": ["v", {}]}]',
    '"z": NaN',
    '"z": Infinity',
    '"z": -Infinity',
    '"w": "\\ud800"',
    '"v": 1.',
    '"v": 01',
    '"u": tru',
    '"te\\u0078t": "escaped key"',
    '"t": [1, 2,]',
    '"big": ' + "9" * 4400,
    '"bigf": ' + "9" * 4400 + ".5",
    '"deep": ' + "[" * 450 + "]" * 450,
    '"s": "é \\u00e9 \\" \\n\\t \\/ \\u001f \u2028"',
    '"s": -12',
    '"s": -0',
    '"s": true',
    '"s": null',
    '"s": 1.5',
    '"s": ""',
]


@st.composite
def json_line(draw) -> bytes:
    kind = draw(st.integers(0, 9))
    if kind == 0:  # not an object, or not JSON at all
        return draw(
            st.sampled_from(
                [b"", b"   ", b"\t", b"\xc2\xa0", b"[1, 2]", b'"str"', b"{not json", b"{}",
                 b'{"text": "a"} extra', b'{"text": "a",}', b"bad \xff\xfe utf-8",
                 b'{"text": "bad \xe4 byte"}', b'{"text": "cr\rinside"}', b'{"text": "crlf"}\r',
                 b'{"text": "ok"}  \t', b'  {"text": "ok"}', b'{"text": "a"}{"text": "b"}',
                 b'{"text": "\xed\xa0\x80 surrogate bytes"}', b'{"text": "overlong \xc0\xaf"}']
            )
        )  # fmt: skip
    members = []
    if draw(st.booleans()) or kind < 3:
        members.append('"text": ' + draw(st.sampled_from(_TEXTS)))
    if draw(st.booleans()):
        members.append('"id": ' + draw(st.sampled_from(_IDS)))
    members += draw(st.lists(st.sampled_from(_OTHERS), max_size=2))
    if draw(st.integers(0, 9)) == 0:  # a repeated key
        members.append('"text": "again"' if draw(st.booleans()) else '"id": "again"')
    members = draw(st.permutations(members))
    if kind == 1:
        members.append('"text": ' + json.dumps(draw(st.text(max_size=30)), ensure_ascii=False))
    separator = draw(st.sampled_from([", ", ",", " ,\t"]))
    return ("{" + separator.join(members) + "}").encode("utf-8", "surrogatepass")


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    lines=st.lists(json_line(), max_size=25),
    ending=st.sampled_from([b"\n", b"\r\n"]),
    last_newline=st.booleans(),
    id_key=st.sampled_from([None, "id"]),
    batch_rows=st.sampled_from([1, 2, 5, 1000]),
    block=st.sampled_from([7, 64, 1 << 20]),
    max_doc_chars=st.sampled_from([5, 20, 1000]),
    meta_keys=st.sampled_from([(), ("s",), ("x", "s", "w"), ("y",), ("q", "big", "s", "s")]),
)
def test_fast_path_rows_equal_the_per_line_reader(
    tmp_path: Path, monkeypatch, lines, ending, last_newline, id_key, batch_rows, block,
    max_doc_chars, meta_keys,
) -> None:  # fmt: skip
    data = ending.join(lines) + (ending if last_newline and lines else b"")
    path = tmp_path / "x.jsonl"
    path.write_bytes(data)
    monkeypatch.setattr(jsonl_fast, "BLOCK_BYTES", block)
    source = InputConfig(name="s", path=str(path), lang="zh", id_key=id_key, meta_keys=meta_keys)
    read_config = ReadConfig(batch_rows=batch_rows, max_doc_chars=max_doc_chars)
    rows = assert_same(path, source, read_config, monkeypatch)
    if ending == b"\n" and not any(b"\n" in line or b"\r" in line for line in lines):
        assert len(rows) == len(lines) - (not last_newline and bool(lines) and lines[-1] == b"")


def test_whitespace_is_pythons_for_every_code_point() -> None:
    points = [c for c in range(sys.maxunicode + 1) if not 0xD800 <= c <= 0xDFFF]
    block = b"".join(
        b'{"text": ' + json.dumps(chr(c), ensure_ascii=False).encode() + b"}\n" for c in points
    )
    scanned = _jsonl.scan(block, 0, len(points) + 1, b"text", None, (), b"s/", b"s/f:", 0, 100, 100)
    status = np.frombuffer(scanned[2], np.uint8)
    assert scanned[1] == len(points)
    expected = np.array([2 if chr(c).isspace() else 0 for c in points], np.uint8)
    assert (status == expected).all()


def test_ids_texts_and_statuses_of_one_block() -> None:
    block = (
        b'{"id": "a\\u00e9", "text": "first"}\n'
        b'{"text": "second", "id": 12}\n'
        b'{"text": " \\n ", "id": "e"}\n'
        b'{"text": "toolongtext", "id": "t"}\n'
        b'{"text": "x", "id": ""}\n'
        + b'{"text": "'
        + b"y" * 60
        + b'"}\n'
        + b'{"text": "last", "id": "z"}'
    )
    consumed, lines, status, id_off, ids, text_off, texts = _jsonl.scan(
        block, 0, 100, b"text", b"id", (), b"src/", b"src/f.jsonl:", 10, 50, 10
    )[:7]
    assert (consumed, lines) == (len(block), 7)
    assert list(status) == [0, 0, 2, 1, 3, 1, 0]
    bounds = np.frombuffer(id_off, np.int32)
    assert [ids[a:b].decode() for a, b in zip(bounds[:-1], bounds[1:], strict=True)] == [
        "src/aé", "src/12", "src/e", "src/t", "", "src/f.jsonl:16", "src/z",
    ]  # fmt: skip
    bounds = np.frombuffer(text_off, np.int32)
    assert [texts[a:b].decode() for a, b in zip(bounds[:-1], bounds[1:], strict=True)] == [
        "first", "second", "", "", "", "", "last",
    ]  # fmt: skip
    # max_lines stops after whole lines; pos starts mid-block
    first = _jsonl.scan(block, 0, 2, b"text", b"id", (), b"src/", b"src/f:", 0, 50, 10)
    assert first[1] == 2 and block[first[0] - 1 : first[0]] == b"\n"
    rest = _jsonl.scan(block, first[0], 100, b"text", b"id", (), b"src/", b"src/f:", 2, 50, 10)
    assert rest[1] == 5 and first[0] + rest[0] == len(block)


def test_scan_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="out of range"):
        _jsonl.scan(b"{}\n", 5, 1, b"text", None, (), b"", b"", 0, 10, 10)
    with pytest.raises(ValueError, match="out of range"):
        _jsonl.scan(b"{}\n", 0, 0, b"text", None, (), b"", b"", 0, 10, 10)
    with pytest.raises(TypeError, match="text_key"):
        _jsonl.scan(b"{}\n", 0, 1, "text", None, (), b"", b"", 0, 10, 10)


def test_a_long_line_hands_the_rest_of_the_file_to_the_per_line_reader(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setattr(jsonl_fast, "BLOCK_BYTES", 16)
    monkeypatch.setattr(jsonl_fast, "LONG_LINE_BYTES", 64)
    lines = [json.dumps({"text": f"doc {i}"}) for i in range(5)]
    lines[2] = json.dumps({"text": "z" * 500})
    lines.append("{bad")
    path = tmp_path / "x.jsonl"
    path.write_text("\n".join(lines) + "\n")
    source = InputConfig(name="s", path=str(path))
    rows = assert_same(path, source, ReadConfig(batch_rows=2, max_doc_chars=100), monkeypatch)
    assert [(r["text"], r["drop"]) for r in rows] == [
        ("doc 0", None), ("doc 1", None), ("", "too_long"), ("doc 3", None), ("doc 4", None),
        ("", "error:json"),
    ]  # fmt: skip
    assert [r["id"] for r in rows] == [f"s/x.jsonl:{i}" for i in range(1, 7)]


def test_utf8_bom_is_stripped_and_other_codecs_read_line_by_line(
    tmp_path: Path, monkeypatch
) -> None:
    lines = [json.dumps({"text": f"文档 {i}"}, ensure_ascii=False) for i in range(3)]
    path = tmp_path / "x.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + "\n".join(lines).encode() + b"\n")
    source = InputConfig(name="s", path=str(path))
    rows = assert_same(path, source, ReadConfig(), monkeypatch)
    assert [r["text"] for r in rows] == ["文档 0", "文档 1", "文档 2"]
    path.write_bytes("\n".join(lines).encode("gb18030") + b"\n")
    source = InputConfig(name="s", path=str(path), encoding="gb18030")
    rows = assert_same(path, source, ReadConfig(), monkeypatch)
    assert [r["text"] for r in rows] == ["文档 0", "文档 1", "文档 2"]


def test_duplicate_ids_across_blocks_and_known_ids(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "x.jsonl"
    path.write_text("\n".join(json.dumps({"id": i % 3, "text": f"t{i}"}) for i in range(7)) + "\n")
    source = InputConfig(name="s", path=str(path), id_key="id")
    monkeypatch.setattr(jsonl_fast, "BLOCK_BYTES", 40)
    rows = assert_same(path, source, ReadConfig(batch_rows=2), monkeypatch)
    assert [r["drop"] for r in rows] == [None, None, None] + ["duplicate_id"] * 4
    task = InputTask("000-000000", "s", str(path), "x.jsonl", path.stat().st_size,
                     known_ids=("s/1",))  # fmt: skip
    reader = TaskReader(task, source, ReadConfig())
    rows = [r for t in reader.batches() for r in t.to_pylist()]
    # one batch: repeats inside it and of the earlier split's id
    assert [r["drop"] for r in rows] == [None, "duplicate_id", None] + ["duplicate_id"] * 4
    assert reader.accepted_ids() == {"s/0", "s/2"}


def python_json_lines(table) -> bytes:
    """The output sink's per-row code, the reference of json_lines."""
    out = []
    for row in table.to_pylist():
        if isinstance(row.get("meta"), str):
            row["meta"] = json.loads(row["meta"])
        out.append(json.dumps(row, ensure_ascii=False) + "\n")
    return "".join(out).encode("utf-8")


_METAS = ["{}", '{"a": 1}', '{"b": "é\\n", "a": [1.5, null, true]}', '{"x":{"y":"z"}}', None]


@settings(max_examples=200, deadline=None)
@given(
    rows=st.lists(
        st.tuples(
            st.one_of(st.none(), st.text()),
            st.text(alphabet=st.characters(blacklist_categories=("Cs",))),
            st.sampled_from(_METAS),
        ),
        max_size=20,
    ),
    cut=st.integers(0, 5),
    chunks=st.integers(1, 3),
)
def test_json_lines_are_the_sinks_bytes(rows, cut, chunks) -> None:
    import pyarrow as pa

    table = pa.table(
        {
            "id": pa.array([r[0] for r in rows], pa.string()),
            "text": pa.array([r[1] for r in rows], pa.string()),
            "meta": pa.array([r[2] for r in rows], pa.string()),
            'we"ird\nkey': pa.array(["\x00\x1f\x7f\u2028\\" for _ in rows], pa.string()),
        }
    )
    table = table.slice(min(cut, len(rows)))  # a non-zero array offset
    if chunks > 1 and table.num_rows > 1:
        half = table.num_rows // 2
        table = pa.concat_tables([table.slice(0, half), table.slice(half)])
    assert jsonl_fast.json_lines(table) == python_json_lines(table)


def test_json_lines_leave_other_column_types_to_python() -> None:
    import pyarrow as pa

    table = pa.table({"text": ["a"], "tokens": pa.array([[1, 2]], pa.list_(pa.int32()))})
    assert jsonl_fast.json_lines(table) is None
    assert jsonl_fast.json_lines(pa.table({"text": pa.array([], pa.string())})) == b""


def test_dump_rejects_buffers_that_do_not_fit() -> None:
    offsets = np.array([0, 2, 9], np.int32).tobytes()
    with pytest.raises(ValueError, match="past its data"):
        _jsonl.dump(2, [b"text"], [(None, offsets, b"abc", 0, False)])
    with pytest.raises(ValueError, match="fewer than"):
        _jsonl.dump(3, [b"text"], [(None, offsets, b"abcdefghi", 0, False)])
    with pytest.raises(ValueError, match="one column per key"):
        _jsonl.dump(1, [b"a", b"b"], [(None, offsets, b"abcdefghi", 0, False)])


def test_crlf_line_ends_are_read_in_cpp_and_other_carriage_returns_are_not() -> None:
    block = b'{"text": "a"}\r\n{"text": "b\\r"}\r\n{"text": "c"}\r{"text": "d"}\n{"text": "e"}\r'
    scanned = _jsonl.scan(block, 0, 10, b"text", None, (), b"s/", b"s/f:", 0, 100, 100)
    assert scanned[1] == 4
    assert list(scanned[2]) == [0, 0, 3, 0]  # "c"\r"d" is two lines for universal newlines
    bounds = np.frombuffer(scanned[5], np.int32)
    texts = [scanned[6][a:b].decode() for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    assert texts == ["a", "b\r", "", "e"]


def test_clean_lines_never_reach_the_per_line_code(tmp_path: Path, monkeypatch) -> None:
    """The fast path really reads: only the block with a bad line goes line by line."""
    lines = [json.dumps({"id": i, "text": f"文档 {i}", "title": f"t{i}"}) for i in range(40)]
    path = tmp_path / "x.jsonl"
    path.write_text("\n".join(lines) + "\n")
    source = InputConfig(name="s", path=str(path), id_key="id", meta_keys=("title",))
    handed: list[int] = []
    original = TaskReader.rows_from_lines

    def counting(self, lines):
        handed.extend(line[0] for line in lines)
        return original(self, lines)

    monkeypatch.setattr(TaskReader, "rows_from_lines", counting)
    rows = assert_same(path, source, ReadConfig(batch_rows=10), monkeypatch)
    assert handed == [] and len(rows) == 40
    assert rows[3]["meta"] == '{"title": "t3"}' and rows[3]["id"] == "s/3"
    lines[25] = "{bad"
    path.write_text("\n".join(lines) + "\n")
    rows = assert_same(path, source, ReadConfig(batch_rows=10), monkeypatch)
    assert handed == list(range(21, 31))  # the scanned batch holding line 26, whole
    assert rows[25]["drop"] == "error:json" and rows[26]["drop"] is None
