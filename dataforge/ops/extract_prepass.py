"""The ``extract`` op's bounded parse and structure pre-pass, before the engine runs.

:func:`parse_page` parses with lxml (libxml2's HTML parser: linear time, and it stops
descending at :data:`PARSER_MAX_DEPTH` levels, so a page nested 100,000 levels deep costs
as much as one nested 256 deep) and measures the tree: its depth and element count are
the op's deterministic cost bounds (``max_depth``, ``max_elements``), checked before any
extractor sees the page. A page cut by the parser's depth limit always exceeds
``max_depth``, so no page loses text silently to the limit.

:func:`strip_navigation` removes what the page's own markup declares as navigation:
``nav``, ``header``, ``footer``, ``aside``, ARIA landmarks other than ``main`` and elements
whose class or id is a navigation name (DocBook's ``navheader``/``navfooter``, publican's
``docnav``, tables of contents, breadcrumbs). With a single ``<main>`` (or ``role=main``),
or failing that a single ``<article>``, only that element's subtree is kept. An element
that contains the main content is never removed. Undeclared bars go too: blocks of links
(mostly link text, at least two links) whose text occurs twice in the page, as a bar at the
top and the bottom does (:func:`repeated_link_blocks`); their previous/next titles change
from page to page, so no count of lines across pages would find them.

:func:`simplify_markup` unwraps inline formatting (``<code>``, ``<em>``, ``<span>``...:
trafilatura misplaces or drops the text around nested ones, e.g. DocBook's
``<code><em><code>package</code></em>.cron</code> - 安装至``) and anchors without a link
(trafilatura drops a DocBook section whose heading holds an empty ``<a id>``), renames to
``<p>`` each ``<div>`` that holds text of its own (publican's paragraphs are ``<div class="para">``:
trafilatura drops the text before the first child element of such a div). It also
removes every ``class`` and ``id``: once the declared navigation is gone, the names only
feed the engines' own name rules, which discard body boxes (publican's ``sidebar`` notes,
DocBook's ``note`` tables) with the navigation they are meant for.
"""

from __future__ import annotations

import re
from typing import Any

import lxml.etree
import lxml.html

__all__ = [
    "NAV_NAMES",
    "PARSER_MAX_DEPTH",
    "PageTree",
    "main_element",
    "repeated_link_blocks",
    "INLINE_FORMATTING",
    "parse_page",
    "simplify_markup",
    "strip_navigation",
    "visible_text",
]

PARSER_MAX_DEPTH = 256
"""libxml2's HTML parser keeps no element deeper than this (without its "huge" option)."""

NAV_NAMES = frozenset(
    {
        "banner",
        "breadcrumb",
        "breadcrumbs",
        "docnav",
        "footer",
        "header",
        "navbar",
        "navfooter",
        "navheader",
        "navigation",
        "skip-link",
        "toc",
        "toc2",
    }
)
"""Class or id tokens (lower case) that mark an element as navigation: ``banner`` as the
ARIA landmark, ``header`` and ``footer`` as the page chrome of pages written before HTML5
had those elements, and the generators' own names."""

INLINE_FORMATTING = (
    "abbr",
    "acronym",
    "b",
    "big",
    "cite",
    "code",
    "dfn",
    "em",
    "font",
    "i",
    "kbd",
    "mark",
    "q",
    "s",
    "samp",
    "small",
    "span",
    "strike",
    "strong",
    "sub",
    "sup",
    "time",
    "tt",
    "u",
    "var",
)
"""Elements unwrapped into their parent's text (links stay: engines weigh link density)."""

# Declared navigation: these elements, and elements with these ARIA roles. Found in one
# walk of the elements (an XPath union walks the page once per branch).
_NAV_TAGS = frozenset({"nav", "header", "footer", "aside"})
_NAV_ROLES = frozenset({"navigation", "banner", "contentinfo", "search", "complementary"})
_INVISIBLE = "//script | //style | //noscript | //template"
# lxml's HTML parser keeps control characters in text, then refuses them when text is set
# (drop_tree joins a tail onto its neighbour's): they go before parsing.
_NOT_XML_TEXT = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
_PARSER = lxml.etree.HTMLParser(
    remove_comments=True,
    remove_pis=True,
    collect_ids=False,
    default_doctype=False,
    encoding="utf-8",  # the page is a decoded str, encoded back below
)
# Every element an ``HtmlElement`` (``drop_tree``, ``text_content``...), chosen in C:
# ``lxml.html``'s own parser asks a Python method for each element the pre-pass and the
# engine touch, to give form fields their own classes, which neither uses.
_PARSER.set_element_class_lookup(
    lxml.etree.ElementDefaultClassLookup(
        element=lxml.html.HtmlElement,
        comment=lxml.html.HtmlComment,
        pi=lxml.html.HtmlProcessingInstruction,
        entity=lxml.html.HtmlEntity,
    )
)


class PageTree:
    """A parsed page with its measures.

    Attributes:
        root: the ``<html>`` element (None: nothing parsable).
        depth: levels of the deepest element (the root is level 1).
        elements: element count.
    """

    def __init__(self, root: lxml.html.HtmlElement | None) -> None:
        self.root = root
        self.depth, self.elements = _measure(root) if root is not None else (0, 0)


def _measure(root: lxml.html.HtmlElement) -> tuple[int, int]:
    # lxml's own walk, one event per node boundary: no Python stack of (node, level) pairs
    depth, count, level = 0, 0, 0
    for event, _ in lxml.etree.iterwalk(root, events=("start", "end")):
        if event == "end":
            level -= 1
            continue
        count += 1
        level += 1
        if level > depth:  # a comparison, not a max() call per element
            depth = level
    return depth, count


