"""Seeded mutants of real-looking WARC, WET and HTML files (cuts, byte flips, inserted and
deleted bytes, lying ``Content-Length``s, other record types, other charset labels, floods
of ``<link`` tags): every one is read to the end in-process (reader, then ``extract``) with
every row kept or dropped for a reason from a fixed set; the records the mutation did not
touch come out as before; bytes lost are counted by a row. A few mutants then go through
``dataforge run`` with the local executor, which must exit 0 with its accounting checked."""

from __future__ import annotations

import gzip
import json
import random
import re
import subprocess
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path

import pytest
from webkit import page_bytes, write_warc, write_wet

from dataforge.io.formats.warc import WARC_TYPES
from dataforge.io.input_config import InputConfig, ReadConfig
from dataforge.io.readers import InputTask, TaskReader
from dataforge.ops.extract import Extract

MUTANTS_PER_BASE = 180
REASONS = {
    None, "warc:not_html", "warc:malformed", "too_long", "empty", "invalid_encoding",
    "invalid_utf8", "duplicate_id", *(f"warc:record_type:{t}" for t in [*WARC_TYPES, "other"]),
}  # fmt: skip
EVENT = re.compile(r"charset_replaced|warc_malformed:[A-Za-z_]{1,40}")
LABELS = ["rot13", "base64", "zlib", "undefined", "utf-16", "utf-32", "unicode_escape",
          "utf-7", "x-user-defined", "gbk", "big5", "latin-1", "iso-8859-1", "", "\"", "é"]  # fmt: skip
LENGTHS = [b"0", b"1", b"20", b"999999999", b"3383D", b"-5", b"", b"1e3", b"99999999999999999999"]


@dataclass
class Base:
    """A file, its format, and the byte spans of its records (None: unknown offsets)."""

    name: str
    data: bytes
    fmt: str
    spans: list[tuple[int, int]] | None

    @property
    def gz_members(self) -> bool:
        return self.name.endswith(".gz") and self.spans is not None


def member_spans(data: bytes) -> list[tuple[int, int]]:
    spans, at = [], 0
    while at < len(data):
        member = zlib.decompressobj(31)
        member.decompress(data[at:])
        end = len(data) - len(member.unused_data)
        spans.append((at, end))
        at = end
    return spans


def plain_spans(data: bytes) -> list[tuple[int, int]]:
    starts = [m.start() for m in re.finditer(rb"WARC/1\.[01]\r\n", data)]
    return list(zip(starts, [*starts[1:], len(data)], strict=True))


@pytest.fixture(scope="module")
def bases(tmp_path_factory, pages) -> list[Base]:
    tmp = tmp_path_factory.mktemp("bases")
    few = [pages[0], pages[1], pages[12], pages[13]]
    warc_gz = write_warc(tmp / "a.warc.gz", few).read_bytes()
    warc = write_warc(tmp / "a.warc", few, gzip=False).read_bytes()
    wet = write_wet(tmp / "a.warc.wet", few, gzip=False).read_bytes()
    return [
        Base("a.warc.gz", warc_gz, "warc", member_spans(warc_gz)),
        Base("a.warc", warc, "warc", plain_spans(warc)),
        Base("b.warc.gz", gzip.compress(warc, mtime=0), "warc", None),  # whole-file gzip
        Base("a.warc.wet.gz", write_wet(tmp / "w.gz", few).read_bytes(), "wet", None),
        Base("a.warc.wet", wet, "wet", plain_spans(wet)),
        Base("a.html", page_bytes(pages[0]), "html", None),
    ]


def record_edit(base: Base, data: bytes, rng: random.Random) -> tuple[bytes, int, int]:
    """A header lie, another record type or another charset label in one record."""
    k = rng.randrange(len(base.spans))
    lo, hi = base.spans[k]
    record = gzip.decompress(data[lo:hi]) if base.gz_members else data[lo:hi]
    kind = rng.choice(["length", "type", "charset"])
    if kind == "length":
        new = b"Content-Length: " + rng.choice(LENGTHS)
        record = re.sub(rb"Content-Length: [^\r]*", new.replace(b"\\", b""), record, count=1)
    elif kind == "type":
        rtype = rng.choice([*sorted(WARC_TYPES), "x" * rng.randrange(1, 300), "Response"])
        record = re.sub(rb"WARC-Type: [^\r]*", b"WARC-Type: " + rtype.encode(), record, count=1)
    else:
        label = rng.choice(LABELS).encode()
        record = re.sub(rb"charset=[\w-]*", b"charset=" + label, record, count=2)
    if base.gz_members:
        record = gzip.compress(record)
    return data[:lo] + record + data[hi:], lo, hi


def mutate(base: Base, rng: random.Random) -> tuple[bytes, int, int]:
    """A mutant of ``base`` and the span of the original it touches ([p, p]: an insert)."""
    data, n = base.data, len(base.data)
    kinds = ["cut", "flip", "insert", "delete"] + (["record"] * 2 if base.spans else [])
    kinds += ["links", "charset"] if base.fmt == "html" else []
    kind = rng.choice(kinds)
    pos = rng.randrange(1, n)
    if kind == "cut":
        return data[:pos], pos, n
    if kind == "flip":
        out = bytearray(data)
        for at in range(pos, min(n, pos + rng.randrange(1, 5))):
            out[at] = rng.randrange(256)
        return bytes(out), pos, pos + 4
    if kind == "insert":
        junk = rng.choice(
            [b"\r\n", b"WARC/1.1\r\n", b"\x1f\x8b\x08", b"<link ", bytes(rng.randbytes(40))]
        )
        return data[:pos] + junk * rng.randrange(1, 4) + data[pos:], pos, pos
    if kind == "delete":
        end = min(n, pos + rng.randrange(1, 200))
        return data[:pos] + data[end:], pos, end
    if kind == "links":
        at = data.find(b"<head>") + 6
        flood = rng.choice([b"<link ", b'<link rel="canonical" ', b"<link rel=canonical href="])
        return data[:at] + flood * rng.randrange(1, 20_000) + data[at:], at, at
    if kind == "charset":
        label = rng.choice(LABELS).encode()
        return re.sub(rb'charset="[^"]*"', b'charset="' + label + b'"', data, count=1), 0, n
    return record_edit(base, data, rng)


