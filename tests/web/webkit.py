"""Web test inputs: real text (the demo corpus) in realistic page templates, written as
WARC (warcio's writer), WET and HTML files."""

from __future__ import annotations

import html as html_lib
import io
import random
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from dataforge.io.input_config import InputConfig, ReadConfig
from dataforge.io.readers import InputTask, TaskReader

NAV = {
    "zh": [
        "首页",
        "新闻中心",
        "国内要闻",
        "国际频道",
        "财经观察",
        "科技前沿",
        "体育赛事",
        "联系我们",
    ],
    "en": ["Home", "Library Reference", "Tutorials", "Downloads", "Community", "About us"],
}
FOOTER = {
    "zh": "版权所有 © 2024 人民日报社 京ICP备05068187号 违法和不良信息举报电话：010-65363263",
    "en": "Copyright © 2001-2024 Python Software Foundation. All rights reserved. Privacy policy.",
}
COOKIE = {
    "zh": "本网站使用Cookie以提升您的浏览体验，继续浏览即表示您同意我们使用Cookie。",
    "en": "We use cookies to improve your experience. By continuing you accept our cookie policy.",
}
RELATED = {"zh": "相关阅读", "en": "Related articles"}
# warcio stamps records with uuid4 ids and the clock; fixed stamps give a file the same bytes
# on every run, so tests that mutate those bytes (test_web_fuzz) meet the same mutants.
WRITTEN_AT = "2024-03-01T08:00:00Z"


@dataclass
class Page:
    url: str
    title: str
    paragraphs: list[str]
    lang: str
    date: str = "2024-03-01T08:00:00Z"
    charset: str = "utf-8"
    header_charset: bool = True
    related: list[str] = field(default_factory=list)

    @property
    def body_text(self) -> str:
        return "\n".join(self.paragraphs)


def page_html(page: Page) -> str:
    """A news/documentation page: navigation bar, cookie banner, article, sidebar of
    related links, footer."""
    esc = html_lib.escape
    nav = "".join(
        f'<li><a href="/{i}">{esc(item)}</a></li>' for i, item in enumerate(NAV[page.lang])
    )
    related = "".join(
        f'<li><a href="/related/{i}">{esc(title)}</a></li>' for i, title in enumerate(page.related)
    )
    paragraphs = "".join(f"<p>{esc(p)}</p>" for p in page.paragraphs)
    return (
        f'<!DOCTYPE html><html lang="{page.lang}"><head>'
        f'<meta charset="{page.charset}"><title>{esc(page.title)}</title>'
        f'<link rel="canonical" href="{esc(page.url)}"></head><body>'
        f'<header><div class="logo">LOGO</div><nav class="main-nav"><ul>{nav}</ul></nav></header>'
        f'<div id="cookie-banner" class="cookie-consent">{esc(COOKIE[page.lang])}'
        "<button>OK</button></div>"
        f'<main><article><h1>{esc(page.title)}</h1><div class="content">{paragraphs}</div>'
        f'</article><aside class="sidebar"><h3>{RELATED[page.lang]}</h3><ul>{related}</ul></aside>'
        f'</main><footer class="site-footer"><p>{esc(FOOTER[page.lang])}</p></footer>'
        "</body></html>"
    )


def page_bytes(page: Page) -> bytes:
    return page_html(page).encode(page.charset, errors="xmlcharrefreplace")


def make_pages(
    zh_articles: Sequence[str], en_docs: Sequence[str], site_zh: str = "news.example.cn"
) -> list[Page]:
    """One page per text: paragraphs split at line breaks (Chinese at 。 when one line)."""
    pages = []
    for i, text in enumerate(zh_articles):
        paras = [p for p in text.split("\n") if p.strip()]
        if len(paras) == 1:
            paras = [s + "。" for s in paras[0].split("。") if s.strip()]
        pages.append(
            Page(
                f"http://{site_zh}/2024/03/{i:04d}.html",
                paras[0][:20],
                paras,
                "zh",
                related=[zh_articles[(i + k) % len(zh_articles)][:18] for k in (1, 2, 3)],
            )
        )
    for i, text in enumerate(en_docs):
        paras = [p for p in text.split("\n\n") if p.strip()]
        pages.append(
            Page(
                f"https://docs.example.org/library/{i:04d}.html",
                paras[0][:40],
                paras,
                "en",
                related=[en_docs[(i + k) % len(en_docs)][:30] for k in (1, 2)],
            )
        )
    return pages


