"""``DIR/report.html`` of an ablation: the loss curves of every variant on one plot per
evaluation set, the table of results, and the verdict."""

from __future__ import annotations

import html
import os
from pathlib import Path
from typing import Any

from dataforge.report.charts import Figure
from dataforge.report.page import Plot, Section, render_page, table_html

__all__ = ["write_report"]


def _curves(result: dict[str, Any], set_name: str) -> Figure:
    figure = Figure(width=900, row_height=320)
    ax = figure.add_axes(title=f"held-out loss on {set_name}", xlabel="tokens trained",
                         ylabel="loss (nats/token)")  # fmt: skip
    for variant in result["variants"]:
        points = variant["curves"][set_name]
        ax.plot([p["tokens"] for p in points], [p["loss"] for p in points], label=variant["name"])
    return figure


def _table(result: dict[str, Any]) -> str:
    sets = list(result["eval_sets"])
    header = ["variant", "records kept", "tokens kept", "tokens trained", "epochs"]
    header += [f"{s} loss [95% CI]" for s in sets] + ["wall s", "CPU s"]
    rows = []
    for v in result["variants"]:
        cells = [v["name"], str(v["records_kept"]), str(v["tokens_kept"]),
                 str(v["tokens_trained"]), f"{v['epochs']:.2f}"]  # fmt: skip
        for s in sets:
            e = v["eval"][s]
            spread = f" ±{e['spread']:.4f}" if len(v["seeds"]) > 1 else ""
            cells.append(f"{e['loss']:.4f}{spread} [{e['ci'][0]:.4f}, {e['ci'][1]:.4f}]")
        cells.append(f"{v['pipeline_wall_s'] + v['train_wall_s']:.0f}")
        cells.append(f"{v['pipeline_cpu_s'] + v['train_cpu_s']:.0f}")
        rows.append(cells)
    return table_html(header, rows)


def write_report(result: dict[str, Any], path: Path) -> Path:
    """Write the page atomically (a temporary file beside ``path``, then a rename)."""
    plots = [
        Plot(
            f"curve-{i}",
            f"loss on {name} against tokens trained, mean over seeds",
            lambda name=name: _curves(result, name),
        )  # fmt: skip
        for i, name in enumerate(result["eval_sets"])
    ]
    verdict = "".join(f"<p>{html.escape(line)}</p>" for line in result["summary"])
    sections = [
        Section("Verdict", html=verdict),
        Section("Loss curves", plots=plots),
        Section("Variants", html=_table(result)),
    ]
    seeds = ", ".join(str(s) for s in result["seeds"])
    subtitle = f"{result['tokens_budget']} tokens per model; seeds {seeds}"
    page = render_page(f"Ablation {result['name']}", subtitle, sections)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(page, encoding="utf-8")
    os.replace(tmp, path)
    return path
