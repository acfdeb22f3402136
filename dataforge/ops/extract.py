"""The ``extract`` op: the main text of HTML pages, by trafilatura or resiliparse.

Records whose ``meta.content`` is ``html`` (what the ``warc`` and ``html`` readers emit)
get the page's main text: the article body, without navigation, headers, footers, cookie
banners, sidebars and link lists (boilerplate removal on the DOM, so it does not depend on
spaces between words: Chinese pages work). ``engine: trafilatura`` (the default, FineWeb's
extractor) scores text blocks; ``engine: resiliparse`` (``main_content``, its rule-based
removal of navigation, headers, footers and sidebars) is about 20x faster on the same
pages. ``meta.content`` becomes ``text``; other records (WET text, JSONL) pass unchanged.

Every page is first parsed once by lxml and bounded (:mod:`dataforge.ops.extract_prepass`):
a tree deeper than ``max_depth`` or with more than ``max_elements`` elements is dropped
before any extractor runs, so the cost of a record is bounded whatever its markup. Then,
with ``strip_navigation``, the navigation the page's own markup declares and the link bars
repeated in the page are removed, inline formatting is unwrapped and text-holding
``<div>``s become paragraphs; the engine extracts from that tree.

Drop reasons: ``extract:too_deep`` (nested deeper than ``max_depth``),
``extract:budget`` (more than ``max_elements`` elements), ``extract:no_text`` (the page has
no visible text at all), ``extract:no_main_text`` (it has text, but nothing the extractor
takes for a body: a page of links, a login form), ``extract:too_short`` (the main text has
fewer than ``min_chars`` characters). Events: ``extract:pages`` (pages extracted),
``extract:chars_in`` and ``extract:chars_out`` (non-space characters of the pruned page and
of its main text), ``extract:short_output`` (pages whose main text keeps less than
``min_kept_fraction`` of the pruned page's characters: body text an engine may have lost),
``extract:navigation_removed`` (subtrees removed by the pre-pass),
``extract:fallbacks_skipped`` (pages extracted without trafilatura's fallbacks, ``fast``).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
from typing import Any, ClassVar, Literal

import lxml.html
import numpy as np
import pyarrow as pa

from dataforge.ops.base import Mapper, set_drop_reasons
from dataforge.ops.extract_prepass import (
    PARSER_MAX_DEPTH,
    main_element,
    parse_page,
    simplify_markup,
    strip_navigation,
    visible_text,
)
from dataforge.typed_config import check_choices, check_range

__all__ = ["Extract", "main_text", "resiliparse_text", "trafilatura_options"]


def trafilatura_options(favor: str, tables: bool, fast: bool) -> Any:
    """trafilatura's ``Extractor`` for plain-text main content (no comments, links, images,
    metadata or deduplication), built once per op: ``trafilatura.extract`` called with
    keywords reads its settings file's values again for every page."""
    from trafilatura.settings import Extractor

    return Extractor(
        output_format="txt",
        fast=fast,
        precision=favor == "precision",
        recall=favor == "recall",
        comments=False,
        links=False,
        images=False,
        tables=tables,
        dedup=False,
        with_metadata=False,
    )


def main_text(html: Any, url: str | None, options: Any) -> str | None:
    """trafilatura's main content of ``html`` (a string or an lxml tree, which trafilatura
    may change; None: none found) with ``options`` (:func:`trafilatura_options`)."""
    import trafilatura

    page_options = copy.copy(options)  # the page's URL, as trafilatura's own CLI sets it
    page_options.url = page_options.source = url
    return trafilatura.extract(html, options=page_options)


def resiliparse_text(html: str, main_content: bool = True) -> str:
    """resiliparse's plain text of ``html`` (its main content unless ``main_content`` is
    off), paragraphs on lines of their own."""
    from resiliparse.extract.html2text import extract_plain_text

    text = extract_plain_text(
        html,
        preserve_formatting=True,
        main_content=main_content,
        list_bullets=False,
        alt_texts=False,
        links=False,
        form_fields=False,
        noscript=False,
        comments=False,
    )
    return "\n".join(line for line in text.split("\n") if line.strip())


def _non_space(text: str) -> int:
    return len("".join(text.split()))


