"""The extract op on WARC pages: body kept, navigation, banners, link lists and footer
lost; empty extractions counted by reason; non-HTML records untouched."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from webkit import COOKIE, FOOTER, NAV, RELATED, read_file, write_warc

from dataforge.ops.base import op_class
from dataforge.ops.extract import Extract
from dataforge.records import BASE_SCHEMA


def html_batch(pages_html: list[str], meta: dict | None = None) -> pa.Table:
    n = len(pages_html)
    metas = [json.dumps(meta if meta is not None else {"content": "html"})] * n
    return pa.table(
        {
            "id": [f"p{i}" for i in range(n)],
            "text": pages_html,
            "source": ["web"] * n,
            "lang": ["zh"] * n,
            "meta": metas,
            "drop": [None] * n,
            "_ord": list(range(n)),
        },
        schema=BASE_SCHEMA,
    )


def test_registry_names_the_op():
    assert op_class("extract") is Extract


@pytest.mark.parametrize("engine", ["trafilatura", "resiliparse"])
def test_body_kept_boilerplate_lost_on_every_page(tmp_path, pages, engine):
    path = write_warc(tmp_path / "x.warc.gz", pages)
    table, _ = read_file(path, "warc")
    op = Extract(Extract.Config(engine=engine))
    out = [r for r in op(table).to_pylist() if r["drop"] is None]
    assert len(out) == len(pages) and op.events["extract:pages"] == len(pages)
    for page, row in zip(pages, out, strict=True):
        text = row["text"]
        lines = set(text.split("\n"))
        flat = " ".join(text.split())  # HTML whitespace is not significant
        missing = [p for p in page.paragraphs if " ".join(p.split()) not in flat]
        assert not missing, (page.url, missing[:2])
        assert FOOTER[page.lang] not in text and COOKIE[page.lang] not in text
        assert not lines & set(NAV[page.lang]), page.url
        assert RELATED[page.lang] not in lines
        assert all(title not in lines for title in page.related)
        assert json.loads(row["meta"])["content"] == "text"


@pytest.mark.parametrize("engine", ["trafilatura", "resiliparse"])
def test_empty_extractions_are_counted_by_reason(engine):
    links = (
        "<html><body><ul>"
        + "".join(f'<li><a href="/{i}">栏目{i}</a></li>' for i in range(30))
        + "</ul></body></html>"
    )
    empty = "<html><head><title></title></head><body><div></div></body></html>"
    article = (
        "<html><body><article><p>"
        + "今天天气很好，我们去公园散步，看到很多人在锻炼身体。" * 3
        + "</p></article></body></html>"
    )
    out = Extract(Extract.Config(engine=engine, min_chars=200))(html_batch([links, empty, article]))
    assert out.column("drop").to_pylist() == [
        "extract:no_main_text",
        "extract:no_text",
        "extract:too_short",
    ]
    assert out.column("text").to_pylist() == ["", "", ""]


def test_records_that_are_not_html_pass_unchanged():
    batch = html_batch(["<p>not parsed</p>", "plain"], meta={"content": "text"})
    out = Extract(Extract.Config())(batch)
    assert out.to_pylist() == batch.to_pylist()


def test_bad_config_names_the_key():
    with pytest.raises(ValueError, match="extract.min_chars=-1"):
        Extract.Config(min_chars=-1)
    with pytest.raises(ValueError, match="'balanced', 'precision', 'recall'"):
        Extract.Config(favor="speed")
