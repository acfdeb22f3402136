"""Web fixtures: demo-corpus text in page templates (helpers live in webkit)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from webkit import Page, make_pages  # noqa: E402


@pytest.fixture(scope="session")
def pages(demo_reader) -> list[Page]:
    """12 People's Daily articles and 6 Python documentation pages as web pages."""
    zh = [t for t in demo_reader("news_zh", 40) if 400 <= len(t) <= 3000][:12]
    en = [t for t in demo_reader("docs_en", 40) if 600 <= len(t) <= 4000][:6]
    return make_pages(zh, en)
