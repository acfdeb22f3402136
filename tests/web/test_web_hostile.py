"""Hostile WARC, WET and HTML inputs: every record costs bounded memory, none fails the
read, every lost byte range is a counted ``warc:malformed`` drop, drop reasons come from a
fixed set, and charset labels that cannot be right are not trusted."""

from __future__ import annotations

import codecs
import gzip
import io
import json
import re
import tracemalloc
import zlib
from html.parser import HTMLParser
from pathlib import Path

import brotli
import pytest
from hypothesis import given
from hypothesis import strategies as st
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from dataforge.io.input_config import InputConfig, ReadConfig
from dataforge.io.readers import InputTask, TaskReader
from dataforge.io.web_pages import canonical_url

PAGE = "<html><head><title>t</title></head><body><p>{}</p></body></html>"
TEXT = "Grüße aus Zürich, 你好世界, ça va. " * 20
BOMB_BYTES = 64 << 20
MEMORY_BOUND = 40 << 20  # warcio inflates 16 KB of a member at a time (about 4 MB here)


def page(text: str = TEXT) -> bytes:
    return PAGE.format(text).encode()


def response(url: str, body: bytes, headers=(), rtype: str = "response", ctype="text/html"):
    def make(writer: WARCWriter):
        http = StatusAndHeaders("200 OK", [("Content-Type", ctype), *headers], protocol="HTTP/1.1")
        return writer.create_warc_record(url, rtype, payload=io.BytesIO(body), http_headers=http)

    return make


def plain(url: str, body: bytes, rtype: str, warc_headers: dict | None = None):
    """A record without HTTP headers (metadata, resource, conversion...)."""

    def make(writer: WARCWriter):
        headers = {"Content-Type": "text/plain", **(warc_headers or {})}
        return writer.create_warc_record(
            url, rtype, payload=io.BytesIO(body), warc_headers_dict=headers
        )

    return make


def write(path: Path, makers, gz: bool = True, prefix: bytes = b"") -> Path:
    with open(path, "wb") as f:
        f.write(prefix)
        writer = WARCWriter(f, gzip=gz)
        for make in makers:
            writer.write_record(make(writer))
    return path


def read(path: Path, fmt: str = "warc", **read_config) -> tuple[list[dict], TaskReader]:
    src = InputConfig(name="web", path=str(path), format=fmt)
    task = InputTask("000-000000", "web", str(path), path.name, path.stat().st_size)
    reader = TaskReader(task, src, ReadConfig(**read_config))
    return [row for batch in reader.batches() for row in batch.to_pylist()], reader


def drops(rows: list[dict]) -> list[str | None]:
    return [r["drop"] for r in rows]


def urls(rows: list[dict]) -> list[str]:
    return [json.loads(r["meta"])["url"] for r in rows if r["drop"] is None]


def zero_gzip(n: int, head: bytes = b"", tail: bytes = b"") -> bytes:
    """One gzip member of ``head``, ``n`` zero bytes and ``tail``, built without holding
    the zeros (level 1: the fastest to build)."""
    packer = zlib.compressobj(1, zlib.DEFLATED, 31)
    block = bytes(1 << 20)
    parts = [packer.compress(head)]
    parts += [packer.compress(block) for _ in range(n >> 20)]
    return b"".join([*parts, packer.compress(tail), packer.flush()])


def zero_record(rtype: str, n: int) -> bytes:
    """A gzip-per-record WARC record of ``n`` zero bytes (no HTTP headers)."""
    head = (
        f"WARC/1.1\r\nWARC-Type: {rtype}\r\nWARC-Record-ID: <urn:uuid:{rtype}>\r\n"
        f"WARC-Date: 2024-01-01T00:00:00Z\r\nContent-Type: text/plain\r\n"
        f"Content-Length: {n}\r\n\r\n"
    ).encode()
    return zero_gzip(n, head, b"\r\n\r\n")


def peak_memory(fn):
    tracemalloc.start()
    try:
        result = fn()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.fixture(scope="module")
