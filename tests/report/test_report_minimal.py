"""The report of a run with no filtering stages: the plots it can draw, a note for the others,
and no warning from the plotting library."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

from dataforge.config import load_pipeline
from dataforge.report import write_report
from dataforge.runtime.executors.local import LocalExecutor
from dataforge.runtime.pipeline import run_pipeline


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
