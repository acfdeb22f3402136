"""The closing summary of a run: a table per source and a table per stage.

Built from ``manifest.json`` alone, so it reads the same for a fresh run and a resumed one.
A cell is shown escaped (:func:`dataforge.text.terminal.printable`): a drop reason may come
from the data (a WARC record's type), and no control character in it reaches the terminal.
"""

from __future__ import annotations

from typing import Any, TextIO

from dataforge.text.terminal import printable

__all__ = ["TOP_REASONS", "render_summary", "source_rows", "stage_rows"]

TOP_REASONS = 3


def source_rows(manifest: dict[str, Any]) -> list[list[str]]:
    """Per source and in total: in, kept, repeated, dropped, the top drop reasons."""
    counts = manifest["counts"]
    rows = []
    for name, c in [*sorted(counts["by_source"].items()), ("total", counts["total"])]:
        dropped = c["dropped"]
        top = sorted(dropped.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_REASONS]
        rows.append(
            [
                name,
                f"{c['input']:,}",
                f"{c['kept']:,}",
                f"{c.get('repeated', 0):,}",
                f"{sum(dropped.values()):,}",
                ", ".join(f"{reason} {n:,}" for reason, n in top) or "-",
            ]
        )
    return rows


def stage_rows(manifest: dict[str, Any]) -> list[list[str]]:
    """Per stage: seconds inside tasks (actor-seconds) and CPU seconds; then the wall time
    of every segment and barrier and of the whole run."""
    rows = [
        [f"{i}: {s['op']}", f"{s.get('seconds', 0.0):.1f}", f"{s.get('cpu_seconds', 0.0):.1f}"]
        for i, s in enumerate(manifest["stages"])
    ]
    for name, seconds in manifest.get("timings", {}).items():
        rows.append([f"wall: {name}", f"{seconds:.1f}", ""])
    return rows


SOURCE_HEADER = ["source", "in", "kept", "repeated", "dropped", "top drop reasons"]
STAGE_HEADER = ["stage", "seconds", "CPU seconds"]
_TEXT = {"top drop reasons"}


def render_summary(manifest: dict[str, Any], stream: TextIO, rich_output: bool) -> None:
    """Print both tables, with ``rich`` in a terminal, as aligned text otherwise."""
    tables = [
        (title, header, [[printable(cell) for cell in row] for row in rows])
        for title, header, rows in (
            ("records per source", SOURCE_HEADER, source_rows(manifest)),
            ("time per stage", STAGE_HEADER, stage_rows(manifest)),
        )
    ]
    if rich_output:
        from rich.console import Console
        from rich.table import Table
        from rich.text import Text

        console = Console(file=stream)
        for title, header, rows in tables:
            table = Table(title=title, title_justify="left")
            for i, col in enumerate(header):
                table.add_column(col, justify="left" if i == 0 or col in _TEXT else "right")
            for row in rows:
                table.add_row(*(Text(cell) for cell in row))
            console.print(table)
        return
    for title, header, rows in tables:
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
        print(f"[dataforge] {title}:", file=stream)
        for row in [header, *rows]:
            cells = [
                c.ljust(w) if i == 0 or header[i] in _TEXT else c.rjust(w)
                for i, (c, w) in enumerate(zip(row, widths, strict=True))
            ]
            print("  " + "  ".join(cells).rstrip(), file=stream)
    stream.flush()