def bombs(tmp_path_factory) -> dict[str, Path]:
    """Files of a few KB whose first record inflates to 64 MB (its payload's content
    coding, or the record's own gzip member), then a good page."""
    tmp = tmp_path_factory.mktemp("bombs")
    zeros = zero_gzip(BOMB_BYTES)
    br = brotli.compress(bytes(BOMB_BYTES), quality=1)
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(zeros), zeros)
    gz = [("Content-Encoding", "gzip")]
    url = "http://a.example/"
    good = response("http://good.example/", page())
    out = {
        "request": write(tmp / "1.warc.gz", [response(url, zeros, gz, "request"), good]),
        "response_gzip": write(tmp / "2.warc.gz", [response(url, zeros, gz), good]),
        "response_br": write(
            tmp / "3.warc.gz", [response(url, br, [("Content-Encoding", "br")]), good]
        ),
        "response_chunked": write(
            tmp / "4.warc.gz",
            [response(url, chunked, [*gz, ("Transfer-Encoding", "chunked")]), good],
        ),
    }
    for rtype in ("metadata", "resource"):
        out[rtype] = write(tmp / f"{rtype}.warc.gz", [good], prefix=zero_record(rtype, BOMB_BYTES))
    out["wet"] = write(
        tmp / "bomb.warc.wet.gz",
        [plain("http://b.example/", page(), "conversion")],
        prefix=zero_record("conversion", BOMB_BYTES),
    )
    return out


@pytest.mark.parametrize(
    ("name", "first_drop"),
    [
        ("request", "warc:record_type:request"),
        ("response_gzip", "too_long"),
        ("response_br", "too_long"),
        ("response_chunked", "too_long"),
        ("metadata", "warc:record_type:metadata"),
        ("resource", "warc:record_type:resource"),
        ("wet", "too_long"),
    ],
)
def test_an_inflation_bomb_is_read_in_bounded_memory(bombs, name, first_drop):
    fmt = "wet" if name == "wet" else "warc"
    (rows, _), peak = peak_memory(lambda: read(bombs[name], fmt))
    assert drops(rows) == [first_drop, None]
    assert peak < MEMORY_BOUND, f"{peak / 1e6:.0f} MB"


def test_a_header_line_bomb_costs_its_record_only(tmp_path):
    pad = "X-Pad: " + "a" * (64 << 20) + "\r\n"
    head = f"WARC/1.1\r\nWARC-Type: metadata\r\n{pad}Content-Length: 1\r\n\r\nx\r\n\r\n"
    bomb = gzip.compress(head.encode(), compresslevel=1)
    path = write(tmp_path / "x.warc.gz", [response("http://b.example/", page())], prefix=bomb)
    (rows, reader), peak = peak_memory(lambda: read(path))
    assert drops(rows) == ["warc:malformed", None]
    assert urls(rows) == ["http://b.example/"]
    assert reader.events == {"warc_malformed:header_too_long": 1}
    assert peak < MEMORY_BOUND, f"{peak / 1e6:.0f} MB"


def test_a_response_without_target_uri_is_one_malformed_drop(tmp_path):
    def no_uri(writer):
        record = response("http://a/", page())(writer)
        record.rec_headers.remove_header("WARC-Target-URI")
        return record

    path = write(tmp_path / "x.warc.gz", [no_uri, response("http://b.example/", page())])
    rows, reader = read(path)
    assert drops(rows) == ["warc:malformed", None]
    assert reader.events == {"warc_malformed:AttributeError": 1}


@pytest.mark.parametrize(
    "label", ["rot13", "base64", "zlib", "undefined", "utf-16", "utf-32", "unicode_escape"]
)
@pytest.mark.parametrize("where", ["header", "meta"])
def test_charset_labels_that_cannot_be_right_are_not_trusted(tmp_path, label, where):
    body, ctype = page(), "text/html"
    if where == "header":
        ctype = f"text/html; charset={label}"
    else:
        body = body.replace(b"<head>", f'<head><meta charset="{label}">'.encode())
    path = write(tmp_path / "x.warc.gz", [response("http://a.example/", body, ctype=ctype)])
    (row,), _ = read(path)
    assert row["drop"] is None and json.loads(row["meta"])["charset"] == "utf-8"
    assert row["text"] == body.decode("utf-8")


def test_a_bom_decides_and_a_utf16_label_counts_with_it(tmp_path):
    text = page().decode()
    path = write(
        tmp_path / "x.warc.gz",
        [
            response(
                "http://a.example/",
                codecs.BOM_UTF16_LE + text.encode("utf-16-le"),
                ctype="text/html; charset=utf-16",
            ),
            response("http://b.example/", codecs.BOM_UTF8 + page(), ctype="text/html; charset=gbk"),
        ],
    )
    rows, _ = read(path)
    assert [json.loads(r["meta"])["charset"] for r in rows] == ["utf-16-le", "utf-8"]
    assert [r["text"] for r in rows] == [text, text]