def record_ids(filename: str) -> Iterator[str]:
    """``WARC-Record-ID``s drawn from a generator seeded by the file's name."""
    rng = random.Random(filename)
    while True:
        yield f"<urn:uuid:{uuid.UUID(int=rng.getrandbits(128), version=4)}>"


def warcinfo_record(writer: WARCWriter, filename: str, record_id: str):
    """warcio's ``create_warcinfo_record`` with a fixed id and date."""
    payload = b"software: test\r\n"
    headers = StatusAndHeaders(
        "",
        [
            ("WARC-Type", "warcinfo"),
            ("WARC-Record-ID", record_id),
            ("WARC-Filename", filename),
            ("WARC-Date", WRITTEN_AT),
        ],
        protocol=writer.warc_version,
    )
    return writer.create_warc_record(
        "", "warcinfo", warc_headers=headers, payload=io.BytesIO(payload), length=len(payload)
    )


def write_warc(
    path: Path,
    pages: Sequence[Page],
    *,
    gzip: bool = True,
    version: str = "1.1",
    extras: bool = True,
) -> Path:
    """A WARC of one ``response`` per page, each after its ``request``; with ``extras`` a
    ``warcinfo`` first and an image response in the middle."""
    ids = record_ids(path.name)
    with open(path, "wb") as f:
        writer = WARCWriter(f, gzip=gzip, warc_version=version)
        if extras:
            writer.write_record(warcinfo_record(writer, path.name, next(ids)))
        for i, page in enumerate(pages):
            stamp = {"WARC-Record-ID": next(ids), "WARC-Date": page.date}
            ctype = f"text/html; charset={page.charset}" if page.header_charset else "text/html"
            request = StatusAndHeaders("GET / HTTP/1.1", [("Host", "x")], is_http_request=True)
            writer.write_record(
                writer.create_warc_record(
                    page.url, "request", http_headers=request, warc_headers_dict=stamp
                )
            )
            headers = StatusAndHeaders("200 OK", [("Content-Type", ctype)], protocol="HTTP/1.1")
            record = writer.create_warc_record(
                page.url,
                "response",
                payload=io.BytesIO(page_bytes(page)),
                http_headers=headers,
                warc_headers_dict={**stamp, "WARC-Record-ID": next(ids)},
            )
            writer.write_record(record)
            if extras and i == len(pages) // 2:
                image = StatusAndHeaders(
                    "200 OK", [("Content-Type", "image/png")], protocol="HTTP/1.1"
                )
                writer.write_record(
                    writer.create_warc_record(
                        "http://img.example.cn/a.png",
                        "response",
                        payload=io.BytesIO(b"\x89PNG...."),
                        http_headers=image,
                        warc_headers_dict={"WARC-Record-ID": next(ids), "WARC-Date": WRITTEN_AT},
                    )
                )
    return path


def wet_text(page: Page, boilerplate: bool) -> str:
    """A page as Common Crawl's WET has it: every text line, with ``boilerplate`` the
    navigation bar and the footer too."""
    lines = [page.title, page.body_text]
    if boilerplate:
        lines = [" ".join(NAV[page.lang]), *lines, FOOTER[page.lang]]
    return "\n".join(lines)


