"""The extract op with the shipped recipe's settings on real documentation pages of four HTML generators
(tests/fixtures/extract, labeled by their own markup as benchmarks/extract_quality.py does):
>= 95% of the body paragraphs are kept whole, no page keeps more than 2% of its
boilerplate; the text before an inline ``<code>`` is kept."""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
from extract_quality import (  # noqa: E402
    FAMILIES,
    PageScore,
    extract_texts,
    norm,
    recipe_settings,
    score_page,
)

FIXTURES = ROOT / "tests" / "fixtures" / "extract"
PAGES = sorted(FIXTURES.glob("*.html"))


def test_one_fixture_per_family_and_language():
    names = {p.stem for p in PAGES}
    assert names == {f"{f}.{lang}" for f, fam in FAMILIES.items() for lang in fam.globs}


def scores(settings: dict) -> tuple[list[dict], dict]:
    """Figures per fixture page and over all of them."""
    pages = [p.read_text(encoding="utf-8") for p in PAGES]
    texts, events = extract_texts(pages, settings)
    assert events["extract:pages"] == len(pages) and all(texts)
    total, per_page = PageScore(), []
    for path, html, text in zip(PAGES, pages, texts, strict=True):
        score = score_page(html, FAMILIES[path.stem.split(".")[0]], text)
        total.add(score)
        per_page.append(score.figures())
    return per_page, total.figures()


def test_recipe_keeps_the_body_and_loses_the_navigation():
    per_page, total = scores(recipe_settings())
    assert total["recall"] >= 0.95 and total["precision"] >= 0.95, total
    # a 9-paragraph page may lose one paragraph that is all link (trafilatura's link density)
    assert all(f["recall"] >= 0.8 for f in per_page), per_page
    assert all(f["boilerplate_kept"] <= 0.02 for f in per_page), per_page
    _, before = scores({"favor": "precision", "strip_navigation": False})
    assert before["recall"] < 0.9


def test_resiliparse_keeps_the_body():
    _, total = scores({"engine": "resiliparse"})
    assert total["recall"] >= 0.95, total


def test_text_before_inline_code_is_kept():
    html = (FIXTURES / "publican.zh.html").read_text(encoding="utf-8")
    para = re.search(r'<div class="para">([^<]{5,}<code[^>]*>[^<]+</code>[^<]+)', html)
    assert para is not None
    whole = norm(re.sub(r"<[^>]+>", "", para.group(1)))
    (text,), _ = extract_texts([html], recipe_settings())
    assert whole in norm(text)
    (before,), _ = extract_texts([html], {"favor": "precision", "strip_navigation": False})
    assert whole not in norm(before)  # trafilatura alone (the former recipe) cuts it
