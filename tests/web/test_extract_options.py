"""The extract op's work done once or in C gives the same text: trafilatura's options built
once per op (what ``trafilatura.extract`` called with keywords gives) and the parser's
element classes chosen in C (what ``lxml.html``'s parser gives), page by page, on the
labeled documentation pages (tests/fixtures/extract) and the demo-corpus web pages."""

from __future__ import annotations

import copy
from pathlib import Path

import lxml.html
import pytest
import trafilatura
from webkit import page_html

from dataforge.ops import extract_prepass
from dataforge.ops.extract import Extract, main_text, trafilatura_options
from dataforge.ops.extract_prepass import parse_page, simplify_markup, strip_navigation

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "extract"


def _keyword_text(tree, url: str, favor: str, tables: bool, fast: bool) -> str | None:
    """trafilatura called as the op called it before it built its options once."""
    return trafilatura.extract(
        tree,
        url=url,
        output_format="txt",
        include_comments=False,
        include_tables=tables,
        include_images=False,
        include_links=False,
        favor_precision=favor == "precision",
        favor_recall=favor == "recall",
        deduplicate=False,
        fast=fast,
        with_metadata=False,
    )


def _html(pages) -> list[str]:
    """The labeled pages, then the demo-corpus pages (conftest's ``pages``)."""
    labeled = [p.read_text(encoding="utf-8") for p in sorted(FIXTURES.glob("*.html"))]
    return labeled + [page_html(page) for page in pages]


@pytest.mark.parametrize(
    ("favor", "tables", "fast"),
    [("recall", True, False), ("precision", True, False), ("balanced", False, True)],
)
def test_options_built_once_give_the_keyword_calls_text(pages, favor, tables, fast):
    options = trafilatura_options(favor, tables, fast)
    for i, html in enumerate(_html(pages)):
        url = f"https://example.com/{i}.html"
        for pre_pass in (False, True):
            tree = parse_page(html).root
            if pre_pass:
                strip_navigation(tree)
                simplify_markup(tree)
            expected = _keyword_text(copy.deepcopy(tree), url, favor, tables, fast)
            assert main_text(tree, url, options) == expected, (i, pre_pass)
            assert expected  # every page has a body


def test_one_options_object_serves_every_page_unchanged(pages):
    options = trafilatura_options("recall", True, False)
    before = {name: getattr(options, name) for name in type(options).__slots__}
    main_text(parse_page(_html(pages)[0]).root, "https://example.com/a", options)
    assert {name: getattr(options, name) for name in type(options).__slots__} == before


def test_html_element_lookup_in_c_gives_the_lxml_html_parsers_text(pages, monkeypatch):
    html = _html(pages)
    op_config = Extract.Config(favor="recall")
    fast_lookup = [Extract(op_config).page_text(page, None) for page in html]
    assert all(text for text, _ in fast_lookup)
    monkeypatch.setattr(
        extract_prepass,
        "_PARSER",
        lxml.html.HTMLParser(
            remove_comments=True, remove_pis=True, collect_ids=False, default_doctype=False
        ),
    )
    assert [Extract(op_config).page_text(page, None) for page in html] == fast_lookup
    tree = parse_page(html[0]).root
    assert type(tree) is lxml.html.HtmlElement
