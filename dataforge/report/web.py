"""The report's sections for web corpora: one per web step (reading WARC/WET/HTML,
``extract``, ``url_filter``, ``line_dedup``, ``pii``) that left a drop reason or an event in
the run, each with its counts per reason and a few dropped records with their URL.

Examples come from ``rejects/`` (``output.rejects: true``), which keep each dropped record's
text and meta (its URL, WARC record id and date).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from dataforge.report.page import Section, table_html

__all__ = ["WEB_STEPS", "web_sections"]

WEB_STEPS = {
    "warc": "Reading web archives (WARC, WET, HTML)",
    "extract": "extract: main text of pages",
    "url": "url_filter: URL rules",
    "line_dedup": "line_dedup: repeated lines",
    "pii": "pii: personal data",
}
"""Reason prefix (the part before the first ``:``) -> section title."""

EXAMPLES_PER_REASON = 3
EXCERPT_CHARS = 200


def web_sections(manifest: dict[str, Any], out: Path) -> list[Section]:
    """One section per web step whose reasons or events appear in the run's counts."""
    total = manifest["counts"]["total"]
    drops = Counter(total.get("dropped", {}))
    events: Counter[str] = Counter()
    for counts in manifest["counts"]["by_source"].values():
        events.update(counts.get("events", {}))
    examples = _examples(out, {r for r in drops if _step(r) in WEB_STEPS})
    sections = []
    for step, title in WEB_STEPS.items():
        rows = [
            [reason, "dropped", f"{n:,}", _cells(examples.get(reason, []))]
            for reason, n in sorted(drops.items())
            if _step(reason) == step
        ]
        rows += [
            [name, "event", f"{n:,}", ""]
            for name, n in sorted(events.items())
            if _step(name) == step
        ]
        if rows:
            header = ["reason or event", "", "records", "examples (URL · id · text)"]
            sections.append(Section(title, html=table_html(header, rows, text_columns=(0, 3))))
    return sections


def _step(reason: str) -> str:
    return reason.split(":", 1)[0]


def _cells(found: list[tuple[str, str, str]]) -> str:
    return " | ".join(f"{url or '(no URL)'} · {rid} · {text}" for url, rid, text in found)


def _examples(out: Path, reasons: set[str]) -> dict[str, list[tuple[str, str, str]]]:
    """Up to ``EXAMPLES_PER_REASON`` dropped records per reason: URL, id, text excerpt."""
    found: dict[str, list[tuple[str, str, str]]] = {}
    for part in sorted((out / "rejects").glob("*.parquet")):
        names = pq.read_schema(part).names
        if "meta" not in names or "text" not in names:
            return found  # rejects off, or written before they kept meta
        table = pq.read_table(part, columns=["id", "drop", "text", "meta"])
        wanted = [r for r in reasons if len(found.get(r, [])) < EXAMPLES_PER_REASON]
        if not wanted:
            break
        table = table.filter(
            pc.is_in(table.column("drop"), value_set=pa.array(sorted(wanted), pa.string()))
        )
        for row in table.to_pylist():
            into = found.setdefault(row["drop"], [])
            if len(into) < EXAMPLES_PER_REASON:
                meta = json.loads(row["meta"]) if row["meta"] else {}
                text = " ".join((row["text"] or "").split())[:EXCERPT_CHARS]
                into.append((str(meta.get("url") or ""), row["id"], text))
    return found