def write_wet(
    path: Path, pages: Sequence[Page], *, gzip: bool = True, boilerplate: bool = False
) -> Path:
    """Common Crawl style WET: a warcinfo, then one ``conversion`` record per page."""
    with open(path, "wb") as f:
        writer = WARCWriter(f, gzip=gzip, warc_version="1.0")
        ids = record_ids(path.name)
        writer.write_record(warcinfo_record(writer, path.name, next(ids)))
        for page in pages:
            text = wet_text(page, boilerplate).encode()
            record = writer.create_warc_record(
                page.url,
                "conversion",
                payload=io.BytesIO(text),
                warc_headers_dict={
                    "Content-Type": "text/plain",
                    "WARC-Date": page.date,
                    "WARC-Record-ID": next(ids),
                },
            )
            writer.write_record(record)
    return path


def write_html_dir(root: Path, pages: Sequence[Page]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for i, page in enumerate(pages):
        (root / f"page-{i:04d}.{'html' if i % 2 == 0 else 'htm'}").write_bytes(page_bytes(page))
    return root


def read_task(task: InputTask, source: InputConfig, read: ReadConfig | None = None) -> pa.Table:
    reader = TaskReader(task, source, read or ReadConfig())
    return pa.concat_tables(list(reader.batches()))


def read_file(path: Path, fmt: str, **source) -> tuple[pa.Table, TaskReader]:
    src = InputConfig(name="web", path=str(path), format=fmt, **source)
    task = InputTask("000-000000", "web", str(path), path.name, path.stat().st_size)
    reader = TaskReader(task, src, ReadConfig())
    return pa.concat_tables(list(reader.batches())), reader


def run_barrier(
    tmp: Path, op, table: pa.Table, batch: int, memory_bytes: int | None = None
) -> tuple[dict, pa.Table]:
    """A barrier as the runtime runs it: ``prepare`` per task of ``batch`` rows, ``plan``
    over the parts (within ``memory_bytes``, spilling to ``<work>/spill``), ``apply`` to
    each prepared part with its decision."""
    import tempfile

    import numpy as np
    import pyarrow.parquet as pq

    from dataforge.ops.barrier import BarrierContext

    work = Path(tempfile.mkdtemp(prefix=f"{op.name}-{batch}-", dir=tmp))
    parts = {}
    for start in range(0, table.num_rows, batch):
        task = f"t{start // batch:06d}"
        part = table.slice(start, batch)
        part = part.set_column(6, "_ord", pa.array(np.arange(part.num_rows, dtype=np.int64)))
        parts[task] = work / f"{task}.parquet"
        pq.write_table(op.prepare(part), parts[task])
    ctx = BarrierContext(
        parts=parts,
        decision_dir=work / "decisions",
        audit_dir=work / "OUT" / op.name,
        num_cpus=2,
        seed=0,
        source_stats={},
        sources={},
        memory_bytes=memory_bytes,
        spill_dir=None if memory_bytes is None else work / "spill",
    )
    if ctx.spill_dir is not None:
        ctx.spill_dir.mkdir()  # as the barrier task stages it
    summary = op.plan(ctx)
    if ctx.spill_dir is not None:
        assert list(ctx.spill_dir.iterdir()) == []  # the planner's spill files are gone
    outputs = []
    for task in sorted(parts):
        path = ctx.decision_dir / f"{task}.parquet"
        decision = pq.read_table(path) if path.exists() else None
        outputs.append(op.apply(pq.read_table(parts[task]), decision))
    return summary, pa.concat_tables(outputs)


def records(texts: list[str], metas: list[dict] | None = None, lang: str = "zh") -> pa.Table:
    """A batch in the record schema, ids ``d00000``..."""
    import json

    from dataforge.records import BASE_SCHEMA

    n = len(texts)
    return pa.table(
        {
            "id": [f"d{i:05d}" for i in range(n)],
            "text": texts,
            "source": ["web"] * n,
            "lang": [lang] * n,
            "meta": [json.dumps(m, ensure_ascii=False) for m in (metas or [{}] * n)],
            "drop": [None] * n,
            "_ord": list(range(n)),
        },
        schema=BASE_SCHEMA,
    )
