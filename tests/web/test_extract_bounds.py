"""The extract op's bounded parse: pages nested past ``max_depth`` (100,000 levels; 950 KB
of unclosed ``<div>``s) and pages past ``max_elements`` end as counted drops for both
engines; a page at the bounds is extracted; loss of text is counted."""

from __future__ import annotations

import pytest
from test_extract import html_batch

from dataforge.ops.extract import Extract
from dataforge.ops.extract_prepass import PARSER_MAX_DEPTH, parse_page

SENTENCE = "今天天气很好，我们去公园散步，看到很多人在锻炼身体，孩子们在草地上放风筝。"


def nested(levels: int) -> str:
    return f"<html><body>{'<div>' * levels}<p>{SENTENCE}</p>{'</div>' * levels}</body></html>"


def unclosed_divs(size: int) -> str:
    parts, total = ["<html><body>"], 12
    while total < size:
        parts.append(f"<div>{SENTENCE}")
        total += len(parts[-1].encode())
    return "".join(parts)


@pytest.mark.parametrize("engine", ["trafilatura", "resiliparse"])
def test_deep_and_unclosed_pages_are_counted_drops(engine):
    unclosed = unclosed_divs(950_000)
    assert len(unclosed.encode()) >= 950_000
    pages = [nested(100_000), unclosed, nested(10)]
    op = Extract(Extract.Config(engine=engine))
    out = op(html_batch(pages))
    assert out.column("drop").to_pylist() == ["extract:too_deep", "extract:too_deep", None]
    assert out.column("text").to_pylist() == ["", "", SENTENCE]
    assert op.events["extract:pages"] == 3


def test_parser_never_keeps_more_than_its_depth_limit():
    page = parse_page(nested(100_000))
    assert page.depth == PARSER_MAX_DEPTH  # so max_depth (<= 255) always catches it
    with pytest.raises(ValueError, match="extract.max_depth=256; valid range: 8 to 255"):
        Extract.Config(max_depth=PARSER_MAX_DEPTH)


def test_depth_bound_is_exact():
    # html, body, the divs, p: depth = levels + 3
    op = Extract(Extract.Config(max_depth=20))
    out = op(html_batch([nested(17), nested(18)]))
    assert out.column("drop").to_pylist() == [None, "extract:too_deep"]


def test_element_budget_is_a_counted_drop():
    spans = "".join(f"<span>{i}</span>" for i in range(300))
    small = f"<html><body><p>{SENTENCE}</p></body></html>"
    big = f"<html><body><p>{SENTENCE}{spans}</p></body></html>"
    op = Extract(Extract.Config(max_elements=300))
    out = op(html_batch([small, big]))
    assert out.column("drop").to_pylist() == [None, "extract:budget"]


def test_lost_text_is_counted():
    # a page of link lists: the engine keeps nothing of what the pre-pass left
    links = "".join(f'<li><a href="/{i}">{SENTENCE[:8]}{i}</a></li>' for i in range(40))
    page = f"<html><body><p>{SENTENCE}</p><ul>{links}</ul></body></html>"
    op = Extract(Extract.Config())
    out = op(html_batch([page]))
    text = out.column("text")[0].as_py()
    assert out.column("drop")[0].as_py() is None and SENTENCE in text
    assert op.events["extract:chars_out"] == len("".join(text.split()))
    assert op.events["extract:chars_in"] > 3 * op.events["extract:chars_out"]
    assert op.events["extract:short_output"] == 1


@pytest.mark.parametrize("engine", ["trafilatura", "resiliparse"])
def test_control_characters_in_a_page_are_no_error(engine):
    # lxml keeps the \x15 in the <p>'s tail, then refused it when the navigation dropped
    # after it joined its own tail onto that one
    page = f"<html><body><p>{SENTENCE}</p>\x15<nav><a href='/'>首页</a></nav> 完。</body></html>"
    op = Extract(Extract.Config(engine=engine))
    out = op(html_batch([page]))
    assert out.column("drop").to_pylist() == [None]
    assert out.column("text").to_pylist() == [f"{SENTENCE}\n完。"]
    assert op.events["extract:navigation_removed"] == 1
