"""The report's SVG charts: ticks, labels, geometry of the marks, well-formed output."""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataforge.report.charts import Figure
from dataforge.report.svg import (
    linear_ticks,
    log_labels,
    log_ticks,
    render_figure,
    scientific,
    text_width,
)

SVG = "{http://www.w3.org/2000/svg}"


def _parse(svg: str) -> ET.Element:
    return ET.fromstring(svg)


def _marks(root: ET.Element) -> list[ET.Element]:
    return [e for e in root.iter() if e.get("id", "").startswith("data-")]


def test_linear_ticks() -> None:
    assert linear_ticks(0, 1) == ([0.0, 0.2, 0.4, 0.6, 0.8, 1.0], 0.2)
    assert linear_ticks(0, 37) == ([0.0, 10.0, 20.0, 30.0], 10.0)
    assert linear_ticks(3.1, 4.2) == ([3.25, 3.5, 3.75, 4.0], 0.25)
    assert linear_ticks(0, 10, target=4) == ([0.0, 2.5, 5.0, 7.5, 10.0], 2.5)
    assert linear_ticks(-2, 2, target=4) == ([-2.0, -1.0, 0.0, 1.0, 2.0], 1.0)
    assert linear_ticks(5, 5) == ([5], 1.0)


def test_log_ticks_and_labels() -> None:
    assert log_ticks(0.5, 2e6) == [1.0, 10.0, 100.0, 1e3, 1e4, 1e5, 1e6]
    assert log_labels(log_ticks(0.5, 2e6)) == ["10⁰", "10¹", "10²", "10³", "10⁴", "10⁵", "10⁶"]
    assert log_ticks(1, 10**16) == [10.0**k for k in range(0, 17, 3)]  # thinned to <= 8
    assert log_ticks(3, 40) == [5.0, 10.0, 20.0]  # one decade inside: 1, 2, 5 of each
    assert log_ticks(200, 450) == [200.0, 300.0, 400.0]  # inside a decade: every multiple
    assert log_labels([10.0, 100.0, 1000.0]) == ["10", "100", "1000"]
    assert log_labels([0.001, 0.1]) == ["10⁻³", "10⁻¹"]
    assert log_labels([2e5, 1e6]) == ["2×10⁵", "10⁶"]


def test_text_width_counts_wide_characters_as_one_em() -> None:
    assert text_width("ab", 10) == pytest.approx(12.0)
    assert text_width("新闻", 10) == pytest.approx(20.0)


def test_bars_are_proportional_to_their_values_and_carry_ids_and_tooltips() -> None:
    fig = Figure()
    ax = fig.add_axes(xlabel="share")
    ax.barh(["a", "b"], [0.25, 0.5], label="x<y")
    ax.barh(["a", "b"], [0.25, 0.0], left=[0.25, 0.5], label="z")
    ax.xlim = (0.0, 1.0)
    root = _parse(render_figure(fig, "drops"))
    bars = _marks(root)
    assert [b.get("id") for b in bars] == [f"data-drops-{n}" for n in range(4)]
    widths = [float(b.get("width")) for b in bars]
    unit = widths[0] / 0.25
    assert widths == pytest.approx([0.25 * unit, 0.5 * unit, 0.25 * unit, 0.0], abs=0.1)
    # stacked: the second series starts where the first ends
    assert float(bars[2].get("x")) == pytest.approx(float(bars[0].get("x")) + widths[0], abs=0.1)
    # the first category on top
    assert float(bars[0].get("y")) < float(bars[1].get("y"))
    assert bars[0].find(f"{SVG}title").text == "a · x<y: 0.25"
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert {"a", "b", "x<y", "z", "share", "0.0", "1.0"} <= set(texts)


def test_histogram_lines_and_marker_lines() -> None:
    fig = Figure(cols=2)
    hist = fig.add_axes(title="t", xscale="log")
    hist.stairs([1, 3, 0], [1, 10, 100, 1000], label="before")
    hist.axvline(500, label="max_ppl 500")
    lines = fig.add_axes(yscale="log")
    lines.plot([0, 1, 2], [1.0, 0.0, 100.0], label="norm")  # 0 has no place on a log axis
    root = _parse(render_figure(fig, "p"))
    steps, marker, line = _marks(root)
    # up at the first edge, across each bin, down at the last edge
    assert re.fullmatch(r"M[\d.]+,[\d.]+(V[\d.]+H[\d.]+){3}V[\d.]+", steps.get("d"))
    assert marker.get("stroke-dasharray") == "5 3"
    assert line.get("d").count("L") == 1  # two of the three points
    assert len(root.findall(f"{SVG}clipPath")) == 2


def test_mismatched_categories_and_scales_are_errors() -> None:
    ax = Figure().add_axes()
    ax.bar(["a", "b"], [1, 2])
    with pytest.raises(ValueError, match="x categories differ"):
        ax.bar(["a", "c"], [1, 2])
    with pytest.raises(ValueError, match="'symlog' is not valid; valid: 'linear', 'log'"):
        Figure().add_axes(yscale="symlog")
    with pytest.raises(ValueError, match="4 edges for 2 counts"):
        Figure().add_axes().stairs([1, 2], [1, 2, 3, 4])


