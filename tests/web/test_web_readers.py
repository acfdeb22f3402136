"""WARC, WET and HTML readers: records, meta, charsets, drops, splits at record bounds."""

from __future__ import annotations

import dataclasses
import gzip
import html as html_lib
import json

import opencc
import pytest
from webkit import (
    page_bytes,
    page_html,
    read_file,
    read_task,
    wet_text,
    write_html_dir,
    write_warc,
    write_wet,
)

from dataforge.io.input_config import InputConfig
from dataforge.io.readers import InputTask
from dataforge.io.splits import split_task, unsplittable_reason
from dataforge.io.web_pages import decode_page


def rows(table):
    return [(r["id"], r["drop"]) for r in table.select(["id", "drop"]).to_pylist()]


def live_meta(table):
    return [json.loads(r["meta"]) for r in table.to_pylist() if r["drop"] is None]


def expected_rows(n_pages: int) -> list[tuple[str, str | None]]:
    """warcinfo, then request + response per page, an image response after the middle."""
    out = [("web/x:1", "warc:record_type:warcinfo")]
    k = 2
    for i in range(n_pages):
        out += [(f"web/x:{k}", "warc:record_type:request"), (f"web/x:{k + 1}", None)]
        k += 2
        if i == n_pages // 2:
            out.append((f"web/x:{k}", "warc:not_html"))
            k += 1
    return out


@pytest.mark.parametrize(
    ("name", "gz", "version"),
    [("x.warc.gz", True, "1.1"), ("x.warc", False, "1.0"), ("x.warc.gz", "whole", "1.1")],
)
def test_warc_records_and_meta(tmp_path, pages, name, gz, version):
    path = tmp_path / name
    write_warc(path, pages[:6], gzip=gz is True, version=version)
    if gz == "whole":
        plain = tmp_path / "plain.warc"
        write_warc(plain, pages[:6], gzip=False, version=version)
        path.write_bytes(gzip.compress(plain.read_bytes()))
    table, _ = read_file(path, "warc", lang="zh")
    assert [(i.replace(name, "x"), d) for i, d in rows(table)] == expected_rows(6)
    metas = live_meta(table)
    assert [m["url"] for m in metas] == [p.url for p in pages[:6]]
    assert {m["warc_date"] for m in metas} == {"2024-03-01T08:00:00Z"}
    assert all(m["warc_record_id"].startswith("<urn:uuid:") for m in metas)
    assert {m["charset"] for m in metas} == {"utf-8"} and {m["content"] for m in metas} == {"html"}
    texts = [r["text"] for r in table.to_pylist() if r["drop"] is None]
    assert all(pages[i].paragraphs[1][:30].replace("&", "&amp;") in t for i, t in enumerate(texts))


def test_charset_from_header_then_meta_then_detection(tmp_path, pages):
    to_traditional = opencc.OpenCC("s2t")
    gbk = dataclasses.replace(pages[0], charset="gbk")
    big5 = dataclasses.replace(
        pages[1],
        charset="big5",
        header_charset=False,
        paragraphs=[to_traditional.convert(p) for p in pages[1].paragraphs],
    )
    path = write_warc(tmp_path / "x.warc.gz", [gbk, big5], extras=False)
    table, _ = read_file(path, "warc", lang="zh")
    metas = live_meta(table)
    assert [m["charset"] for m in metas] == ["gb18030", "cp950"]
    texts = [r["text"] for r in table.to_pylist() if r["drop"] is None]
    # entities stand for characters the codec lacks: unescaped, the pages are exact
    assert [html_lib.unescape(t) for t in texts] == [
        html_lib.unescape(page_html(p)) for p in (gbk, big5)
    ]
    # no header and no meta charset: the source's encoding decides, auto detects GB18030
    html = page_bytes(dataclasses.replace(pages[2], charset="gb18030")).replace(
        b'<meta charset="gb18030">', b""
    )
    assert decode_page(html, "text/html", "auto")[1] == "gb18030"
    assert decode_page(html, "text/html", "utf-8")[1] == "utf-8:replaced"
    # a header that lies (utf-8 for GBK bytes) loses to the meta charset that decodes them
    assert decode_page(page_bytes(gbk), "text/html; charset=utf-8", "utf-8")[1] == "gb18030"


def test_truncated_warc_counts_one_malformed_drop(tmp_path, pages):
    path = write_warc(tmp_path / "x.warc.gz", pages[:4], extras=False)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 200])
    table, reader = read_file(path, "warc")
    got = rows(table)
    assert got[:-1] == [
        (f"web/x.warc.gz:{k}", None if k % 2 == 0 else "warc:record_type:request")
        for k in range(1, 8)
    ]
    assert got[-1] == ("web/x.warc.gz:8", "warc:malformed")
    assert sum(reader.events.values()) == 1


