"""Dropped web records can be audited: rejects keep each record's meta (URL, WARC record id
and date), the manifest has the text length after extraction, and the report has a section
per web step with counts that match the manifest and examples with their URL."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from test_web_recipe import recipe, run
from webkit import write_warc

from dataforge.report.pipeline import pipeline_sections
from dataforge.report.web import WEB_STEPS


def test_rejects_lengths_and_report_sections_of_a_web_run(tmp_path: Path, pages) -> None:
    crawl = tmp_path / "crawl"
    crawl.mkdir()
    login = pages[1].__class__(**{**pages[1].__dict__, "url": "http://news.example.cn/login"})
    write_warc(crawl / "a.warc.gz", [*pages, login])
    pipeline = recipe(
        tmp_path, '  - {name: crawl, path: "crawl/*.warc*", format: warc, lang: zh, encoding: auto}'
    )
    out = tmp_path / "out"
    manifest = run(pipeline, out)
    dropped = manifest["counts"]["total"]["dropped"]
    assert dropped["url:blocked_substring"] == 1

    rejects = pq.read_table(out / "rejects").to_pylist()
    assert len(rejects) == sum(dropped.values())
    by_reason = {r["drop"]: r for r in rejects}
    blocked = json.loads(by_reason["url:blocked_substring"]["meta"])
    assert blocked["url"] == "http://news.example.cn/login"
    assert blocked["warc_record_id"].startswith("<urn:uuid:") and blocked["warc_date"]

    hists = manifest["distributions"]["histograms"]

    def top_bin(kind: str) -> int:
        return int(np.flatnonzero(hists[kind]["crawl"])[-1])

    # Every page is read as HTML (the longest records read); extraction keeps its main text.
    extract_drops = sum(n for r, n in dropped.items() if r.startswith("extract:"))
    assert sum(hists["chars_extracted"]["crawl"]) == len(pages) + 1 - extract_drops
    assert top_bin("chars_extracted") < top_bin("chars_before")

    _, _, sections = pipeline_sections(out)
    titles = [s.title for s in sections]
    web = {s.title: s.html for s in sections if s.title in WEB_STEPS.values()}
    assert {WEB_STEPS[k] for k in ("warc", "extract", "url")} <= set(web), (titles, dropped)
    assert titles.index(WEB_STEPS["warc"]) < titles.index(WEB_STEPS["url"])
    url_html = web[WEB_STEPS["url"]]
    assert "url:blocked_substring" in url_html and "http://news.example.cn/login" in url_html
    assert f"<td>{dropped['warc:record_type:request']:,}</td>" in web[WEB_STEPS["warc"]]