class Extract(Mapper):
    """HTML -> main text (see the module docstring)."""

    name: ClassVar[str] = "extract"
    observed_as: ClassVar[str | None] = "chars_extracted"

    @dataclasses.dataclass(frozen=True)
    class Config:
        engine: Literal["trafilatura", "resiliparse"] = "trafilatura"
        """The extractor (see the module docstring)."""
        favor: Literal["balanced", "precision", "recall"] = "precision"
        """trafilatura's trade-off; ``precision`` (as FineWeb) leaves out doubtful blocks, so a page
        that is only links or navigation yields nothing (``extract:no_main_text``); the
        web_zh recipe uses ``recall`` (benchmarks/extract_quality.py)."""
        include_tables: bool = True
        """Keep the text of tables inside the body (trafilatura)."""
        fast: bool = False
        """On a page whose markup declares its main content (a single ``<main>``,
        ``role=main`` or ``<article>``, to which the pre-pass cuts the page), skip
        trafilatura's comparison with its fallback extractors (readability, jusText), which
        exist to find the main content in pages that do not say where it is (counted:
        ``extract:fallbacks_skipped``); other pages get them. Needs ``strip_navigation``."""
        strip_navigation: bool = True
        """Remove declared navigation and repeated link bars, unwrap inline formatting and
        turn text-holding ``<div>``s into paragraphs before the engine runs
        (:mod:`dataforge.ops.extract_prepass`)."""
        max_depth: int = 200
        """Pages nested deeper are dropped (``extract:too_deep``); at most 255, since the
        parser keeps nothing below level 256."""
        max_elements: int = 200_000
        """Pages with more elements are dropped (``extract:budget``): with ``max_depth``,
        the bound on one record's parse and extraction cost."""
        min_chars: int = 0
        """Pages whose main text is shorter are dropped (``extract:too_short``)."""
        min_kept_fraction: float = 0.3
        """A page whose main text keeps fewer of the pruned page's non-space characters is
        counted (``extract:short_output``), not dropped."""

        def __post_init__(self) -> None:
            check_choices(self)
            check_range("extract.min_chars", self.min_chars, 0)
            check_range("extract.max_depth", self.max_depth, 8, PARSER_MAX_DEPTH - 1)
            check_range("extract.max_elements", self.max_elements, 100)
            check_range("extract.min_kept_fraction", self.min_kept_fraction, 0.0, 1.0)
            if self.fast and not self.strip_navigation:
                raise ValueError(
                    "extract.fast needs extract.strip_navigation: true (the fallbacks are "
                    "skipped only on pages the pre-pass cut to their declared main content)"
                )

    @functools.cached_property
    def _trafilatura_options(self) -> tuple[Any, Any]:
        """(with its fallbacks, without them)."""
        cfg = self.config
        return tuple(trafilatura_options(cfg.favor, cfg.include_tables, f) for f in (False, True))

    def _engine_text(self, root: lxml.html.HtmlElement, url: str | None, fast: bool) -> str:
        if self.config.engine == "resiliparse":
            return resiliparse_text(lxml.html.tostring(root, encoding="unicode"))
        return main_text(root, url, self._trafilatura_options[fast]) or ""

    def page_text(self, html: str, url: str | None) -> tuple[str, str | None]:
        """(main text, drop reason or None) of one page; counts the events."""
        cfg = self.config
        page = parse_page(html)
        if page.root is None:
            return "", "extract:no_text"
        if page.depth > cfg.max_depth:
            return "", "extract:too_deep"
        if page.elements > cfg.max_elements:
            return "", "extract:budget"
        if not visible_text(page.root).strip():
            return "", "extract:no_text"
        main = main_element(page.root) if cfg.strip_navigation else None
        fast = cfg.fast and cfg.engine == "trafilatura" and main is not None
        if fast:
            self.events["extract:fallbacks_skipped"] += 1
        if cfg.strip_navigation:
            self.events["extract:navigation_removed"] += strip_navigation(page.root, main)
            simplify_markup(page.root)
        chars_in = _non_space(visible_text(page.root))
        body = self._engine_text(page.root, url, fast).strip()
        chars_out = _non_space(body)
        self.events["extract:chars_in"] += chars_in
        self.events["extract:chars_out"] += chars_out
        if not body:
            return "", "extract:no_main_text"
        if chars_out < cfg.min_kept_fraction * chars_in:
            self.events["extract:short_output"] += 1
        if len(body) < cfg.min_chars:
            return "", "extract:too_short"
        return body, None

    def transform(self, live: pa.Table) -> pa.Table:
        texts = live.column("text").to_pylist()
        metas = [json.loads(m) if m else {} for m in live.column("meta").to_pylist()]
        reasons = np.full(live.num_rows, None, dtype=object)
        for i, (html, meta) in enumerate(zip(texts, metas, strict=True)):
            if meta.get("content") != "html":
                continue
            self.events["extract:pages"] += 1
            texts[i], reasons[i] = self.page_text(html or "", meta.get("url"))
            meta["content"] = "text"
        out = live.set_column(
            live.schema.get_field_index("text"), "text", pa.array(texts, pa.string())
        )
        encoded = [json.dumps(m, ensure_ascii=False, sort_keys=True) for m in metas]
        out = out.set_column(
            out.schema.get_field_index("meta"), "meta", pa.array(encoded, pa.string())
        )
        return set_drop_reasons(out, reasons.tolist())
