"""Distributions a run reports: text length, token length and perplexity per source.

Every task fills fixed, log-spaced histograms (the same bin edges everywhere, so tasks merge
by adding counts) while it runs: text length of what was read (``before``: a web page's
HTML), of the main text the ``extract`` stage kept (``extracted``) and of what a final
segment writes (``after``), token counts of what is written, and the perplexity the
``perplexity_filter`` stage gave to the records it scored (kept and dropped alike). Each
observation is one Arrow kernel plus ``np.bincount`` over the batch; the merged histograms go
into ``manifest.json`` under ``distributions`` and feed ``dataforge report``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dataforge.records import DROP

__all__ = ["BIN_EDGES", "Distributions", "merge_distributions"]

# Log-spaced edges, 8 bins per decade from 1 to 10^7 (chars, tokens, perplexity); the first
# bin also takes values below 1, the last those above 10^7.
BIN_EDGES: list[float] = [10 ** (k / 8) for k in range(0, 57)]
_LOG_EDGES = np.log10(np.asarray(BIN_EDGES))
_PPL = r'"ppl":\s*(?P<ppl>[-+0-9.eE]+)'
KINDS = ("chars_before", "chars_extracted", "chars_after", "tokens_after", "ppl")


def _bin_counts(values: np.ndarray) -> np.ndarray:
    logs = np.log10(np.maximum(values.astype(np.float64), 1.0))
    idx = np.clip(np.searchsorted(_LOG_EDGES, logs, side="right") - 1, 0, len(BIN_EDGES) - 2)
    return np.bincount(idx, minlength=len(BIN_EDGES) - 1)


class Distributions:
    """Histograms of one task, per kind and source."""

    def __init__(self) -> None:
        self.counts: dict[str, dict[str, np.ndarray]] = {k: {} for k in KINDS}

    def _add(self, kind: str, sources: pa.ChunkedArray | pa.Array, values: np.ndarray) -> None:
        names = np.asarray(sources.to_numpy(zero_copy_only=False), dtype=object)
        for src in np.unique(names):
            counts = _bin_counts(values[names == src])
            current = self.counts[kind].get(str(src))
            self.counts[kind][str(src)] = counts if current is None else current + counts

    def observe_input(self, batch: pa.Table) -> None:
        """Text lengths (characters) of records as read."""
        if batch.num_rows:
            chars = pc.utf8_length(batch.column("text").fill_null("")).to_numpy()
            self._add("chars_before", batch.column("source"), chars)

    def observe_output(self, live: pa.Table) -> None:
        """Text and token lengths of records written by the final segment."""
        if not live.num_rows:
            return
        chars = pc.utf8_length(live.column("text").fill_null("")).to_numpy()
        self._add("chars_after", live.column("source"), chars)
        if "num_tokens" in live.column_names:
            tokens = live.column("num_tokens").fill_null(0).to_numpy(zero_copy_only=False)
            self._add("tokens_after", live.column("source"), tokens)

    def observe_stage(self, kind: str, batch: pa.Table) -> None:
        """What an op declares to be observed after it (``Op.observed_as``)."""
        if kind == "ppl":
            self.observe_perplexity(batch)
        elif kind == "chars_extracted":
            live = batch.filter(pc.is_null(batch.column(DROP)))
            if live.num_rows:
                chars = pc.utf8_length(live.column("text").fill_null("")).to_numpy()
                self._add(kind, live.column("source"), chars)
        else:
            raise ValueError(f"observed_as {kind!r}; valid: chars_extracted, ppl")

    def observe_perplexity(self, batch: pa.Table) -> None:
        """Perplexities ``perplexity_filter`` wrote to ``meta.ppl`` (rows without one skip)."""
        found = pc.extract_regex(batch.column("meta").fill_null(""), _PPL)
        ppl = pc.struct_field(found, "ppl")
        valid = pc.is_valid(ppl)
        if not pc.any(valid).as_py():
            return
        values = pc.cast(pc.filter(ppl, valid), pa.float64()).to_numpy()
        self._add("ppl", pc.filter(batch.column("source"), valid), values)

    def to_json(self) -> dict[str, dict[str, list[int]]]:
        return {
            kind: {src: c.tolist() for src, c in sorted(by_src.items())}
            for kind, by_src in self.counts.items()
            if by_src
        }


def merge_distributions(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Add tasks' ``to_json`` histograms; the result carries the bin edges."""
    merged: dict[str, dict[str, np.ndarray]] = {}
    for part in parts:
        for kind, by_src in part.items():
            for src, counts in by_src.items():
                into = merged.setdefault(kind, {})
                add = np.asarray(counts, dtype=np.int64)
                into[src] = add if src not in into else into[src] + add
    return {
        "bin_edges": [round(e, 6) if math.isfinite(e) else e for e in BIN_EDGES],
        "histograms": {
            kind: {src: c.tolist() for src, c in sorted(by_src.items())}
            for kind, by_src in sorted(merged.items())
        },
    }
