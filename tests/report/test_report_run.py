"""``dataforge run`` in a terminal (live progress, clean log) and its report in Chromium."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from chromium_kit import render

pytestmark = [pytest.mark.ray, pytest.mark.slow]

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
BAD_LINE = re.compile(
    r"warn|error|deprecat|traceback|core_worker|progress bars|exception", re.IGNORECASE
)
PIPELINE_PLOTS = {
    "drop_reasons",
    "text_length",
    "token_length",
    "perplexity",
    "dedup_clusters",
    "sampling_mixture",
    "stage_time",
}


def screenshot_dir(tmp_path: Path) -> Path:
    """Where screenshots go: ``DATAFORGE_SCREENSHOT_DIR`` (kept by CI) or the test's tmp."""
    path = Path(os.environ.get("DATAFORGE_SCREENSHOT_DIR", tmp_path))
    path.mkdir(parents=True, exist_ok=True)
    return path


def test_run_in_a_terminal_shows_live_progress_and_a_clean_log(demo_like_run: dict) -> None:
    assert demo_like_run["code"] == 0, demo_like_run["terminal"][-3000:]
    raw = demo_like_run["terminal"]
    text = ANSI.sub("", raw).replace("\r", "\n")
    # the live table was redrawn while the run went (rich redraws it twice a second; this
    # run takes a few seconds), not only drawn once at the end
    assert raw.count("rec/s") >= 2, raw[-2000:]
    assert "\x1b[" in raw  # drawn in place, with cursor movements
    for phase in ("segment 0 [clean, quality_filter, perplexity_filter]", "barrier 3 [dedup]",
                  "barrier 4 [sample]", "segment 2 [tokenize]"):  # fmt: skip
        assert phase in text, text[:5000]
    assert "✓ segment 2 [tokenize]" in text  # the final frame shows every phase done
    bad = [line for line in text.splitlines() if BAD_LINE.search(line)]
    assert bad == []
    # the closing summary adds up to the manifest
    manifest = json.loads((demo_like_run["out"] / "manifest.json").read_text())
    total = manifest["counts"]["total"]
    assert "records per source" in text and "time per stage" in text
    assert f"{total['input']:,}" in text and f"{total['kept']:,}" in text
    summary = json.loads(demo_like_run["stdout"].strip().splitlines()[-1])
    assert summary["input"] == total["input"] == summary["kept"] + sum(summary["dropped"].values())


def test_histograms_add_up_to_the_counts(demo_like_run: dict) -> None:
    manifest = json.loads((demo_like_run["out"] / "manifest.json").read_text())
    hists = manifest["distributions"]["histograms"]
    for source, counts in manifest["counts"]["by_source"].items():
        assert sum(hists["chars_before"][source]) == counts["input"]
        written = counts["kept"] + counts["repeated"]
        assert sum(hists["chars_after"].get(source, [])) == written
        assert sum(hists["tokens_after"].get(source, [])) == written
        # every record that reached perplexity_filter was scored (or dropped as empty)
        reached = counts["input"] - sum(
            n for r, n in counts["dropped"].items() if r.startswith("quality")
        )
        empty = counts["dropped"].get("perplexity:empty", 0)
        assert sum(hists["ppl"].get(source, [])) == reached - empty
    assert any(
        r == "perplexity" for c in manifest["counts"]["by_source"].values() for r in c["dropped"]
    )


def test_run_report_renders_in_chromium(demo_like_run: dict, tmp_path: Path) -> None:
    report = demo_like_run["out"] / "report.html"
    assert report.is_file() and report.stat().st_size < 1_500_000
    shot = screenshot_dir(tmp_path) / "report-pipeline.png"
    result = render(report, shot, tmp_path / "profile")
    assert result["errors"] == []
    assert result["requests"] == []  # self-contained: nothing fetched at view time
    plots = {p["name"]: p for p in result["plots"]}
    assert set(plots) == PIPELINE_PLOTS
    for plot in plots.values():
        assert plot["width"] > 300 and plot["height"] > 150, plot
        assert plot["marks"] >= 1, plot
    # one bar per (source, reason) with drops, one set of bars per source in the mixture
    assert plots["sampling_mixture"]["marks"] == 3 * 3
    assert shot.stat().st_size > 10_000 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
