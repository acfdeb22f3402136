"""SVG text for a ``dataforge.report.charts.Figure``: scales and their ticks, each panel's
layout, and the marks.

Each panel is laid out top to bottom as title, legend (rows of entries, wrapped to the
panel's width), plot area, tick labels and axis label; its left margin is the widest y tick
label. Text widths are estimated (``text_width``: 0.6 em a Latin character, 1 em a CJK
one), not measured, so a label may sit a few pixels off its ideal place but the layout
never puts it over the plot area. Marks are clipped to the plot area.

Every data mark (a bar, a step outline, a line) gets the id ``data-<figure>-<n>`` so a
browser test can check that a plot drew something; bars carry a ``<title>`` tooltip with
their category and value. Output is deterministic: the same figure gives the same bytes.
"""

from __future__ import annotations

import dataclasses
import html
import itertools
import math
import re
import unicodedata

from dataforge.report.charts import Axes, Figure

__all__ = ["linear_ticks", "log_labels", "log_ticks", "render_figure", "scientific", "text_width"]

FONT = 11  # px of tick labels and legends; titles and axis labels 12
GRID, SPINE, INK = "#e6e6e6", "#555", "#222"
_SUPERSCRIPT = str.maketrans("0123456789-", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻")
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _escape(text: str) -> str:
    """``text`` as XML character data; characters XML cannot hold become U+FFFD."""
    return html.escape(_NOT_XML.sub("\ufffd", text))


def text_width(text: str, size: float = FONT) -> float:
    """Estimated width in px of ``text`` set in a sans-serif font of ``size`` px."""
    wide = sum(unicodedata.east_asian_width(c) in "WF" for c in text)
    return size * (wide + 0.6 * (len(text) - wide))


def linear_ticks(lo: float, hi: float, target: int = 5) -> tuple[list[float], float]:
    """Multiples of a 1, 2, 2.5 or 5 x 10^k step inside ``[lo, hi]``, about ``target`` of
    them, and the step."""
    raw = (hi - lo) / max(1, target)
    if not raw > 0:
        return [lo], 1.0
    mag = 10.0 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw * (1 - 1e-9))
    first = math.ceil(lo / step - 1e-9)
    count = math.floor(hi / step + 1e-9) - first + 1
    return [round((first + k) * step, 12) for k in range(max(0, count))], step


def log_ticks(lo: float, hi: float) -> list[float]:
    """The decades inside ``[lo, hi]`` (at most eight, evenly thinned); when fewer than two
    fall inside, 1, 2 and 5 of each decade; when still fewer, every multiple 1 to 9."""
    first, last = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    ticks: list[float] = []
    for multiples in ((1,), (1, 2, 5), tuple(range(1, 10))):
        candidates = [m * 10.0**e for e in range(first, last + 1) for m in multiples]
        ticks = [t for t in candidates if lo * (1 - 1e-9) <= t <= hi * (1 + 1e-9)]
        if len(ticks) >= 2:
            break
    if len(ticks) > 8 and all(math.log10(t) == round(math.log10(t)) for t in ticks):
        ticks = ticks[:: math.ceil(len(ticks) / 8)]
    return ticks


def scientific(value: float) -> str:
    """``value`` as ``2.5×10⁻⁵`` (``10⁶`` for a mantissa of 1, ``0`` for zero)."""
    if value == 0:
        return "0"
    # from the decimal form: 10.0**exponent underflows to 0 for subnormal values
    digits, power_of_ten = f"{value:.2e}".split("e")
    mantissa, exponent = float(digits), int(power_of_ten)
    power = "10" + str(exponent).translate(_SUPERSCRIPT)
    return power if mantissa == 1 else "-" + power if mantissa == -1 else f"{mantissa:g}×{power}"


def log_labels(ticks: list[float]) -> list[str]:
    """Plain numbers when every tick is within 0.01..10^5, else ``10⁶`` and ``2×10⁶``."""
    if all(0.01 <= t < 1e5 for t in ticks):
        return [f"{t:g}" for t in ticks]
    return [scientific(t) for t in ticks]


