"""Charts for the report: panels of bars, step histograms, lines and marker lines on
linear, log or category axes, laid out in a grid; ``dataforge.report.svg.render_figure``
writes a figure as SVG (this module imports nothing of the report's).

The report needs a handful of chart kinds, so they are drawn here instead of through a
plotting library: importing matplotlib and laying its figures out was ~0.6 s of every
``dataforge run`` (a sixth of the demo-size recipe). The calls mirror matplotlib's
(``bar``, ``barh``, ``stairs``, ``plot``, ``axvline``); each takes the next palette colour,
and a call with a ``label`` gets a legend entry.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import ClassVar

__all__ = ["Axes", "Bars", "Figure", "Path"]

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
           "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")  # fmt: skip


@dataclasses.dataclass
class Bars:
    """Bars on a category axis (``along``: "x" vertical bars, "y" horizontal ones): bar i at
    category position ``i + offset``, ``thickness`` wide, spanning ``low[i]..high[i]``."""

    kind: ClassVar[str] = "bars"
    along: str
    categories: list[str]
    low: list[float]
    high: list[float]
    offset: float
    thickness: float
    color: str
    label: str | None


@dataclasses.dataclass
class Path:
    """``kind`` "steps" (``xs`` the edges, ``ys`` the counts), "line" or "vline" (``xs[0]``)."""

    kind: str
    xs: list[float]
    ys: list[float]
    color: str
    label: str | None
    dashed: bool = False
    opacity: float = 1.0
    width: float = 1.5


class Axes:
    """One panel. Set ``xlim``/``ylim`` to fix a numeric range."""

    def __init__(self, title: str = "", xlabel: str = "", ylabel: str = "",
                 xscale: str = "linear", yscale: str = "linear") -> None:  # fmt: skip
        for axis, scale in (("xscale", xscale), ("yscale", yscale)):
            if scale not in ("linear", "log"):
                raise ValueError(f"{axis}: {scale!r} is not valid; valid: 'linear', 'log'")
        self.title, self.xlabel, self.ylabel = title, xlabel, ylabel
        self.scale = {"x": xscale, "y": yscale}
        self.xlim: tuple[float, float] | None = None
        self.ylim: tuple[float, float] | None = None
        self.marks: list[Bars | Path] = []
        self.categories: dict[str, list[str]] = {}

    def _next_color(self) -> str:
        return PALETTE[len(self.marks) % len(PALETTE)]

    def bar(self, categories: Sequence[str], heights: Sequence[float], *, offset: float = 0.0,
            width: float = 0.8, label: str | None = None) -> None:  # fmt: skip
        """Vertical bars from 0, one per category (the first on the left)."""
        self._bars("x", categories, [0.0] * len(heights), heights, offset, width, label)

    def barh(self, categories: Sequence[str], widths: Sequence[float], *,
             left: Sequence[float] | None = None, offset: float = 0.0, height: float = 0.8,
             label: str | None = None) -> None:  # fmt: skip
        """Horizontal bars from ``left`` (default 0), one per category (the first on top)."""
        starts = [0.0] * len(widths) if left is None else list(left)
        self._bars("y", categories, starts, widths, offset, height, label)

    def _bars(self, along, categories, starts, sizes, offset, thickness, label) -> None:
        names = [str(c) for c in categories]
        if self.categories.setdefault(along, names) != names:
            raise ValueError(f"{along} categories differ: {self.categories[along]} vs {names}")
        self.scale[along] = "category"
        low = [float(s) for s in starts]
        high = [lo + float(n) for lo, n in zip(low, sizes, strict=True)]
        self.marks.append(
            Bars(along, names, low, high, offset, thickness, self._next_color(), label)
        )

    def stairs(self, counts: Sequence[float], edges: Sequence[float], *,
               label: str | None = None) -> None:  # fmt: skip
        """A histogram's outline: ``counts[i]`` over ``[edges[i], edges[i + 1])``."""
        if len(edges) != len(counts) + 1:
            raise ValueError(f"stairs: {len(edges)} edges for {len(counts)} counts")
        xs, ys = [float(e) for e in edges], [float(c) for c in counts]
        self.marks.append(Path("steps", xs, ys, self._next_color(), label))

    def plot(self, xs: Sequence[float], ys: Sequence[float], *, label: str | None = None,
             opacity: float = 1.0, width: float = 1.5, color: str | None = None) -> None:  # fmt: skip
        """A line through the points; ``color`` (default: the next one) repeats an earlier
        series' colour, e.g. for a smoothed copy of it."""
        xs, ys = [float(x) for x in xs], [float(y) for y in ys]
        color = color or self._next_color()
        self.marks.append(Path("line", xs, ys, color, label, False, opacity, width))

    def axvline(self, x: float, *, label: str | None = None, dashed: bool = True) -> None:
        self.marks.append(Path("vline", [float(x)], [], self._next_color(), label, dashed))

    def extent(self, axis: str) -> tuple[float, float] | None:
        """The marks' extent on a numeric axis (positive values only on a log axis; NaN
        and infinities, e.g. a diverged loss, have no place); bars and histograms include
        their base, 0."""
        values: list[float] = []
        for m in self.marks:
            if isinstance(m, Bars):
                values += [*m.low, *m.high] if m.along != axis else []
            elif m.kind == "steps":
                values += m.xs if axis == "x" else [0.0, *m.ys]
            else:
                values += m.xs if axis == "x" else m.ys
        log = self.scale[axis] == "log"
        values = [v for v in values if math.isfinite(v) and (v > 0 or not log)]
        return (min(values), max(values)) if values else None

    def has_base(self, axis: str) -> bool:
        """Whether marks stand on ``axis``' zero (bars' values, histogram counts)."""
        return any(
            (isinstance(m, Bars) and m.along != axis) or (m.kind == "steps" and axis == "y")
            for m in self.marks
        )


class Figure:
    """Panels in a grid of ``cols`` columns, ``width`` px wide, ``row_height`` px a row."""

    def __init__(self, width: int = 900, row_height: int = 280, cols: int = 1) -> None:
        if cols < 1:
            raise ValueError(f"cols: {cols} is not valid; valid: >= 1")
        self.width, self.row_height, self.cols = width, row_height, cols
        self.axes: list[Axes] = []

    def add_axes(self, **kwargs) -> Axes:
        """A new panel (``Axes`` keyword arguments), after the ones already added."""
        self.axes.append(Axes(**kwargs))
        return self.axes[-1]
