"""``dataforge report``: one self-contained HTML file with plots, for a pipeline run
directory (``manifest.json``) or a training run directory (``metrics.jsonl``)."""

from __future__ import annotations

from pathlib import Path

from dataforge.report.page import render_page

__all__ = ["ReportError", "write_report"]


class ReportError(ValueError):
    """The path is neither a pipeline run nor a training run."""


def write_report(path: Path, output: Path | None = None) -> Path:
    """Write the report of the run at ``path`` (default ``path/report.html``, written
    atomically). Returns the file written.

    Raises:
        ReportError: no ``manifest.json`` or ``metrics.jsonl`` in ``path``, or the manifest
            is of a run that did not complete.
    """
    path = Path(path)
    if (path / "manifest.json").is_file():
        from dataforge.report.pipeline import pipeline_sections

        title, subtitle, sections = pipeline_sections(path)
    elif (path / "metrics.jsonl").is_file():
        from dataforge.report.training import training_sections

        try:
            title, subtitle, sections = training_sections(path)
        except ValueError as exc:
            raise ReportError(str(exc)) from exc
    else:
        raise ReportError(
            f"{path}: neither a pipeline run directory (manifest.json) nor a training run "
            "directory (metrics.jsonl)"
        )
    output = Path(output) if output else path / "report.html"
    tmp = output.with_name(f".{output.name}.tmp")
    tmp.write_text(render_page(title, subtitle, sections), encoding="utf-8")
    tmp.replace(output)
    return output