PAGES = [response(f"http://p{i}.example/", page(f"page {i} " * 40)) for i in range(4)]
PAGE_URLS = [f"http://p{i}.example/" for i in range(4)]


def plain_records(path: Path) -> list[bytes]:
    """The records of a plain WARC as written (headers, block, blank lines)."""
    return re.split(rb"(?=WARC/1\.[01]\r\n)", path.read_bytes())[1:]


def with_length(record: bytes, value: bytes) -> bytes:
    """``record`` with its WARC ``Content-Length`` (the first in it) set to ``value``."""
    return re.sub(rb"Content-Length: [^\r]*", b"Content-Length: " + value, record, count=1)


LIES = [b"999999", b"20", b"3383D", b"-5", b""]


@pytest.mark.parametrize("lie", LIES)
def test_a_content_length_lie_in_a_plain_warc_costs_that_record_only(tmp_path, lie):
    path = write(tmp_path / "x.warc", PAGES, gz=False)
    records = plain_records(path)
    records[1] = with_length(records[1], lie)
    path.write_bytes(b"".join(records))
    rows, reader = read(path)
    assert drops(rows) == [None, "warc:malformed", None, None]
    assert [r["id"] for r in rows] == [f"web/x.warc:{k}" for k in range(1, 5)]
    assert urls(rows) == [PAGE_URLS[0], *PAGE_URLS[2:]]
    assert reader.events.total() == 1


@pytest.mark.parametrize("lie", LIES)
def test_a_content_length_lie_in_a_gzip_member_costs_that_record_only(tmp_path, lie):
    records = plain_records(write(tmp_path / "x.warc", PAGES, gz=False))
    records[1] = with_length(records[1], lie)
    path = tmp_path / "x.warc.gz"
    path.write_bytes(b"".join(gzip.compress(r) for r in records))
    rows, reader = read(path)
    assert drops(rows) == [None, "warc:malformed", None, None]
    assert urls(rows) == [PAGE_URLS[0], *PAGE_URLS[2:]]
    assert reader.events.total() == 1


def test_two_records_spliced_into_one_header_block_are_one_malformed_drop(tmp_path):
    """Lost bytes join record 1's headers to record 2's: read by its first ``WARC-Type``
    and ``WARC-Target-URI``, it would be page 2 under page 1's address."""
    records = plain_records(write(tmp_path / "x.warc", PAGES, gz=False))
    head, tail = records[1], records[2]
    records[1:3] = [head[: head.index(b"Content-Type:")] + tail[tail.index(b"WARC-Date:") :]]
    path = tmp_path / "x.warc"
    path.write_bytes(b"".join(records))
    rows, reader = read(path)
    assert drops(rows) == [None, "warc:malformed", None]
    assert urls(rows) == [PAGE_URLS[0], PAGE_URLS[3]]
    assert reader.events == {"warc_malformed:repeated_header": 1}


def test_a_record_whose_line_break_before_it_is_lost_is_still_read(tmp_path):
    """Record 1 loses its last bytes and the blank lines after it: record 2 starts
    mid-line, where the search for the next record still finds it."""
    records = plain_records(write(tmp_path / "x.warc", PAGES, gz=False))
    records[1] = records[1][:-10]
    path = tmp_path / "x.warc"
    path.write_bytes(b"".join(records))
    rows, reader = read(path)
    assert drops(rows) == [None, "warc:malformed", None, None]
    assert urls(rows) == [PAGE_URLS[0], *PAGE_URLS[2:]]
    assert reader.events.total() == 1


def record_ends(data: bytes, gz: bool) -> list[int]:
    """Where each record's bytes end (a plain record's 4 blank bytes after it excluded),
    after a 0 for the file's start."""
    if gz:
        return [m.start() for m in re.finditer(b"\x1f\x8b\x08", data)] + [len(data)]
    starts = [m.start() for m in re.finditer(rb"WARC/1\.[01]\r\n", data)]
    return [0, *(s - 4 for s in starts[1:]), len(data) - 4]