def test_garbage_between_records_costs_one_drop_and_reading_resumes(tmp_path, pages):
    path = write_warc(tmp_path / "x.warc", pages[:3], gzip=False, extras=False)
    data = path.read_bytes()
    second = data.index(b"WARC/1.1", 10)
    path.write_bytes(data[:second] + b"NOT A WARC HEADER\r\n\r\n" + data[second:])
    table, _ = read_file(path, "warc")
    assert rows(table) == [
        ("web/x.warc:1", "warc:record_type:request"),
        ("web/x.warc:2", "warc:malformed"),
        *[(f"web/x.warc:{k}", None if k % 2 else "warc:record_type:request") for k in range(3, 8)],
    ]
    urls = [m["url"] for m in live_meta(table)]
    assert urls == [p.url for p in pages[:3]]


def test_a_corrupt_gzip_member_costs_its_record_only(tmp_path, pages):
    path = write_warc(tmp_path / "x.warc.gz", pages[:3], extras=False)
    data = bytearray(path.read_bytes())
    members = [i for i in range(len(data) - 2) if data[i : i + 3] == b"\x1f\x8b\x08"]
    assert len(members) == 6  # request + response per page
    middle = members[3] + 40  # inside the second page's response member
    data[middle : middle + 20] = b"\x00" * 20
    path.write_bytes(bytes(data))
    table, reader = read_file(path, "warc")
    got = rows(table)
    assert got[3] == ("web/x.warc.gz:4", "warc:malformed")
    assert [m["url"] for m in live_meta(table)] == [pages[0].url, pages[2].url]
    assert got[-1] == ("web/x.warc.gz:6", None)
    assert sum(v for k, v in reader.events.items() if k.startswith("warc_malformed")) == 1


@pytest.mark.parametrize("gz", [True, False])
def test_splits_at_record_bounds_keep_ids_and_rows(tmp_path, pages, gz):
    path = write_warc(tmp_path / ("x.warc.gz" if gz else "x.warc"), pages, gzip=gz)
    source = InputConfig(name="web", path=str(path), format="warc", lang="zh")
    task = InputTask("000-000000", "web", str(path), path.name, path.stat().st_size)
    assert unsplittable_reason(task, source) is None
    whole = read_task(task, source).to_pylist()
    for split_bytes in (1024, 5000, 20000):
        splits = split_task(task, source, split_bytes)
        assert len(splits) > 1
        parts = [row for s in splits for row in read_task(s, source).to_pylist()]
        strip = [{k: v for k, v in r.items() if k != "_ord"} for r in parts]
        assert strip == [{k: v for k, v in r.items() if k != "_ord"} for r in whole]


def test_wet_conversion_records(tmp_path, pages):
    path = write_wet(tmp_path / "x.warc.wet.gz", pages[:3])
    table, _ = read_file(path, "wet")
    assert rows(table)[0] == ("web/x.warc.wet.gz:1", "warc:record_type:warcinfo")
    live = [r for r in table.to_pylist() if r["drop"] is None]
    assert [r["text"] for r in live] == [f"{p.title}\n{p.body_text}" for p in pages[:3]]
    with_nav, _ = read_file(
        write_wet(tmp_path / "y.warc.wet", pages[:1], gzip=False, boilerplate=True), "wet"
    )
    assert with_nav.column("text")[1].as_py() == wet_text(pages[0], True)
    assert [json.loads(r["meta"])["content"] for r in live] == ["text"] * 3


def test_html_files_one_document_each(tmp_path, pages):
    root = write_html_dir(tmp_path / "site", pages[:2])
    for i, page in enumerate(pages[:2]):
        path = root / f"page-{i:04d}.{'html' if i % 2 == 0 else 'htm'}"
        table, _ = read_file(path, "html")
        (row,) = table.to_pylist()
        assert row["id"] == f"web/{path.name}:0" and row["drop"] is None
        meta = json.loads(row["meta"])
        assert meta == {"charset": "utf-8", "content": "html", "path": path.name, "url": page.url}


def test_html_is_one_task_per_file():
    source = InputConfig(name="web", path="x", format="html")
    task = InputTask("000-000000", "web", "big.html", "big.html", 10 << 20)
    assert split_task(task, source, 1024) == [task]
    assert unsplittable_reason(task, source) == "format: html (one page per file)"


def test_chunked_and_gzip_encoded_responses_are_decoded(tmp_path, pages):
    import io

    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    body = page_bytes(dataclasses.replace(pages[0], charset="gbk"))
    packed = gzip.compress(body)
    chunked = (
        b"".join(
            b"%x\r\n%s\r\n" % (len(packed[i : i + 500]), packed[i : i + 500])
            for i in range(0, len(packed), 500)
        )
        + b"0\r\n\r\n"
    )
    headers = StatusAndHeaders(
        "200 OK",
        [
            ("Content-Type", "text/html;charset=GBK"),
            ("Content-Encoding", "gzip"),
            ("Transfer-Encoding", "chunked"),
        ],
        protocol="HTTP/1.1",
    )
    path = tmp_path / "x.warc.gz"
    with open(path, "wb") as f:
        writer = WARCWriter(f, gzip=True)
        record = writer.create_warc_record(
            pages[0].url, "response", payload=io.BytesIO(chunked), http_headers=headers
        )
        writer.write_record(record)
    table, _ = read_file(path, "warc")
    (row,) = table.to_pylist()
    assert row["drop"] is None and json.loads(row["meta"])["charset"] == "gb18030"
    assert row["text"] == body.decode("gb18030")
