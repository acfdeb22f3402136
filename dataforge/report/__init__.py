"""``dataforge report``: one self-contained HTML file with plots, for a pipeline run
directory (``manifest.json``) or a training run directory (``metrics.jsonl``).

The report replaces only a report dataforge wrote (recognised by the page's ``generator``
tag, or the opening of pages from before it), written atomically
(:mod:`dataforge.io.owned_output`). A run whose manifest says it failed gets a report
that says so at the top; ``dataforge report`` then exits 1.
"""

from __future__ import annotations

from pathlib import Path

from dataforge.io.owned_output import OutputPathError, check_file_target, write_file
from dataforge.report.page import GENERATOR, render_page

__all__ = ["ReportError", "is_report_file", "run_status", "write_report"]

_OPENINGS = (  # reports written before the generator tag
    '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n<title>dataforge run: ',
    '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n<title>training run: ',
)
_MAX_DETAIL = 200


class ReportError(ValueError):
    """The path is neither a pipeline run nor a training run, its manifest or metrics are
    malformed, or the output path may not be written."""


def is_report_file(path: Path) -> bool:
    """``path`` is a report dataforge wrote (so a new report may replace it)."""
    with open(path, "rb") as f:
        head = f.read(1024).decode("utf-8", "replace")
    return GENERATOR in head or head.startswith(_OPENINGS)


def _malformed(source: Path, exc: Exception) -> ReportError:
    detail = f"{type(exc).__name__}: {exc}".replace("\n", " ")
    if len(detail) > _MAX_DETAIL:
        detail = detail[:_MAX_DETAIL] + "..."
    return ReportError(
        f"{source}: malformed ({detail}); it is not as dataforge writes it: rerun the run "
        "that wrote it, or restore the file"
    )


def run_status(path: Path) -> str | None:
    """The ``status`` of the pipeline run at ``path`` (``complete``, ``failed``), or None
    for a training run or a manifest without one."""
    import json

    try:
        manifest = json.loads((Path(path) / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    status = manifest.get("status") if isinstance(manifest, dict) else None
    return status if isinstance(status, str) else None


def _page(path: Path) -> str:
    if (path / "manifest.json").is_file():
        from dataforge.report.pipeline import pipeline_sections

        source = path / "manifest.json"
        build = pipeline_sections
    elif (path / "metrics.jsonl").is_file():
        from dataforge.report.training import training_sections

        source = path / "metrics.jsonl"
        build = training_sections
    else:
        raise ReportError(
            f"{path}: neither a pipeline run directory (manifest.json) nor a training run "
            "directory (metrics.jsonl)"
        )
    try:
        return render_page(*build(path))  # the plots are drawn while the page is
    except (ValueError, KeyError, TypeError, AttributeError, IndexError, RecursionError) as exc:
        if isinstance(exc, ValueError) and str(exc).startswith(str(source)):
            raise ReportError(str(exc)) from None  # already says which line and why
        raise _malformed(source, exc) from None


def write_report(path: Path, output: Path | None = None) -> Path:
    """Write the report of the run at ``path`` (default ``path/report.html``, written
    atomically). Returns the file written.

    Raises:
        ReportError: no ``manifest.json`` or ``metrics.jsonl`` in ``path``, either is
            malformed, or ``output`` exists and is not a report dataforge wrote (or is not
            a regular file, or its folder is missing).
    """
    path = Path(path)
    output = Path(output) if output else path / "report.html"
    try:
        check_file_target(output, "dataforge report", is_report_file)  # before any work
        write_file(output, _page(path), "dataforge report", is_report_file)
    except OutputPathError as exc:
        raise ReportError(str(exc)) from None
    return output