@pytest.mark.parametrize("gz", [True, False])
def test_a_file_cut_anywhere_keeps_whole_records_and_counts_the_rest(tmp_path, gz):
    path = write(tmp_path / ("x.warc.gz" if gz else "x.warc"), PAGES, gz=gz)
    data = path.read_bytes()
    ends = record_ends(data, gz)
    cuts = {*range(1, len(data), max(1, len(data) // 80)), *(e + 7 for e in ends[:-1])}
    for cut in sorted(cuts):
        path.write_bytes(data[:cut])
        rows, _ = read(path)
        whole = sum(1 for end in ends[1:] if end <= cut)
        assert urls(rows) == PAGE_URLS[:whole], cut
        lost = cut > (ends[whole] + (0 if gz else 4) if whole else 0)
        assert drops(rows).count("warc:malformed") == int(lost), cut
        assert len(rows) == whole + int(lost), cut


def test_a_gzip_cut_inside_the_first_record_counts_a_malformed_drop(tmp_path):
    path = write(tmp_path / "x.warc.gz", PAGES)
    path.write_bytes(path.read_bytes()[:200])
    rows, reader = read(path)
    assert drops(rows) == ["warc:malformed"]
    assert reader.events.total() == 1


def test_warc_types_outside_the_standard_are_one_reason(tmp_path):
    makers = [plain("http://a/", b"x", f"type-{i}-{'z' * i}") for i in range(50)]
    path = write(tmp_path / "x.warc.gz", [*makers, plain("http://a/", b"x", "metadata")])
    rows, _ = read(path)
    assert set(drops(rows[:50])) == {"warc:record_type:other"}
    assert drops(rows[50:]) == ["warc:record_type:metadata"]


CANONICAL = '<link href="http://x.example/a?b=1&amp;c=2" rel="canonical">'


@pytest.mark.timeout(120)
def test_canonical_link_before_thousands_of_open_link_tags(tmp_path):
    """Unclosed ``<link`` tags made the old pattern cubic; the scan is one pass over tags."""
    filler = '<link rel="canonical" ' * 2700  # 59 KB: inside the scanned 64K characters
    html = f"<html><head>{CANONICAL}{filler}</head><body><p>{TEXT}</p></body></html>"
    path = tmp_path / "p.html"
    path.write_text(html, encoding="utf-8")
    (row,), _ = read(path, "html")
    assert json.loads(row["meta"])["url"] == "http://x.example/a?b=1&c=2"
    assert canonical_url("<link " * 10000 + CANONICAL) == "http://x.example/a?b=1&c=2"
    assert canonical_url("<link " * 20000 + CANONICAL) is None  # past 64K characters


def test_a_cut_html_gz_page_is_one_malformed_drop(tmp_path):
    path = tmp_path / "p.html.gz"
    path.write_bytes(gzip.compress(page())[:-12])
    rows, reader = read(path, "html")
    assert drops(rows) == ["warc:malformed"]
    assert reader.events.total() == 1


class _FirstCanonical(HTMLParser):
    """The reference: the standard library's HTML parser."""

    def __init__(self) -> None:
        super().__init__()
        self.url: str | None = None

    def handle_starttag(self, tag, attrs):
        values = dict(reversed(attrs))  # the first of a repeated attribute counts
        rel, href = values.get("rel") or "", values.get("href")
        if self.url is None and tag == "link" and href and "canonical" in rel.lower().split():
            self.url = href


ATTRIBUTE = st.tuples(
    st.sampled_from(["rel", "REL", "href", "Href", "type", "media", "data-x"]),
    st.sampled_from(["canonical", "Canonical", "alternate canonical", "stylesheet", "",
                     "http://a.example/x?y=1&amp;z=2", "/rel/path", "http://b.example/"]),
    st.sampled_from(['"', "'", ""]),
)  # fmt: skip


@given(st.lists(st.lists(ATTRIBUTE, max_size=4), max_size=12), st.sampled_from(["", "<p>x</p>"]))
def test_canonical_url_agrees_with_an_html_parser(tags, filler):
    parts = []
    for attributes in tags:
        rendered = [
            f"{name}={quote}{value}{quote}" if value or quote else f'{name}=""'
            for name, value, quote in attributes
            if " " not in value or quote
        ]
        parts.append(f"<link {' '.join(rendered)}>{filler}")
    page = f"<html><head>{''.join(parts)}</head><body></body></html>"
    reference = _FirstCanonical()
    reference.feed(page)
    assert canonical_url(page) == reference.url
