"""``extract.fast``: trafilatura's fallback extractors are skipped exactly on the pages whose
markup declares their main content; other pages get the text of the full cascade."""

from __future__ import annotations

import pytest
from webkit import page_html

from dataforge.ops.extract import Extract


def _texts(config: Extract.Config, html: list[str]) -> tuple[list[tuple[str, str | None]], dict]:
    op = Extract(config)
    return [op.page_text(page, None) for page in html], dict(op.events)


def test_fallbacks_skipped_only_where_main_content_is_declared(pages):
    declared = [page_html(page) for page in pages]
    assert all("<main>" in page for page in declared)
    undeclared = [
        page.replace("<main>", "<div>").replace("</main>", "</div>").replace("article>", "div>")
        for page in declared
    ]
    fast, events = _texts(Extract.Config(favor="recall", fast=True), declared + undeclared)
    assert events["extract:fallbacks_skipped"] == len(declared)
    full, events = _texts(Extract.Config(favor="recall"), declared + undeclared)
    assert "extract:fallbacks_skipped" not in events
    assert fast[len(declared) :] == full[len(declared) :]  # undeclared: the full cascade
    assert all(text for text, _ in fast)


def test_fast_needs_the_pre_pass():
    with pytest.raises(ValueError, match="extract.fast needs extract.strip_navigation: true"):
        Extract.Config(fast=True, strip_navigation=False)
