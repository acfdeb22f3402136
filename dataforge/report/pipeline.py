"""Sections of a pipeline run's report, from ``manifest.json`` and the audit folders.

Plots: drop reasons per source; text length before, after extraction and as written, token
length of what was written; the web steps' reasons with examples (``report.web``); perplexity per source with the cutoffs; dedup cluster sizes with example clusters;
the sampling mixture (natural, target, realized); time and CPU per stage. A plot whose stage
is not in the run is replaced by a note saying so.
"""

from __future__ import annotations

import html
import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from dataforge.report.charts import Axes, Figure
from dataforge.report.page import Plot, Section, table_html
from dataforge.report.web import web_sections
from dataforge.runtime.summary import SOURCE_HEADER, STAGE_HEADER, source_rows, stage_rows

__all__ = ["pipeline_sections"]

TOP_REASONS = 8
EXAMPLE_CLUSTERS = 5


def _note(text: str) -> str:
    return f'<p class="note">{text}</p>'


def pipeline_sections(out: Path) -> tuple[str, str, list[Section]]:
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    sources = sorted(manifest["counts"]["by_source"])
    dists = manifest.get("distributions", {})
    subtitle = (
        f"{out} · status {manifest['status']} · config sha256 {manifest['config_sha256'][:12]}"
        f" · {manifest['timings'].get('total', 0):.1f} s"
    )
    sections = [
        Section(
            "Records per source",
            [
                Plot(
                    "drop_reasons", "Dropped records per source by reason", lambda: _drops(manifest)
                )
            ],
            table_html(SOURCE_HEADER, source_rows(manifest), text_columns=(5,)),
        ),
        _lengths_section(dists, sources),
        *web_sections(manifest, out),
        _perplexity_section(manifest, dists, sources),
        _dedup_section(manifest, out),
        _sample_section(manifest),
        Section(
            "Time and CPU per stage",
            [
                Plot(
                    "stage_time",
                    "Seconds inside each stage (summed over tasks) and their CPU "
                    "seconds; wall time of each segment and barrier",
                    lambda: _times(manifest),
                )
            ],
            table_html(STAGE_HEADER, stage_rows(manifest)),
        ),  # fmt: skip
    ]
    if manifest["status"] != "complete":
        error = html.escape(str(manifest.get("error", "no error recorded")))
        sections.insert(0, Section(f"This run is {manifest['status']}, not complete",
                                   html=f'<p class="failed">{error}</p>'))  # fmt: skip
    return f"dataforge run: {manifest['name']}", subtitle, sections


def _drops(manifest: dict[str, Any]):
    by_source = manifest["counts"]["by_source"]
    sources = sorted(by_source)
    totals = Counter(manifest["counts"]["total"]["dropped"])
    top = [r for r, _ in totals.most_common(TOP_REASONS)]
    fig = Figure(row_height=36 * len(sources) + 150)
    ax = fig.add_axes(xlabel="share of the source's input records dropped")
    left = np.zeros(len(sources))
    inputs = np.array([max(1, by_source[s]["input"]) for s in sources], dtype=float)
    for reason in [*top, "other"]:
        values = np.array(
            [
                sum(n for r, n in by_source[s]["dropped"].items() if r not in top)
                if reason == "other"
                else by_source[s]["dropped"].get(reason, 0)
                for s in sources
            ],
            dtype=float,
        )
        if values.any():
            share = values / inputs
            ax.barh(sources, share, left=left, label=reason)
            left += share
    ax.xlim = (0.0, 1.0)
    return fig


def _hist_axes(ax: Axes, edges: np.ndarray, series: list[tuple[str, list[int]]]) -> None:
    """Step histograms over the log-spaced bins, the x range cut to the populated bins."""
    used = np.zeros(len(edges) - 1, dtype=bool)
    for label, counts in series:
        ax.stairs(counts, edges, label=label)
        used |= np.asarray(counts) > 0
    if used.any():  # the populated bins, one bin of margin each side
        bins = np.flatnonzero(used)
        ax.xlim = (edges[max(0, bins[0] - 1)], edges[min(len(edges) - 1, bins[-1] + 2)])