def _linear_labels(ticks: list[float], step: float) -> list[str]:
    top = max((abs(t) for t in ticks), default=0.0)
    if top >= 1e7 or 0 < top < 1e-3:  # a learning rate, a count of tokens
        return [scientific(t) for t in ticks]
    exponent = math.floor(math.log10(step) + 1e-9)
    decimals = max(0, -exponent + (round(step / 10.0**exponent, 6) == 2.5))
    return [f"{t:,.{decimals}f}" for t in ticks]


@dataclasses.dataclass
class _Scale:
    kind: str  # linear | log | category
    lo: float
    hi: float
    categories: list[str]
    a: float = 0.0  # px of lo
    b: float = 1.0  # px of hi

    def px(self, value: float) -> float:
        if self.kind == "log":
            if value <= 0:
                return self.a  # a bar's base on a log axis: the axis' low end
            low = math.log10(self.lo)
            t = (math.log10(value) - low) / (math.log10(self.hi) - low)
        else:
            t = (min(max(value, -1e300), 1e300) - self.lo) / (self.hi - self.lo)
        return self.a + t * (self.b - self.a)

    def ticks(self, target: int) -> list[tuple[float, str]]:
        if self.kind == "category":
            return [(float(i), c) for i, c in enumerate(self.categories)]
        if self.kind == "log":
            ticks = log_ticks(self.lo, self.hi)
            return list(zip(ticks, log_labels(ticks), strict=True))
        ticks, step = linear_ticks(self.lo, self.hi, target)
        return list(zip(ticks, _linear_labels(ticks, step), strict=True))


def _scale(ax: Axes, axis: str) -> _Scale:
    kind = ax.scale[axis]
    if kind == "category":
        names = ax.categories[axis]
        return _Scale(kind, -0.5, max(1, len(names)) - 0.5, names)
    lim = ax.xlim if axis == "x" else ax.ylim
    if lim is not None:
        lo, hi = float(lim[0]), float(lim[1])
        if not (hi > lo and (kind != "log" or lo > 0)):
            raise ValueError(f"{axis}lim: {lim} is not a valid {kind} range (low < high"
                             f"{', both > 0' if kind == 'log' else ''})")  # fmt: skip
        return _Scale(kind, lo, hi, [])
    extent = ax.extent(axis)
    lo, hi = extent if extent else ((1.0, 10.0) if kind == "log" else (0.0, 1.0))
    if kind == "log":  # at most 30 decades, inside 1e-300..1e300 (floats' safe range)
        top = min(max(math.log10(hi), -299.0), 300.0)
        bottom = min(max(math.log10(lo), top - 30, -300.0), top)
        if ax.has_base(axis):  # bars: whole decades
            top, bottom = math.ceil(top), math.floor(bottom)
            return _Scale(kind, 10.0**bottom, 10.0 ** max(top, bottom + 1), [])
        pad = 0.04 * (top - bottom) if top > bottom else 0.3  # lines: 4% each side
        return _Scale(kind, 10.0 ** (bottom - pad), 10.0 ** (top + pad), [])
    lo, hi = max(lo, -1e300), min(hi, 1e300)  # the range itself must stay finite
    if not hi - lo > 1e-12 * max(abs(lo), abs(hi)):  # one value: a range around it
        delta = max(abs(lo) * 0.05, 1.0) if lo else 0.5
        lo, hi = (lo - delta, hi + delta) if lo else (0.0, 1.0)
    if lo == 0.0:  # bars and histograms stand on 0: the top up to the next tick
        step = linear_ticks(lo, hi)[1]
        return _Scale(kind, lo, max(step, math.ceil(hi / step - 1e-9) * step), [])
    pad = 0.04 * (hi - lo)
    return _Scale(kind, lo - pad, hi + pad, [])


def _attr(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".")


def _text(x: float, y: float, text: str, anchor: str = "middle", size: int = FONT,
          extra: str = "") -> str:  # fmt: skip
    return (f'<text x="{_attr(x)}" y="{_attr(y)}" text-anchor="{anchor}" font-size="{size}"'
            f'{extra}>{_escape(text)}</text>')  # fmt: skip


