"""A shard's decided edges, sorted by their larger node: held, or in sorted runs on disk.

Star clustering (:mod:`dataforge.ops.dedup.star`) decides the nodes in key order, each
from its edges to smaller nodes, so the planner asks the shards for the edges range by
range of the larger node (:meth:`EdgeRuns.between`) and holds one range at a time. A shard
keeps each decided edge as one int64, ``big << 32 | small`` (keys below 2^31), and its
similarity (float64: the clustering ranks by it, so it is kept as verification made it):
16 bytes an edge. Past ``hold_bytes`` the edges gathered so far are sorted and written as
a run (two raw little-endian files, ``keys.i8`` and ``sims.f8``: no pickle, no header) in
a directory made for the shard (under ``spill_root`` where that is a directory on this
node, else the system's temporary directory). When :data:`FAN_IN` runs of one level are
on disk they are merged into one run of the next, range by range of at most
``hold_bytes`` (so a range query reads at most :data:`FAN_IN` runs per level, a level
per factor of :data:`FAN_IN` of edges over ``hold_bytes``). A range is cut from each run by
binary search in a memory map opened for that query, so only its pages are read and none
stay resident. :meth:`histogram` counts the edges per bin of the larger node without
holding them, for the planner to cut ranges that fit its budget.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np

__all__ = ["BYTES_PER_EDGE", "MIN_RUN_EDGES", "EdgeRuns"]

BYTES_PER_EDGE = 16
"""Bytes a shard keeps per decided edge (packed nodes and similarity)."""
_SCAN = 1 << 20
"""Edges of a spilled run read at once by :meth:`EdgeRuns.histogram`."""
MIN_RUN_EDGES = 4096
"""Edges a run holds at least, whatever ``hold_bytes`` (64 KiB): below that the runs' count,
not the bytes, would cost."""
FAN_IN = 16
"""Runs on disk at most: this many are merged into one before the next is written."""
_KEYS, _SIMS = "keys.i8", "sims.f8"


class EdgeRuns:
    """Decided edges ``(small, big)``, ``small < big``, by the larger node."""

    def __init__(self, hold_bytes: int | None = None, spill_root: str | None = None) -> None:
        self.hold_bytes = hold_bytes
        self.spill_root = spill_root
        self._pending: list[tuple[np.ndarray, np.ndarray]] = []
        self._pending_edges = 0
        self._held: tuple[np.ndarray, np.ndarray] | None = None
        """The edges sorted by key, once :meth:`finish` found nothing spilled."""
        self._runs: list[Path] = []
        self._levels: list[int] = []
        """Each run's merge level (0: written from memory; L + 1: FAN_IN runs of L)."""
        self._made = 0
        self._dir: Path | None = None
        self.count = 0

    @property
    def spilled_runs(self) -> int:
        """Runs written to disk (merged ones included; 0: every edge held)."""
        return self._made

    def add(self, edges: np.ndarray, similarity: np.ndarray) -> None:
        """Keep ``(k, 2)`` edges ``(small, big)`` and their similarity; past ``hold_bytes``
        the edges gathered so far go to disk as one sorted run."""
        if self._held is not None:
            raise RuntimeError("EdgeRuns.add after finish")
        edges = np.asarray(edges, np.int64).reshape(-1, 2)
        if len(edges) == 0:
            return
        self._pending.append((edges[:, 1] << 32 | edges[:, 0], np.asarray(similarity, np.float64)))
        self._pending_edges += len(edges)
        self.count += len(edges)
        if self.hold_bytes is not None and self._pending_edges > max(
            MIN_RUN_EDGES, self.hold_bytes // BYTES_PER_EDGE
        ):
            self._spill()

    def finish(self) -> None:
        """No more edges: the held ones are sorted (or, when some went to disk already,
        written as the last run)."""
        if self._held is not None:
            return
        if self._runs:
            self._spill()
            self._held = (np.zeros(0, np.int64), np.zeros(0))
        else:
            self._held = self._sorted_pending()

    def _sorted_pending(self) -> tuple[np.ndarray, np.ndarray]:
        keys = np.concatenate([np.zeros(0, np.int64), *(k for k, _ in self._pending)])
        sims = np.concatenate([np.zeros(0), *(s for _, s in self._pending)])
        self._pending, self._pending_edges = [], 0
        order = np.argsort(keys, kind="stable")
        return keys[order], sims[order]

    def _spill(self) -> None:
        if not self._pending:
            return
        keys, sims = self._sorted_pending()
        with self._new_run() as (run, keys_file, sims_file):
            keys_file.write(keys.astype("<i8", copy=False).tobytes())
            sims_file.write(sims.astype("<f8", copy=False).tobytes())
        self._runs.append(run)
        self._levels.append(0)
        level = 0
        while self._levels.count(level) >= FAN_IN:  # FAN_IN runs of a level become one
            self._merge_level(level)
            level += 1

    def _new_run(self):
        if self._dir is None:
            root = self.spill_root if self.spill_root and os.path.isdir(self.spill_root) else None
            self._dir = Path(tempfile.mkdtemp(prefix="dedup-edges-", dir=root))
        self._made += 1
        run = self._dir / f"run-{self._made:06d}"
        run.mkdir()
        return _RunFiles(run)

    def _merge_level(self, level: int) -> None:
        """The runs of ``level`` become one run of the next level (each edge is merged
        once per level: O(edges log edges) in all, and at most :data:`FAN_IN` runs of each
        level stay on disk). Output ranges are cut at sampled keys so that each holds at
        most ``hold_bytes`` of edges, gathered from every run, sorted and appended."""
        runs = [r for r, lv in zip(self._runs, self._levels, strict=True) if lv == level]
        self._runs = [r for r, lv in zip(self._runs, self._levels, strict=True) if lv != level]
        self._levels = [lv for lv in self._levels if lv != level]
        held = max(MIN_RUN_EDGES, (self.hold_bytes or 0) // BYTES_PER_EDGE)
        step = max(1, held // (2 * len(runs)))
        cuts = np.unique(np.concatenate([_map(r, _KEYS)[step::step] for r in runs]))
        # each run holds at most ``step`` keys between two of its samples: a range between
        # two cuts chosen every ``len(runs)`` samples holds at most 2 * step * len(runs)
        bounds = [None, *cuts[len(runs) :: len(runs)].tolist(), None]
        with self._new_run() as (merged, keys_file, sims_file):
            for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
                keys, sims = _gather(runs, lo, hi)
                keys_file.write(keys.astype("<i8", copy=False).tobytes())
                sims_file.write(sims.astype("<f8", copy=False).tobytes())
        for run in runs:
            shutil.rmtree(run, ignore_errors=True)
        self._runs.append(merged)
        self._levels.append(level + 1)

    def _sources(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Each sorted source of edges: ``(keys, sims)``, held arrays or memory maps."""
        self.finish()
        assert self._held is not None
        if len(self._held[0]):
            yield self._held
        for run in self._runs:
            yield _map(run, _KEYS), _map(run, _SIMS)

    def histogram(self, shift: int, bins: int) -> np.ndarray:
        """Edges per bin ``big >> shift`` (``bins`` counts; the last takes the rest)."""
        counts = np.zeros(bins, np.int64)
        for keys, _ in self._sources():
            for lo in range(0, len(keys), _SCAN):
                bin_of = np.minimum(np.asarray(keys[lo : lo + _SCAN]) >> (32 + shift), bins - 1)
                counts += np.bincount(bin_of, minlength=bins)
        return counts

    def between(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(big, small, similarity)`` of the edges whose larger node is in ``[lo, hi)``,
        sorted by ``(big, small)``."""
        self.finish()
        assert self._held is not None
        # keys are below 2^31: past it the range is open (2^31 << 32 would overflow int64)
        top = None if hi >= 1 << 31 else hi << 32
        keys, sims = _gather(self._runs, max(0, lo) << 32, top, self._held)
        return keys >> 32, keys & 0xFFFFFFFF, sims

    def clear(self) -> None:
        """Forget every edge; remove the spill directory."""
        self._pending, self._pending_edges, self._held, self._runs = [], 0, None, []
        self._levels = []
        self.count = 0
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None


class _RunFiles:
    """A run's directory and its two files, open for writing while in the ``with``."""

    def __init__(self, run: Path) -> None:
        self.run = run

    def __enter__(self):
        self.keys = open(self.run / _KEYS, "wb")  # noqa: SIM115 - closed in __exit__
        self.sims = open(self.run / _SIMS, "wb")  # noqa: SIM115
        return self.run, self.keys, self.sims

    def __exit__(self, *exc) -> None:
        self.keys.close()
        self.sims.close()


def _map(run: Path, name: str) -> np.ndarray:
    """A run's file as a read-only memory map (empty file: an empty array)."""
    dtype = np.dtype("<i8") if name == _KEYS else np.dtype("<f8")
    path = run / name
    if path.stat().st_size == 0:
        return np.zeros(0, dtype)
    return np.memmap(path, dtype=dtype, mode="r")


def _gather(
    runs: list[Path], lo: int | None, hi: int | None, held: tuple | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The edges with ``lo <= key < hi`` (``None``: unbounded) of the held edges and every
    run, sorted by key (copies: no map stays open)."""
    parts = []
    sources = [held] if held is not None and len(held[0]) else []
    sources += [(_map(r, _KEYS), _map(r, _SIMS)) for r in runs]
    for keys, sims in sources:
        a = 0 if lo is None else int(np.searchsorted(keys, lo))
        b = len(keys) if hi is None else int(np.searchsorted(keys, hi))
        parts.append((np.array(keys[a:b]), np.array(sims[a:b])))
    del sources
    if len(parts) == 1:
        return parts[0]
    keys = np.concatenate([np.zeros(0, np.int64), *(k for k, _ in parts)])
    order = np.argsort(keys, kind="stable")
    return keys[order], np.concatenate([np.zeros(0), *(s for _, s in parts)])[order]