def _hist_grid(titles: list[str], xlabel: str) -> tuple[Figure, list[Axes]]:
    """One histogram panel per title, two to a row."""
    fig = Figure(row_height=260, cols=2)
    axes = [fig.add_axes(title=t, xlabel=xlabel, ylabel="records", xscale="log") for t in titles]
    return fig, axes


def _lengths_section(dists: dict[str, Any], sources: list[str]) -> Section:
    hists = dists.get("histograms", {})
    section = Section("Text and token lengths")
    if not hists.get("chars_before"):
        section.html = _note("This run's manifest has no length distributions.")
        return section
    edges = np.asarray(dists["bin_edges"])

    def chars():
        fig, axes = _hist_grid(sources, "characters")
        for ax, src in zip(axes, sources, strict=True):
            series = [
                (k.split("_")[1], hists.get(k, {}).get(src))
                for k in ("chars_before", "chars_extracted", "chars_after")
            ]
            _hist_axes(ax, edges, [(k, c) for k, c in series if c])
        return fig

    section.plots.append(Plot("text_length", "Text length per source, as read (before: a web "
                              "page's HTML), after extract (extracted) and as written (after)",
                              chars))  # fmt: skip
    if hists.get("tokens_after"):

        def tokens():
            fig = Figure(row_height=300)
            ax = fig.add_axes(xlabel="tokens", ylabel="records", xscale="log")
            _hist_axes(ax, edges, sorted(hists["tokens_after"].items()))
            return fig

        section.plots.append(Plot("token_length", "Tokens per written record, per source "
                                  "(tokenize runs last, so there is no 'before')", tokens))  # fmt: skip
    else:
        section.html = _note("No tokenize stage: no token lengths.")
    return section


def _ppl_cutoffs(manifest: dict[str, Any]) -> dict[str, list[tuple[str, float]]]:
    """Per language: the perplexity_filter's min/max cutoffs and bucket cutoffs."""
    cutoffs: dict[str, list[tuple[str, float]]] = {}
    for stage in manifest["config"]["stages"]:
        if stage["op"] != "perplexity_filter":
            continue
        params = stage.get("params", stage)
        for key in ("max_ppl", "min_ppl"):
            for lang, value in (params.get(key) or {}).items():
                cutoffs.setdefault(lang, []).append((key, float(value)))
        for lang, pair in (params.get("bucket_cutoffs") or {}).items():
            cutoffs.setdefault(lang, []).extend(
                [("head|middle", float(pair[0])), ("middle|tail", float(pair[1]))]
            )
    return cutoffs


def _perplexity_section(manifest, dists, sources) -> Section:
    section = Section("Perplexity")
    ppl = dists.get("histograms", {}).get("ppl")
    if not ppl:
        section.html = _note("No perplexity_filter stage (or nothing scored) in this run.")
        return section
    edges = np.asarray(dists["bin_edges"])
    langs = {i["name"]: i.get("lang") for i in manifest["config"]["inputs"]}
    cutoffs = _ppl_cutoffs(manifest)
    scored = [s for s in sources if s in ppl]

    def draw():
        fig, axes = _hist_grid([f"{src} ({langs.get(src)})" for src in scored], "perplexity")
        for ax, src in zip(axes, scored, strict=True):
            _hist_axes(ax, edges, [("scored", ppl[src])])
            lo, hi = ax.xlim or (edges[0], edges[-1])
            for name, value in cutoffs.get(langs.get(src), []):
                ax.axvline(value, label=f"{name} {value:g}")
                lo, hi = min(lo, value / 1.5), max(hi, value * 1.5)
            ax.xlim = (lo, hi)  # the cutoffs stay in view
        return fig

    section.plots.append(Plot("perplexity", "Perplexity of every scored record (kept and "
                              "dropped) per source, with the stage's cutoffs", draw))  # fmt: skip
    return section


