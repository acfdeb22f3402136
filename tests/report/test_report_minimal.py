"""The report of a run with no filtering stages: the plots it can draw, a note for the others,
and no warning from the plotting library."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

from dataforge.config import load_pipeline
from dataforge.report import write_report
from dataforge.runtime.pipeline import LocalExecutor, run_pipeline


def test_report_of_a_pass_through_run(pipeline_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    manifest = run_pipeline(load_pipeline(pipeline_file), out, LocalExecutor(), log=lambda m: None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        path = write_report(out)
    html = path.read_text(encoding="utf-8")
    assert re.findall(r'data-plot="(\w+)"', html) == ["drop_reasons", "text_length", "stage_time"]
    for note in (
        "No tokenize stage",
        "No perplexity_filter stage",
        "No dedup stage",
        "No sample stage",
    ):
        assert note in html
    assert re.search(r'(src|href)="https?:', html) is None  # nothing to fetch
    assert "mathdefault" not in html  # log axes are labelled in plain text
    # the table holds the manifest's counts
    for source, counts in manifest["counts"]["by_source"].items():
        assert f"<td>{source}</td><td>{counts['input']:,}</td><td>{counts['kept']:,}</td>" in html


def test_log_axis_labels_are_plain_text() -> None:
    """Log axes keep matplotlib's ticks and its choice of labels, written as plain text
    (mathtext parsing was a sixth of the report's drawing time)."""
    from dataforge.report.page import Plot, Section, _PlainLogFormatter, new_figure, render_page

    plain = _PlainLogFormatter()
    assert [plain(v) for v in (1.0, 1000.0, 0.01)] == ["10⁰", "10³", "10⁻²"]

    def draw(lo: float, hi: float):
        def figure():
            fig = new_figure(4, 2)
            ax = fig.add_subplot()
            ax.plot([lo, hi], [1, 2])
            ax.set_xscale("log")
            return fig

        return figure

    html = render_page(
        "t",
        "s",
        [Section("x", [Plot("decades", "", draw(0.5, 2e6)), Plot("inside", "", draw(200, 900))])],
    )
    labels = re.findall(r">\s*([^<>]*10[⁰¹²³⁴⁵⁶⁷⁸⁹⁻]+)\s*<", html)
    assert {"10⁰", "10³", "10⁶"} <= set(labels)  # decades
    assert "2×10²" in labels  # a range inside one decade labels its minor ticks
    assert "mathdefault" not in html and "$" not in html