@settings(max_examples=200, deadline=None)
@given(
    values=st.lists(st.floats(), min_size=1, max_size=30),  # NaN, infinities, extremes too
    log=st.booleans(),
    label=st.text(max_size=20),
)
def test_any_data_gives_a_well_formed_svg_with_one_mark_per_bar(values, log, label) -> None:
    fig = Figure(cols=2)
    names = [f"s{i}" for i in range(len(values))]
    fig.add_axes(yscale="log" if log else "linear").bar(names, values, label=label or None)
    fig.add_axes(xscale="log" if log else "linear").plot(range(len(values)), values)
    svg = render_figure(fig, "h")
    root = _parse(svg)
    bars = [m for m in _marks(root) if m.tag == f"{SVG}rect"]
    assert len(bars) == sum(math.isfinite(v) for v in values)  # no bar for NaN or inf
    for bar in bars:
        assert float(bar.get("height")) >= 0 and float(bar.get("width")) >= 0
    assert re.search(r'="[^"]*(nan|inf)', svg) is None  # every coordinate a number
    assert render_figure(fig, "h") == svg  # deterministic


def test_extreme_values_and_bad_limits() -> None:
    fig = Figure()
    fig.add_axes(yscale="log").bar(["a", "b"], [1e308, 1e-320])
    assert len(_marks(_parse(render_figure(fig, "x")))) == 2
    fig = Figure()
    ax = fig.add_axes(xscale="log")
    ax.plot([1, 2], [1, 2])
    ax.xlim = (0.0, 10.0)
    with pytest.raises(ValueError, match=r"xlim: \(0.0, 10.0\) is not a valid log range"):
        render_figure(fig, "x")


def test_values_that_are_not_numbers_are_left_out() -> None:
    """A diverged run's loss (NaN, inf) neither breaks the axes nor draws a point."""
    fig = Figure(cols=2)
    fig.add_axes().plot([1, 2, 3, 4], [2.0, float("nan"), float("inf"), 1.0])
    fig.add_axes().bar(["a", "b"], [float("nan"), 3.0])
    svg = render_figure(fig, "n")
    assert "nan" not in svg.lower() and "inf" not in svg.lower()
    line, bar = _marks(_parse(svg))
    assert line.get("d").count("L") == 1 and bar.find(f"{SVG}title").text == "b: 3"


@pytest.mark.parametrize("value", [5e-324, 1e-310, 1e-300, 1e300, 1.7e308])
@pytest.mark.parametrize("kind", ["bar", "plot"])
def test_log_axes_at_the_ends_of_the_float_range(value: float, kind: str) -> None:
    fig = Figure()
    ax = fig.add_axes(yscale="log")
    if kind == "bar":
        ax.bar(["a", "b"], [value, 1.0])
    else:
        ax.plot([0, 1], [value, 1.0])
    marks = _marks(_parse(render_figure(fig, "e")))
    assert len(marks) == (2 if kind == "bar" else 1)


def test_charts_import_nothing_of_the_svg_writer() -> None:
    """No import circle in the report package: svg imports charts, never the reverse
    (type-checking imports included)."""
    import grimp

    graph = grimp.build_graph("dataforge", exclude_type_checking_imports=False)
    assert graph.direct_import_exists(
        importer="dataforge.report.svg", imported="dataforge.report.charts"
    )
    assert graph.find_shortest_chain("dataforge.report.charts", "dataforge.report.svg") is None


def test_scientific_labels() -> None:
    values = (0, 1e-4, 5e-5, 2.5e-5, -3e-6, 1.5e8, -1e-5, -5e-324, 999999.0)
    assert [scientific(v) for v in values] == [
        "0", "10⁻⁴", "5×10⁻⁵", "2.5×10⁻⁵", "-3×10⁻⁶", "1.5×10⁸", "-10⁻⁵", "-4.94×10⁻³²⁴", "10⁶"
    ]  # fmt: skip
    fig = Figure()
    fig.add_axes().plot([0, 1], [0.0, 1e-4])  # a learning rate
    texts = {t.text for t in _parse(render_figure(fig, "lr")).iter(f"{SVG}text")}
    assert {"2×10⁻⁵", "10⁻⁴"} <= texts


def test_a_nan_loss_neither_ends_the_smoothed_curve_nor_draws_a_point(tmp_path) -> None:
    import json

    from dataforge.report import write_report

    records = [{"applied": 1.0, "step": s, "loss": 2.0 - s / 100, "lr": 1e-3, "grad_norm": 1.0,
                "tokens_per_s": 10.0, "step_time_s": 0.1} for s in range(1, 21)]  # fmt: skip
    records[9]["loss"] = float("nan")
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
    html = write_report(tmp_path).read_text(encoding="utf-8")
    loss = html[html.index('data-plot="loss"') :]
    loss = loss[: loss.index("</svg>")]
    raw, smoothed = re.findall(r'id="data-loss-\d+" d="([^"]+)"', loss)
    assert raw.count("L") == smoothed.count("L") == 18  # 19 finite steps: 18 segments
