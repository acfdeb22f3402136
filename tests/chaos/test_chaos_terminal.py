"""Strings from a stranger's data never drive the terminal: ``inspect --head`` (text and
JSON), the closing table of a run and the CLI's one-line errors print every control
character escaped (ESC, BEL, CR, C1, bidi overrides and isolates), and keep only the lines
and tabs of a document's body."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from dataforge.cli import main
from dataforge.io.mds import MDSShardWriter
from dataforge.runtime.summary import render_summary
from dataforge.text.terminal import printable, printable_json

TITLE = "\x1b]0;pwned\x07"  # OSC 0: sets the window title
CLEAR = "\x1b[2J"  # CSI: clears the screen
CLIPBOARD = "\x1b]52;c;cm0gLXJmIH4=\x1b\\"  # OSC 52: writes the clipboard
OVERWRITE = "rm -rf ~\rsafe text"  # \r: the line's start is overwritten
CSI_C1 = "\x9b2J"  # U+009B: a one-character CSI
RLO = "\u202etxt.exe"  # right-to-left override
ISOLATE = "\u2066a\u2069"  # left-to-right isolate ... pop
HOSTILE = [TITLE, CLEAR, CLIPBOARD, OVERWRITE, CSI_C1, RLO, ISOLATE]
ESCAPED = {
    TITLE: "\\x1b]0;pwned\\x07",
    CLEAR: "\\x1b[2J",
    CLIPBOARD: "\\x1b]52;c;cm0gLXJmIH4=\\x1b\\",
    OVERWRITE: "rm -rf ~\\rsafe text",
    CSI_C1: "\\x9b2J",
    RLO: "\\u202etxt.exe",
    ISOLATE: "\\u2066a\\u2069",
}
BIDI = {*range(0x202A, 0x202F), *range(0x2066, 0x206A)}


def raw_controls(text: str, allowed: str = "\n") -> list[str]:
    """The characters of ``text`` a terminal would obey (beyond ``allowed``)."""
    return [
        c
        for c in text
        if c not in allowed and (ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F or ord(c) in BIDI)
    ]


@pytest.mark.parametrize("hostile", HOSTILE)
def test_printable_escapes_each_sequence(hostile: str) -> None:
    assert printable(hostile) == ESCAPED[hostile]
    assert printable(f"a\tb\n{hostile}", multiline=True) == f"a\tb\n{ESCAPED[hostile]}"
    assert printable(f"a\tb\n{hostile}") == f"a\\tb\\n{ESCAPED[hostile]}"


def test_printable_escapes_every_c0_c1_and_bidi_control_and_lone_surrogates() -> None:
    controls = [*map(chr, range(0x20)), "\x7f", *map(chr, range(0x80, 0xA0)), *map(chr, BIDI)]
    assert raw_controls(printable("".join(controls)), allowed="") == []
    assert printable("caf\udce9") == "caf\\udce9"  # a file name byte that is not UTF-8
    assert printable("文档 café ok\\x") == "文档 café ok\\x"  # printable text is untouched


def test_printable_json_reads_back_the_same_values() -> None:
    value = {"id": "".join(HOSTILE), "name\u202e": ["caf\udce9", "\x00\n"]}
    text = printable_json(value, indent=2)
    assert raw_controls(text) == [] and "\udce9" not in text
    assert json.loads(text) == value


@pytest.fixture
def hostile_dataset(tmp_path: Path) -> Path:
    root = tmp_path / "mds"
    columns = {"id": "str", "text": "str", "source": "str", "lang": "str", "meta": "json"}
    writer = MDSShardWriter(root, columns, compression="zstd", hashes=["xxh64"], size_limit=1 << 20)
    for i, hostile in enumerate(HOSTILE):
        writer.write({"id": f"doc{i}{hostile}", "text": f"line one\n\tline {hostile} two",
                      "source": f"src{CLEAR}", "lang": RLO, "meta": {}})  # fmt: skip
    writer.finish()
    return root


def test_inspect_head_prints_texts_and_ids_escaped(hostile_dataset: Path, capsys) -> None:
    assert main(["inspect", str(hostile_dataset), "--head", str(len(HOSTILE))]) == 0
    out = capsys.readouterr().out
    assert raw_controls(out, allowed="\n\t") == []
    for i, hostile in enumerate(HOSTILE):
        escaped = ESCAPED[hostile]
        assert f"--- sample {i}: id=doc{i}{escaped} source=src\\x1b[2J lang=\\u202etxt.exe" in out
        assert f"line one\n\tline {escaped} two\n" in out  # the body keeps its lines and tabs
    assert "per source  src\\x1b[2J=7" in out


def test_inspect_json_has_no_raw_control(hostile_dataset: Path, capsys) -> None:
    assert main(["inspect", str(hostile_dataset), "--head", "7", "--json"]) == 0
    out = capsys.readouterr().out
    assert raw_controls(out) == []
    head = json.loads(out)["head"]
    assert [r["id"] for r in head] == [f"doc{i}{h}" for i, h in enumerate(HOSTILE)]


def test_inspect_verify_problems_are_escaped(hostile_dataset: Path, capsys) -> None:
    index = json.loads((hostile_dataset / "index.json").read_text())
    shard = index["shards"][0]["zip_data"]
    name = f"x{TITLE}.mds.zstd"
    (hostile_dataset / shard["basename"]).rename(hostile_dataset / name)
    shard.update(basename=name, bytes=shard["bytes"] + 1)  # the size check names the file
    (hostile_dataset / "index.json").write_text(json.dumps(index))
    assert main(["inspect", str(hostile_dataset), "--verify"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and raw_controls(err[0]) == [], err
    assert err[0].startswith("CORRUPT: shard 0: x\\x1b]0;pwned\\x07.mds.zstd has ")


def _manifest(reasons: dict[str, int]) -> dict:
    source = {"input": 10, "kept": 10 - sum(reasons.values()), "repeated": 0, "dropped": reasons}
    return {
        "counts": {"by_source": {"web": source}, "total": source},
        "stages": [{"op": "url_filter", "seconds": 1.0, "cpu_seconds": 1.0}],
        "timings": {},
    }


@pytest.mark.parametrize("rich_output", [False, True])
def test_the_closing_table_prints_drop_reasons_escaped(rich_output, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # rich's width: one reason per cell line
    reasons = {f"warc:record_type:{TITLE}": 3, f"x:{CLEAR}{RLO}": 2, f"y:{OVERWRITE}": 1}
    stream = io.StringIO()
    render_summary(_manifest(reasons), stream, rich_output=rich_output)
    out = stream.getvalue()
    assert raw_controls(out) == []
    assert "warc:record_type:\\x1b]0;pwned\\x07 3" in out
    assert "x:\\x1b[2J\\u202etxt.exe 2" in out and "y:rm -rf ~\\rsafe text 1" in out


@pytest.mark.parametrize("name", [f"d{CLEAR}", f"d{TITLE}", "d\nerror: fake line", f"d{RLO}"])
def test_a_file_name_in_a_one_line_error_is_escaped(tmp_path: Path, name: str, capsys) -> None:
    path = tmp_path / name
    path.mkdir()
    assert main(["inspect", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and raw_controls(err[0]) == [], err
    assert err[0] == f"error: {printable(path)}: no index.json here or in {printable(path)}/mds"