def _legend(ax: Axes, x0: float, y0: float, width: float) -> tuple[list[str], float]:
    """Legend entries in rows from (x0, y0), wrapped at ``width``; returns the height."""
    out, x, y = [], x0, y0
    for mark in (m for m in ax.marks if m.label):
        size = 16 + 4 + text_width(mark.label) + 14
        if x > x0 and x + size > x0 + width:
            x, y = x0, y + 15
        if mark.kind == "bars":
            out.append(f'<rect x="{_attr(x + 3)}" y="{_attr(y + 2)}" width="10" height="10" '
                       f'fill="{mark.color}"/>')  # fmt: skip
        else:
            style = ' stroke-dasharray="4 2"' if mark.dashed else ""
            style += f' stroke-opacity="{mark.opacity:g}"' if mark.opacity != 1.0 else ""
            out.append(f'<path d="M{_attr(x)},{_attr(y + 7)}h16" stroke="{mark.color}" '
                       f'stroke-width="2"{style}/>')  # fmt: skip
        out.append(_text(x + 20, y + 11, mark.label, "start"))
        x += size
    return out, (y - y0 + 15 if out else 0.0)


def _marks(ax: Axes, xs: _Scale, ys: _Scale, ids: itertools.count, name: str) -> list[str]:
    out = []
    for mark in ax.marks:
        if mark.kind == "bars":
            cat, val = (xs, ys) if mark.along == "x" else (ys, xs)
            unit = abs(cat.px(1) - cat.px(0))
            for i, (c, lo, hi) in enumerate(zip(mark.categories, mark.low, mark.high, strict=True)):
                if not (math.isfinite(lo) and math.isfinite(hi)):
                    continue  # no bar for a value that is not a number
                centre = cat.px(i + mark.offset)
                p, q = sorted((val.px(lo), val.px(hi)))
                span = (centre - unit * mark.thickness / 2, unit * mark.thickness, p, q - p)
                x, w, y, h = span if mark.along == "x" else (span[2], span[3], span[0], span[1])
                tip = f"{c}{' · ' + mark.label if mark.label else ''}: {hi - lo:.4g}"
                out.append(f'<rect id="data-{name}-{next(ids)}" x="{_attr(x)}" y="{_attr(y)}" '
                           f'width="{_attr(w)}" height="{_attr(h)}" fill="{mark.color}">'
                           f"<title>{_escape(tip)}</title></rect>")  # fmt: skip
            continue
        if mark.kind == "vline":
            d = f"M{_attr(xs.px(mark.xs[0]))},{_attr(ys.a)}V{_attr(ys.b)}"
        elif mark.kind == "steps":
            d = f"M{_attr(xs.px(mark.xs[0]))},{_attr(ys.px(0))}" + "".join(
                f"V{_attr(ys.px(c))}H{_attr(xs.px(e))}"
                for c, e in zip(mark.ys, mark.xs[1:], strict=True)
            ) + f"V{_attr(ys.px(0))}"  # fmt: skip
        else:
            points = [(x, y) for x, y in zip(mark.xs, mark.ys, strict=True)
                      if math.isfinite(x) and math.isfinite(y)
                      and (ys.kind != "log" or y > 0) and (xs.kind != "log" or x > 0)]  # fmt: skip
            if not points:
                continue
            d = "M" + "L".join(f"{_attr(xs.px(x))},{_attr(ys.px(y))}" for x, y in points)
        style = ' stroke-dasharray="5 3"' if mark.dashed else ""
        style += f' stroke-opacity="{mark.opacity:g}"' if mark.opacity != 1.0 else ""
        out.append(f'<path id="data-{name}-{next(ids)}" d="{d}" fill="none" '
                   f'stroke="{mark.color}" stroke-width="{mark.width:g}"{style}/>')  # fmt: skip
    return out


def _thinned(ticks: list[tuple[float, str]], scale: _Scale) -> list[tuple[float, str]]:
    """Every k-th tick label of a horizontal axis, so that neighbours do not overlap."""
    if len(ticks) < 2:
        return ticks
    gap = min(abs(scale.px(b[0]) - scale.px(a[0])) for a, b in itertools.pairwise(ticks))
    widest = max(text_width(label) for _, label in ticks) + 6
    return ticks[:: max(1, math.ceil(widest / max(gap, 1e-9)))]