def whole_records_cut(base: Base, lo: int, hi: int) -> bool:
    """Whether a mutant is ``base`` cut where a record ends (a gzip member's end, or inside
    the blank lines after a plain record): a shorter file no reader can tell from a whole
    one, so the records past the cut are lost without a row."""
    if hi != len(base.data) or base.fmt == "html":
        return False
    if base.name.endswith(".gz"):
        return lo in {end for _, end in member_spans(base.data)}
    return base.spans is not None and any(end - 4 <= lo <= end for _, end in base.spans)


def read_rows(path: Path, fmt: str) -> tuple[list[dict], TaskReader]:
    source = InputConfig(name="web", path=str(path), format=fmt)
    task = InputTask("000-000000", "web", str(path), path.name, path.stat().st_size)
    reader = TaskReader(task, source, ReadConfig(max_doc_chars=20_000))
    batches = list(reader.batches())
    extract = Extract(Extract.Config(engine="resiliparse"))
    rows = []
    for batch in batches:
        out = extract(batch)
        assert out.num_rows == batch.num_rows
        rows += batch.to_pylist()
    return rows, reader


def row_key(row: dict) -> tuple:
    return row["id"].rsplit(":", 1)[1], row["drop"], row["text"], row["meta"]


def check_mutant(base: Base, original: list[dict], rows: list[dict], reader, lo, hi) -> None:
    numbers = [int(r["id"].rsplit(":", 1)[1]) for r in rows]
    assert numbers == sorted(set(numbers))
    assert {r["drop"] for r in rows} <= REASONS
    assert all(EVENT.fullmatch(event) for event in reader.events)
    if base.fmt == "html":
        assert len(rows) == 1
        return
    faithful = {row_key(r) for r in original}
    by_record_id = {
        json.loads(r["meta"]).get("warc_record_id"): r for r in rows if r["drop"] is None
    }
    if base.spans is not None:
        touched = [lo < end and start < max(hi, lo + 1) for start, end in base.spans]
        if lo == hi:  # an insert touches the records on both sides of it
            touched = [start <= lo <= end for start, end in base.spans]
        for row, hit in zip(original, touched, strict=True):
            if not hit and row["drop"] is None:  # untouched: read as before
                record_id = json.loads(row["meta"])["warc_record_id"]
                got = by_record_id.get(record_id)
                assert got is not None and (got["text"], got["drop"]) == (row["text"], None)
        if not whole_records_cut(base, lo, hi):
            assert len(rows) >= touched.count(False) + (1 if any(touched) else 0)
    lost = len(faithful - {row_key(r) for r in rows})
    if lost and not whole_records_cut(base, lo, hi):  # something is gone: a row says so
        assert any(row_key(r) not in faithful for r in rows)


def test_a_thousand_mutants_read_to_the_end_with_every_loss_counted(tmp_path, bases):
    rng = random.Random(47)
    checked = 0
    for base in bases:
        path = tmp_path / base.name
        path.write_bytes(base.data)
        original, _ = read_rows(path, base.fmt)
        assert len(original) == (len(base.spans) if base.spans else len(original))
        for k in range(MUTANTS_PER_BASE):
            data, lo, hi = mutate(base, rng)
            path.write_bytes(data)
            rows, reader = read_rows(path, base.fmt)
            try:
                check_mutant(base, original, rows, reader, lo, hi)
            except AssertionError as exc:
                raise AssertionError(f"{base.name} mutant {k} ({lo}..{hi})") from exc
            checked += 1
    assert checked >= 1000


PIPELINE = """\
name: fuzz
inputs:
  - {{name: crawl, path: "{root}/warc/*", format: warc, lang: zh}}
  - {{name: text, path: "{root}/wet/*", format: wet, lang: zh}}
  - {{name: site, path: "{root}/html/*.html", format: html, lang: zh}}
stages:
  - {{op: extract, engine: resiliparse}}
output: {{path: {root}/out, format: jsonl}}
"""


def test_mutants_through_a_local_run_exit_0_with_losses_counted(tmp_path, bases):
    rng = random.Random(1947)
    for base in bases:
        folder = tmp_path / {"warc": "warc", "wet": "wet", "html": "html"}[base.fmt]
        folder.mkdir(exist_ok=True)
        data = base.data[: len(base.data) * 2 // 3] if base.spans else mutate(base, rng)[0]
        (folder / base.name).write_bytes(data)
    pipeline = tmp_path / "fuzz.yaml"
    pipeline.write_text(PIPELINE.format(root=tmp_path))
    command = [sys.executable, "-m", "dataforge.cli", "run", str(pipeline), "--executor",
               "local", "--progress", "off"]  # fmt: skip
    proc = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    counts = json.loads((tmp_path / "out" / "manifest.json").read_text())["counts"]
    for name in ("crawl", "text", "site"):
        source = counts["by_source"][name]
        assert source["input"] == source["kept"] + sum(source["dropped"].values())
    assert counts["by_source"]["crawl"]["dropped"]["warc:malformed"] >= 2  # the two cut files
    assert counts["by_source"]["text"]["dropped"]["warc:malformed"] >= 1
