"""Sections of a training run's report, from the trainer's ``metrics.jsonl``.

One record per step (see ``trainer.loop``): loss, learning rate, gradient norm, tokens/s,
MFU, memory, DPO preference accuracy and reward margin; evaluation passes add records of
their own (``step`` and ``val_*`` keys, no ``loss``). A resumed run appends to the same
file; the last record of each step wins.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from dataforge.report.charts import Figure
from dataforge.report.page import Plot, Section, table_html

__all__ = ["training_sections"]

SMOOTHING = 0.9


def _read(path: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Training records and evaluation records, each one per step in step order."""
    by_step: dict[int, dict[str, Any]] = {}
    evals: dict[int, dict[str, Any]] = {}
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{n}: not JSON ({exc.msg})") from exc
            if not isinstance(record, dict) or not isinstance(record.get("step"), int):
                raise ValueError(f"{path}:{n}: not a metrics record (an object with an int step)")
            if "loss" not in record:
                evals[int(record["step"])] = record
            elif record.get("applied", 1.0):
                by_step[int(record["step"])] = record
    return [by_step[s] for s in sorted(by_step)], [evals[s] for s in sorted(evals)]


def _series(records: list[dict[str, Any]], key: str) -> tuple[np.ndarray, np.ndarray]:
    pairs = [(r["step"], r[key]) for r in records if r.get(key) is not None]
    if not pairs:
        return np.array([]), np.array([])
    steps, values = zip(*pairs, strict=True)
    return np.asarray(steps, dtype=float), np.asarray(values, dtype=float)


def _ema(values: np.ndarray) -> np.ndarray:
    """Bias-corrected exponential moving average; a value that is not finite (a step whose
    loss was NaN) is skipped: it gets no point and does not end the curve."""
    out, raw, seen = np.full_like(values, np.nan), 0.0, 0
    for i, v in enumerate(values):
        if not np.isfinite(v):
            continue
        raw, seen = SMOOTHING * raw + (1 - SMOOTHING) * v, seen + 1
        out[i] = raw / (1 - SMOOTHING**seen)
    return out


def _line_plot(
    records, keys: list[tuple[str, str]], ylabel: str, smooth: bool = False, log: bool = False
):
    def draw():
        fig = Figure(row_height=270)
        ax = fig.add_axes(xlabel="step", ylabel=ylabel, yscale="log" if log else "linear")
        for key, label in keys:
            steps, values = _series(records, key)
            if not len(steps):
                continue
            ax.plot(steps, values, label=label, opacity=0.35 if smooth else 1.0, width=1)
            if smooth:
                color = ax.marks[-1].color
                ax.plot(steps, _ema(values), label=f"{label} (smoothed)", width=1.8, color=color)
        return fig

    return draw


def training_sections(run_dir: Path) -> tuple[str, str, list[Section]]:
    records, evals = _read(run_dir / "metrics.jsonl")
    if not records:
        raise ValueError(f"{run_dir / 'metrics.jsonl'}: no applied step recorded")
    has = {k for r in records for k, v in r.items() if v is not None}
    last = records[-1]
    plots = [
        Plot("loss", "Training loss per step", _line_plot(records, [("loss", "loss")], "loss", smooth=True)),
        Plot("lr", "Learning rate", _line_plot(records, [("lr", "lr")], "learning rate")),
        Plot("grad_norm", "Gradient norm before clipping",
             _line_plot(records, [("grad_norm", "grad norm")], "norm", smooth=True, log=True)),
        Plot("tokens_per_s", "Real tokens per second (all ranks)",
             _line_plot(records, [("tokens_per_s", "tokens/s")], "tokens/s", smooth=True)),
    ]  # fmt: skip
    if "mfu" in has:
        plots.append(
            Plot(
                "mfu",
                "Model FLOPs utilization",
                _line_plot(records, [("mfu", "MFU")], "MFU", smooth=True),
            )
        )
    if "nccl_all_reduce_time" in has:
        plots.append(Plot("nccl_all_reduce_time", "DDP gradient all-reduce time per step (s)",
                          _line_plot(records, [("nccl_all_reduce_time", "all-reduce")], "seconds",
                                     smooth=True)))  # fmt: skip
    memory = [(k, k) for k in ("mem_allocated_gib", "mem_reserved_gib", "max_rss_gib") if k in has]
    plots.append(Plot("memory", "Memory (GiB): peak allocated/reserved on GPU, max RSS on CPU",
                      _line_plot(records, memory, "GiB")))  # fmt: skip
    if "preference_accuracy" in has:
        plots.append(Plot("dpo", "DPO: preference accuracy and reward margin", _line_plot(
            records, [("preference_accuracy", "accuracy"), ("reward_margin", "margin")], "value", smooth=True)))  # fmt: skip
    sections = [Section("Training", plots)]
    eval_keys = sorted(
        {k for r in evals for k, v in r.items() if k.startswith("val_") and k != "val_weight"}
    )
    if eval_keys:
        draw = _line_plot(evals, [(k, k) for k in eval_keys], "value")
        sections.append(Section("Evaluation", [Plot("eval", "Held-out evaluation", draw)]))
    else:
        sections[0].html = '<p class="note">No evaluation records (val_*) in metrics.jsonl.</p>'
    summary = [
        ["steps", f"{last['step']:,}"],
        ["tokens seen", f"{last.get('tokens_seen', 0):,}"],
        ["final loss", f"{last['loss']:.4f}"],
        ["skipped steps", f"{last.get('skipped_steps', 0)}"],
        ["mean step time (s)", f"{np.mean([r['step_time_s'] for r in records]):.3f}"],
    ]
    sections[0].html = table_html(["", "value"], summary) + sections[0].html
    return f"training run: {run_dir.name}", f"{run_dir} · {len(records)} steps recorded", sections