def _panel(ax: Axes, box: tuple[float, float, float, float], name: str, k: int,
           ids: itertools.count) -> list[str]:  # fmt: skip
    x0, y0, width, height = box
    xs, ys = _scale(ax, "x"), _scale(ax, "y")
    top = 6 + (18 if ax.title else 0)
    legend, legend_height = _legend(ax, x0 + 8, y0 + top, width - 16)
    top += legend_height + 6
    bottom = 22 + (16 if ax.xlabel else 0)
    yticks = ys.ticks(max(2, int((height - top - bottom) // 45)))
    left = 10 + (16 if ax.ylabel else 0) + max((text_width(t) for _, t in yticks), default=0)
    xs.a, xs.b = x0 + left, x0 + width - 14
    ys.a, ys.b = (y0 + top, y0 + height - bottom) if ys.kind == "category" else (
        y0 + height - bottom, y0 + top)  # fmt: skip
    xticks = _thinned(xs.ticks(max(2, int((xs.b - xs.a) // 90))), xs)
    px0, px1 = xs.a, xs.b
    py0, py1 = min(ys.a, ys.b), max(ys.a, ys.b)
    out = [f'<clipPath id="clip-{name}-{k}"><rect x="{_attr(px0)}" y="{_attr(py0)}" '
           f'width="{_attr(px1 - px0)}" height="{_attr(py1 - py0)}"/></clipPath>']  # fmt: skip
    grid = []
    if ys.kind != "category":
        grid += [f"M{_attr(px0)},{_attr(ys.px(v))}H{_attr(px1)}" for v, _ in yticks]
    elif xs.kind != "category":
        grid += [f"M{_attr(xs.px(v))},{_attr(py0)}V{_attr(py1)}" for v, _ in xticks]
    if grid:
        out.append(f'<path d="{"".join(grid)}" stroke="{GRID}" fill="none"/>')
    out.append(f'<g clip-path="url(#clip-{name}-{k})">')
    out += _marks(ax, xs, ys, ids, name)
    out.append("</g>")
    ticks = "".join(f"M{_attr(xs.px(v))},{_attr(py1)}v4" for v, _ in xticks)
    ticks += "".join(f"M{_attr(px0)},{_attr(ys.px(v))}h-4" for v, _ in yticks)
    out.append(f'<path d="M{_attr(px0)},{_attr(py0)}V{_attr(py1)}H{_attr(px1)}{ticks}" '
               f'stroke="{SPINE}" fill="none"/>')  # fmt: skip
    out += [_text(xs.px(v), py1 + 16, label) for v, label in xticks]
    out += [_text(px0 - 7, ys.px(v) + 4, label, "end") for v, label in yticks]
    if ax.xlabel:
        out.append(_text((px0 + px1) / 2, py1 + 32, ax.xlabel, size=12))
    if ax.ylabel:
        cx, cy = x0 + 13, (py0 + py1) / 2
        out.append(_text(cx, cy, ax.ylabel, size=12,
                         extra=f' transform="rotate(-90 {_attr(cx)} {_attr(cy)})"'))  # fmt: skip
    if ax.title:
        out.append(_text((px0 + px1) / 2, y0 + 18, ax.title, size=12,
                         extra=' font-weight="600"'))  # fmt: skip
    return out + legend


def render_figure(figure: Figure, name: str) -> str:
    """The figure as one ``<svg>`` element whose ids all start with ``name``."""
    cols = min(figure.cols, max(1, len(figure.axes)))
    rows = max(1, math.ceil(len(figure.axes) / cols))
    width, height = figure.width, figure.row_height * rows
    cell = width / cols
    ids = itertools.count()
    body = []
    for k, ax in enumerate(figure.axes):
        box = ((k % cols) * cell, (k // cols) * figure.row_height, cell, figure.row_height)
        body += _panel(ax, box, name, k, ids)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" font-family="system-ui, sans-serif" '
            f'fill="{INK}">' + "".join(body) + "</svg>")  # fmt: skip
