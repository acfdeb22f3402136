"""pipelines/web_zh.yaml end to end (in-process executor) on WARC, WET and HTML inputs the
test builds from demo-corpus text: bodies kept, navigation/footer/boilerplate lines lost,
URL rules, PII redacted, identical ids and counts for any split size, accounting holds."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pyarrow as pa
import pytest
from webkit import FOOTER, NAV, Page, write_html_dir, write_warc, write_wet

from dataforge.config import load_pipeline
from dataforge.io.mds import iter_samples
from dataforge.runtime.executors.local import LocalExecutor
from dataforge.runtime.pipeline import run_pipeline
from dataforge.text.clean import CleanConfig, clean_text

ROOT = Path(__file__).resolve().parents[2]
EDITOR = "（责任编辑：王晓明　校对：李华）"
CONTACT = "读者热线：13912345678，来信请寄 reader@people.example.cn。"
INPUT_LINE = (
    '  - {name: crawl, path: "../data/crawl/*.warc.gz", format: warc, lang: zh, encoding: auto}'
)


def recipe(tmp: Path, input_line: str, overrides: str = "") -> Path:
    text = (ROOT / "pipelines" / "web_zh.yaml").read_text(encoding="utf-8")
    assert INPUT_LINE in text
    text = text.replace(INPUT_LINE, input_line)
    text = text.replace("../tokenizers/demo", str(ROOT / "tokenizers" / "demo"))
    text = text.replace("../out/web_zh", "out")
    path = tmp / "web_zh.yaml"
    path.write_text(text + overrides, encoding="utf-8")
    return path


def run(pipeline: Path, out: Path, overrides: list[str] | None = None) -> dict:
    config = load_pipeline(pipeline, overrides)
    return run_pipeline(config, out, LocalExecutor(), log=lambda m: None)


@pytest.fixture(scope="module")
def crawl_pages(pages) -> list[Page]:
    """The zh pages with an editor line (boilerplate inside the article, which the
    extractor keeps and line_dedup must remove), the first with contact details."""
    out = []
    for i, page in enumerate(pages):
        paragraphs = list(page.paragraphs)
        if page.lang == "zh":
            paragraphs.append(EDITOR)
        if i == 0:
            paragraphs.insert(1, CONTACT)
        out.append(dataclasses.replace(page, paragraphs=paragraphs))
    return out


def older_capture(page: Page) -> Page:
    return dataclasses.replace(
        page, date="2023-01-01T00:00:00Z", paragraphs=[p + "（旧版）" for p in page.paragraphs]
    )


def cleaned(lines: list[str]) -> list[str]:
    return clean_text(pa.array(lines, pa.string()), CleanConfig()).to_pylist()


def check_pages(samples: list[dict], pages: list[Page]) -> None:
    by_url = {
        json.loads(s["meta"])["url"] if isinstance(s["meta"], str) else s["meta"]["url"]: s
        for s in samples
    }
    zh_kept = [p for p in pages if p.lang == "zh" and p.url in by_url]
    assert len(zh_kept) >= 8, len(zh_kept)
    for page in zh_kept:
        text = by_url[page.url]["text"]
        flat = "".join(text.split())
        body = [p for p in page.paragraphs if p not in (EDITOR, CONTACT)]
        for para in cleaned(body):
            assert "".join(para.split()) in flat, (page.url, para[:30])
        assert "版权所有" not in text and "Cookie" not in text and "新闻中心" not in text
        assert "责任编辑" not in text and "旧版" not in text
    first = by_url[pages[0].url]["text"]
    assert "<PHONE>" in first and "<EMAIL>" in first and "13912345678" not in first


def sample_dicts(out: Path) -> list[dict]:
    return [{"id": s["id"], "text": s["text"], "meta": s["meta"]} for s in iter_samples(out)]


def test_warc_recipe_end_to_end_and_split_invariance(tmp_path, crawl_pages):
    crawl = tmp_path / "crawl"
    crawl.mkdir()
    half = len(crawl_pages) // 2
    login = dataclasses.replace(crawl_pages[1], url="http://news.example.cn/login")
    write_warc(crawl / "a.warc.gz", [*crawl_pages[:half], older_capture(crawl_pages[2])])
    write_warc(crawl / "b.warc", [*crawl_pages[half:], login], gzip=False, version="1.0")
    pipeline = recipe(
        tmp_path, '  - {name: crawl, path: "crawl/*.warc*", format: warc, lang: zh, encoding: auto}'
    )
    results = []
    for split in ("null", "1024", "20000"):
        out = tmp_path / f"out-{split}"
        manifest = run(pipeline, out, [f"read.split_bytes={split}"])
        counts = manifest["counts"]["by_source"]["crawl"]
        assert counts["input"] == counts["kept"] + sum(counts["dropped"].values())
        samples = sample_dicts(out)
        assert len(samples) == counts["kept"] == manifest["output"]["records"]
        results.append((counts, samples))
    (counts, samples), *split_runs = results
    assert all(run == (counts, samples) for run in split_runs)
    dropped = counts["dropped"]
    assert dropped["warc:record_type:request"] == len(crawl_pages) + 2
    assert dropped["warc:record_type:warcinfo"] == 2 and dropped["warc:not_html"] == 2
    assert dropped["url:duplicate"] == 1 and dropped["url:blocked_substring"] == 1
    assert counts["events"]["pii:phone_cn"] == 1 and counts["events"]["pii:email"] == 1
    check_pages(samples, crawl_pages)


def test_wet_and_html_inputs_run_the_same_recipe(tmp_path, crawl_pages):
    # WET text keeps each page's navigation and footer: line_dedup removes them (the zh
    # ones: 12 pages >= min_docs 10)
    wet = write_wet(tmp_path / "crawl.warc.wet.gz", crawl_pages, boilerplate=True)
    manifest = run(
        recipe(tmp_path, f'  - {{name: crawl, path: "{wet.name}", format: wet, lang: zh}}'),
        tmp_path / "out-wet",
    )
    counts = manifest["counts"]["by_source"]["crawl"]
    assert counts["input"] == len(crawl_pages) + 1
    assert counts["dropped"]["warc:record_type:warcinfo"] == 1
    wet_samples = sample_dicts(tmp_path / "out-wet")
    assert any("<PHONE>" in s["text"] for s in wet_samples)
    assert not any("责任编辑" in s["text"] for s in wet_samples)
    zh = [s["text"] for s in wet_samples if "。" in s["text"]]
    assert len(zh) >= 8
    assert not any("京ICP备" in t or "国内要闻" in t for t in zh)
    assert "京ICP备" in FOOTER["zh"] and "国内要闻" in NAV["zh"]

    site = write_html_dir(tmp_path / "site", crawl_pages)
    html_dir = tmp_path / "html"
    html_dir.mkdir()
    manifest = run(
        recipe(html_dir, f'  - {{name: crawl, path: "{site}/*.htm*", format: html, lang: zh}}'),
        tmp_path / "out-html",
    )
    counts = manifest["counts"]["by_source"]["crawl"]
    assert counts["input"] == len(crawl_pages)
    assert counts["input"] == counts["kept"] + sum(counts["dropped"].values())
    check_pages(sample_dicts(tmp_path / "out-html"), crawl_pages)
