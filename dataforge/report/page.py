"""One self-contained HTML page of inline SVG plots.

Plots are ``dataforge.report.charts.Figure`` objects written as SVG text into the page
(fonts left to the browser), so the page loads nothing at view time and stays small.
"""

from __future__ import annotations

import dataclasses
import html
from collections.abc import Callable

from dataforge.report.charts import Figure
from dataforge.report.svg import render_figure

__all__ = ["GENERATOR", "Plot", "Section", "render_page", "table_html"]

GENERATOR = '<meta name="generator" content="dataforge report">'
"""In every page's head: what lets a later report replace this file (and nothing else)."""

_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
h1 { margin-bottom: 0.2em; } h2 { border-bottom: 1px solid #ddd; padding-bottom: 0.2em; }
figure.plot { margin: 1em 0; } figure.plot svg { max-width: 100%; height: auto; }
figcaption { color: #555; font-size: 0.9em; }
table { border-collapse: collapse; font-size: 0.9em; margin: 0.5em 0; }
th, td { border: 1px solid #ddd; padding: 0.25em 0.6em; text-align: right; }
th:first-child, td:first-child, td.text, th:last-child { text-align: left; }
td.text { max-width: 700px; white-space: pre-wrap; word-break: break-all; }
.note { color: #777; font-style: italic; }
.failed { color: #b00; font-weight: 600; }
"""


@dataclasses.dataclass
class Plot:
    """A named figure and what it shows."""

    name: str
    caption: str
    draw: Callable[[], Figure]


@dataclasses.dataclass
class Section:
    title: str
    plots: list[Plot] = dataclasses.field(default_factory=list)
    html: str = ""
    """Extra markup under the plots (tables, notes); already escaped."""


def table_html(header: list[str], rows: list[list[str]], text_columns: tuple[int, ...] = ()) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join(
        "<tr>"
        + "".join(
            f'<td class="text">{html.escape(c)}</td>'
            if i in text_columns
            else f"<td>{html.escape(c)}</td>"
            for i, c in enumerate(row)
        )
        + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def render_page(title: str, subtitle: str, sections: list[Section]) -> str:
    """The whole page; every plot is a ``<figure class="plot" data-plot=NAME>``."""
    parts = [
        "<!DOCTYPE html>",
        f'<html lang="en"><head><meta charset="utf-8">{GENERATOR}',
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1><p>{html.escape(subtitle)}</p>",
    ]
    for section in sections:
        parts.append(f"<h2>{html.escape(section.title)}</h2>")
        for plot in section.plots:
            parts.append(
                f'<figure class="plot" data-plot="{html.escape(plot.name)}">'
                f"{render_figure(plot.draw(), plot.name)}<figcaption>{html.escape(plot.caption)}</figcaption></figure>"
            )
        parts.append(section.html)
    parts.append("</body></html>")
    return "\n".join(parts)