def _dedup_section(manifest: dict[str, Any], out: Path) -> Section:
    section = Section("Dedup clusters")
    path = out / "dedup" / "clusters.parquet"
    if not path.exists():
        section.html = _note("No dedup stage (no dedup/clusters.parquet) in this run.")
        return section
    clusters = pq.read_table(path, columns=["id", "source", "cluster", "kept"])
    sizes = Counter(clusters.column("cluster").to_pylist())
    size_counts = Counter(sizes.values())

    def draw():
        fig = Figure(row_height=300)
        ax = fig.add_axes(xlabel="cluster size (records)", ylabel="clusters", yscale="log")
        xs = sorted(size_counts)
        ax.bar([str(x) for x in xs], [size_counts[x] for x in xs])
        return fig

    section.plots.append(Plot("dedup_clusters", "Clusters of near-duplicates by size", draw))
    section.html = _cluster_examples(clusters, sizes, out)
    return section


def _cluster_examples(clusters: pa.Table, sizes: Counter, out: Path) -> str:
    """The largest clusters, each member with its text where the rejects hold it."""
    largest = [c for c, n in sorted(sizes.items(), key=lambda kv: (-kv[1], kv[0])) if n > 1]
    largest = largest[:EXAMPLE_CLUSTERS]
    if not largest:
        return _note("No cluster has more than one record.")
    members = clusters.filter(pc.is_in(clusters.column("cluster"), pa.array(largest)))
    texts = _reject_texts(out, set(members.column("id").to_pylist()))
    rows = []
    for row in sorted(
        members.to_pylist(), key=lambda r: (largest.index(r["cluster"]), not r["kept"], r["id"])
    ):
        text = texts.get(row["id"], "(kept: in the output)" if row["kept"] else "")
        rows.append([row["cluster"], row["id"], "kept" if row["kept"] else "dropped", text[:300]])
    return table_html(["cluster", "record", "", "text"], rows, text_columns=(1, 2, 3))


def _reject_texts(out: Path, ids: set[str]) -> dict[str, str]:
    texts: dict[str, str] = {}
    for part in sorted((out / "rejects").glob("*.parquet")):
        if "text" not in pq.read_schema(part).names:
            return texts
        table = pq.read_table(part, columns=["id", "text"])
        table = table.filter(pc.is_in(table.column("id"), pa.array(sorted(ids), pa.string())))
        texts.update(
            zip(table.column("id").to_pylist(), table.column("text").to_pylist(), strict=True)
        )
    return texts


def _sample_section(manifest: dict[str, Any]) -> Section:
    section = Section("Sampling mixture")
    summary = next(
        (s["summary"] for s in manifest["stages"] if s["op"] == "sample" and "summary" in s), None
    )
    if summary is None:
        section.html = _note("No sample stage in this run.")
        return section
    per_source = summary["sources"]
    names = sorted(per_source)

    def draw():
        fig = Figure(row_height=320)
        ax = fig.add_axes(ylabel=f"share of {summary.get('unit', 'units')}")
        for k, (key, label) in enumerate(
            [("q", "natural"), ("effective_p", "target"), ("realized_share", "realized")]
        ):
            shares = [per_source[n][key] for n in names]
            ax.bar(names, shares, offset=(k - 1) * 0.27, width=0.27, label=label)
        return fig

    section.plots.append(Plot("sampling_mixture", f"Share of each source: natural, target "
                              f"(alpha {summary.get('alpha')}) and realized", draw))  # fmt: skip
    return section


def _times(manifest: dict[str, Any]):
    stages = manifest["stages"]
    phases = {k: v for k, v in manifest.get("timings", {}).items() if k != "total"}
    fig = Figure(row_height=max(260, 34 * max(len(stages), len(phases)) + 130), cols=2)
    per_stage = fig.add_axes(title="per stage (inside tasks)", xlabel="seconds")
    names = [f"{i}:{s['op']}" for i, s in enumerate(stages)]
    per_stage.barh(names, [s.get("seconds", 0.0) for s in stages], offset=-0.2, height=0.4,
                   label="seconds")  # fmt: skip
    per_stage.barh(names, [s.get("cpu_seconds", 0.0) for s in stages], offset=0.2, height=0.4,
                   label="CPU seconds")  # fmt: skip
    wall = fig.add_axes(title="per segment and barrier", xlabel="wall seconds")
    wall.barh(list(phases), list(phases.values()))
    return fig