def parse_page(html: str) -> PageTree:
    """The page's tree (comments and processing instructions removed) and measures."""
    data = _NOT_XML_TEXT.sub(" ", html).encode("utf-8", errors="replace")
    if not data.strip():
        return PageTree(None)
    try:
        root = lxml.html.document_fromstring(data, parser=_PARSER)
    except (lxml.etree.ParserError, ValueError):  # "Document is empty": no element at all
        return PageTree(None)
    for el in root.xpath(_INVISIBLE):
        el.drop_tree()
    return PageTree(root)


def visible_text(root: lxml.html.HtmlElement) -> str:
    """The text of ``<body>`` (of the whole tree when there is none)."""
    body = root.find("body")
    return (body if body is not None else root).text_content()


def _is_nav_name(class_: str | None, id_: str | None) -> bool:
    """Whether an element's ``class`` or ``id`` holds a navigation name."""
    tokens = (class_ or "").lower().split() + (id_ or "").lower().split()
    return any(token in NAV_NAMES for token in tokens)


def main_element(root: lxml.html.HtmlElement) -> lxml.html.HtmlElement | None:
    """The page's declared main content: its single ``<main>`` (or ``role=main``), failing
    that its single ``<article>``; None when there is none or several."""
    found = [
        el for el in root.iter(lxml.etree.Element) if el.tag == "main" or el.get("role") == "main"
    ]
    if not found:
        found = list(root.iter("article"))
    return found[0] if len(found) == 1 else None


_UNSET: Any = object()


def strip_navigation(root: lxml.html.HtmlElement, main: Any = _UNSET) -> int:
    """Remove the navigation of the page (see the module docstring); returns the number of
    subtrees removed. ``main``: :func:`main_element` of ``root`` where the caller has it."""
    if main is _UNSET:
        main = main_element(root)
    keep = set(main.iterancestors()) | {main} if main is not None else set()
    removed = 0
    if main is not None:
        for ancestor in main.iterancestors():
            if ancestor.tag == "html":
                break
            for sibling in list(ancestor):
                if sibling not in keep and sibling.getparent() is ancestor:
                    ancestor.remove(sibling)  # tail text of the sibling goes too
                    removed += 1
    declared, named = [], []  # each in document order
    for el in root.iter(lxml.etree.Element):
        if el.tag in _NAV_TAGS or el.get("role") in _NAV_ROLES:
            declared.append(el)
        class_, id_ = el.get("class"), el.get("id")
        if (class_ or id_) and _is_nav_name(class_, id_):
            named.append(el)
    candidates = declared + named + repeated_link_blocks(root)
    for el in candidates:
        if el in keep or el.tag in ("html", "body") or not _attached(el, root):
            continue  # the main content's ancestors, or inside a subtree removed earlier
        el.drop_tree()
        removed += 1
    return removed


_LINKS = "//a[@href]"
# divs with non-space text of their own (XPath's space is ASCII: the Python test decides)
_TEXT_DIVS = "//div[text()[normalize-space()]]"
_BLOCKS = frozenset({"table", "ul", "ol", "dl", "menu", "p", "center", "div"})
MAX_BAR_CHARS = 600
"""Longest text (non-space characters) of a block taken for a link bar."""


def _chars(text: str | None) -> int:
    return len("".join(text.split())) if text else 0


def _link_stats(order: list[Any]) -> dict[Any, tuple[int, int, int]]:
    """element -> (non-space characters, links, characters inside links) for the elements
    of ``order`` (document order), in one pass from the leaves up (linear in the page,
    whatever its depth)."""
    stats: dict[Any, tuple[int, int, int]] = {}
    for el in reversed(order):  # descendants before their ancestors
        is_link = el.tag == "a" and el.get("href") is not None
        chars, links, link_chars = _chars(el.text), int(is_link), 0
        for child in el:
            c, n, lc = stats.get(child, (0, 0, 0))
            chars += c + _chars(child.tail)
            links += n
            link_chars += lc
        stats[el] = (chars, links, chars if is_link else link_chars)
    return stats


def repeated_link_blocks(root: lxml.html.HtmlElement) -> list[lxml.html.HtmlElement]:
    """The outermost blocks whose normalized text occurs in two blocks of the page neither
    inside the other, made mostly (over half of their text) of at least two links."""
    if len(root.xpath(_LINKS)) < 4:  # two disjoint blocks of two links at least
        return []
    by_text: dict[str, list[lxml.html.HtmlElement]] = {}
    order = list(root.iter())
    stats = _link_stats(order)
    for el in order:
        chars, links, link_chars = stats[el]
        if el.tag in _BLOCKS and links >= 2 and 2 * link_chars > chars and chars <= MAX_BAR_CHARS:
            by_text.setdefault("".join(el.text_content().split()), []).append(el)
    found = []
    for group in by_text.values():
        outer = [el for el in group if not any(a in group for a in el.iterancestors())]
        if len(outer) >= 2:
            found += outer
    return found


def _attached(el: lxml.html.HtmlElement, root: lxml.html.HtmlElement) -> bool:
    return any(ancestor is root for ancestor in el.iterancestors())


def simplify_markup(root: lxml.html.HtmlElement) -> int:
    """Unwrap inline formatting, rename to ``p`` each ``div`` with text of its own and
    remove every ``class`` and ``id`` (see the module docstring); returns how many divs
    were renamed."""
    for el in [*root.iter(*INLINE_FORMATTING), *root.xpath("//a[not(@href)]")]:
        el.drop_tag()
    lxml.etree.strip_attributes(root, "class", "id")
    renamed = 0
    for el in root.xpath(_TEXT_DIVS):
        if (el.text or "").strip() or any((child.tail or "").strip() for child in el):
            el.tag = "p"
            renamed += 1
    return renamed
