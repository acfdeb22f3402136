"""Site boilerplate on small crawls: line_dedup finds lines repeated across one domain's
pages (a share of them), which a crawl-wide count never reaches; a site of 20 pages with
its navigation at the top and bottom goes through pipelines/web_zh.yaml with every page kept
and no navigation left."""

from __future__ import annotations

import html as html_lib
import json

import pytest
from test_web_recipe import cleaned, recipe, run, sample_dicts
from webkit import records, run_barrier

from dataforge.ops.line_dedup import LineDedup, domain_hash

NAV = "| [ ‹ 教程 ] | [首页][目录][索引] | [ Common notation >> ] |"
SHARED = "本站文章均为原创，转载请注明出处并附上原文链接。"
HALF = "本章示例代码可在附录中找到。"
NAMES = "甲乙丙丁戊己庚辛壬癸子丑寅卯辰巳午未申酉戌亥春夏秋冬东南西北"


def body(i: int) -> str:
    """A distinct line per i (digits would all compare as 0)."""
    return f"{NAMES[i // 30]}{NAMES[i % 30]}篇笔记：整理了这一章的例子，并补充了常见错误的说明。"


def site_records():
    """Site A: 6 pages (half under www.) with NAV, HALF on 3 of them, SHARED on 2; site B:
    30 pages with SHARED on 2; site C: 2 pages, both with NAV; 4 documents without a URL
    with NAV."""
    texts, metas = [], []
    for i in range(6):
        host = "www.notes.example.cn" if i % 2 else "notes.example.cn"
        lines = [NAV, body(i)] + ([SHARED] if i < 2 else []) + ([HALF] if i % 2 else []) + [NAV]
        texts.append("\n".join(lines))
        metas.append({"url": f"https://{host}/ch{i}.html"})
    for i in range(30):
        texts.append("\n".join([body(100 + i)] + ([SHARED] if i < 2 else [])))
        metas.append({"url": f"http://blog.example.org/p/{i}"})
    for i in range(2):
        texts.append("\n".join([NAV, body(300 + i)]))
        metas.append({"url": f"http://tiny.example.net/{i}"})
    for i in range(4):
        texts.append("\n".join([NAV, body(200 + i)]))
        metas.append({})
    return texts, metas


def run_sites(tmp_path, batch, **config):
    texts, metas = site_records()
    op = LineDedup(LineDedup.Config(**config))
    return texts, run_barrier(tmp_path, op, records(texts, metas), batch)


def test_a_line_on_most_pages_of_a_small_site_goes(tmp_path):
    texts, (summary, out) = run_sites(tmp_path, 1000, min_docs=20, min_doc_chars=0)
    got = out.column("text").to_pylist()
    # site A: NAV on 6 of 6 pages and HALF on 3 of 6 (>= 50%, >= 3) go; SHARED on 2 stays
    for i in range(6):
        assert got[i] == "\n".join([body(i)] + ([SHARED] if i < 2 else []))
    # site B (2 of 30), site C (2 of 2, under site_min_docs) and pages without a URL stay
    assert got[6:] == texts[6:]
    assert summary["site_frequent_lines"] == 2 and summary["frequent_lines"] == 0
    assert summary["domains"] == 3 and summary["documents_changed"] == 6


def test_site_rule_off_and_split_invariance(tmp_path):
    texts, (_, off) = run_sites(tmp_path, 1000, min_docs=20, site_fraction=None)
    assert off.column("text").to_pylist() == texts
    _, (base_summary, base) = run_sites(tmp_path, 1000, min_docs=20)
    for batch in (1, 7):
        _, (summary, out) = run_sites(tmp_path, batch, min_docs=20)
        assert out.select(["id", "text", "drop"]).to_pylist() == (
            base.select(["id", "text", "drop"]).to_pylist()
        )
        assert summary == base_summary


def test_domain_of_a_record():
    a = domain_hash(json.dumps({"url": "https://WWW.Notes.example.cn:443/x"}))
    assert a == domain_hash(json.dumps({"url": "http://notes.example.cn/y"})) != 0
    assert domain_hash(json.dumps({"url_normalized": "http://b.cn/", "url": "http://a.cn/"})) == (
        domain_hash(json.dumps({"url": "http://b.cn/z"}))
    )
    assert domain_hash("{}") == domain_hash(None) == domain_hash('{"url": "not a url"}') == 0
    with pytest.raises(ValueError, match="line_dedup.site_fraction=1.5"):
        LineDedup.Config(site_fraction=1.5)


def tutorial_page(url: str, titles: list[str], i: int, paragraphs: list[str]) -> str:
    """A hand-written tutorial page: its navigation bar (previous and next chapter, home,
    contents, index), a table of links in plain markup that nothing declares as navigation,
    at the top and the bottom. Its previous/next titles change from page to page, so no
    line of it but the middle one repeats across the site."""
    esc = html_lib.escape
    prev, nxt = esc(titles[i - 1]), esc(titles[(i + 1) % len(titles)])
    bar = (
        f'<table><tr><td>[ <a href="prev.html">‹ {prev}</a> ]</td></tr>'
        '<tr><td>[<a href="/">首页</a>][<a href="toc.html">目录</a>][<a href="ix.html">索引</a>]'
        f'</td></tr><tr><td>[ <a href="next.html">{nxt} &gt;&gt;</a> ]</td></tr></table>'
    )
    body = "".join(f"<p>{esc(p)}</p>" for p in paragraphs)
    return (
        f'<html><head><meta charset="utf-8"><title>{esc(titles[i])}</title>'
        f'<link rel="canonical" href="{url}"></head><body>{bar}<h1>{esc(titles[i])}</h1>'
        f"{body}{bar}</body></html>"
    )


def test_site_of_20_pages_through_the_recipe(tmp_path, demo_reader):
    # short articles in prose (not poems or captions, which quality_filter drops for
    # themselves): on such pages the repeated bar alone fails the line rules
    articles = [
        t
        for t in demo_reader("news_zh", 400)
        if 200 <= len(t) <= 450 and all(p[-1] in "。！？”）" for p in t.split("\n")[1:] if p)
    ][:20]
    assert len(articles) == 20
    site = tmp_path / "site"
    site.mkdir()
    bodies = {}
    titles = [f"第{NAMES[i]}章 {text.split(chr(10))[0][:12]}" for i, text in enumerate(articles)]
    for i, text in enumerate(articles):
        paragraphs = [p for p in text.split("\n")[1:] if p.strip()]
        url = f"http://tutorial.example.cn/ch{i:02d}.html"
        bodies[url] = paragraphs
        page = tutorial_page(url, titles, i, paragraphs)
        (site / f"ch{i:02d}.html").write_text(page, encoding="utf-8")
    pipeline = recipe(
        tmp_path, f'  - {{name: crawl, path: "{site}/*.html", format: html, lang: zh}}'
    )
    manifest = run(pipeline, tmp_path / "out")
    counts = manifest["counts"]["by_source"]["crawl"]
    assert counts["input"] == 20 and counts["kept"] == 20, counts["dropped"]
    for sample in sample_dicts(tmp_path / "out"):
        meta = sample["meta"] if isinstance(sample["meta"], dict) else json.loads(sample["meta"])
        text = sample["text"]
        assert "目录" not in text and "‹" not in text and ">>" not in text, text[:200]
        flat = "".join(text.split())
        for para in cleaned(bodies[meta["url"]]):
            assert "".join(para.split()) in flat, (meta["url"], para[:30])
