"""A shard's sorted integer keys (with columns beside them): held, or in sorted runs on disk.

Every per-record state an index shard builds (its bucket entries, its candidate pairs,
the pairs it decided) is a column of integer keys the later passes read in key order, a
range of keys at a time. :class:`KeyRuns` keeps such keys, and value columns row for row,
within ``hold_bytes`` (sorting included): past it the rows gathered so far are sorted by
key and written as a run (raw little-endian files, ``keys`` and one per value column: no pickle, no header) in a
directory made for the shard (under ``spill_root`` where that is a directory on this node,
else the system's temporary directory). When :data:`FAN_IN` runs of one level are on disk
they are merged into one run of the next, range by range of at most ``hold_bytes`` (so a
range query reads at most :data:`FAN_IN` runs per level, a level per factor of
:data:`FAN_IN` of rows over ``hold_bytes``). A range is cut from each run by binary search,
one key read at a time, and its rows are read into memory: runs are never memory-mapped (a
map's page faults read ahead, and its pages stay in the process's resident set while open).

:meth:`KeyRuns.histogram` counts rows per bin of keys without holding them (the planner
cuts ranges over every shard's rows from it), and :meth:`KeyRuns.round_range` cuts one
shard's keys into ranges of about equal row counts (binary search of each run's keys), so
that a pass over them goes in rounds of a bounded size whatever their distribution.
Range bounds are multiples of ``2^align`` (a bucket, or a node's pairs, are never split).
:class:`EdgeRuns` is the decided pairs, ``big << 32 | small`` with their similarity.

Arrow tables with arbitrary sort keys streamed in one order (the planner's record keys)
are :class:`dataforge.ops.barrier.external_sort.ExternalSort`'s; these are numpy columns
read by key range, which that stream cannot answer without reading what comes before.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

__all__ = ["FAN_IN", "MIN_RUN_ROWS", "EdgeRuns", "KeyRuns", "cut_ranges", "spill_dir"]

MIN_RUN_ROWS = 4096
"""Rows a run holds at least, whatever ``hold_bytes``: below that the runs' count, not the
bytes, would cost."""
FAN_IN = 16
"""Runs of one level on disk at most: this many are merged into one of the next level."""
SORT_COPIES = 3
"""Copies of the held rows alive while they are sorted: the pieces added, their join, and
the sorted columns with their order (8 bytes a row)."""
_SCAN = 1 << 20
"""Keys of a spilled run read at once by :meth:`KeyRuns.histogram`."""
_KEYS = "keys"


def spill_dir(spill_root: str | None, prefix: str) -> Path:
    """A new directory for one shard structure's files: under ``spill_root`` where that is
    a directory on this node (the run's spill dir), else in the system's temporary
    directory (a shard on another node of a cluster)."""
    root = spill_root if spill_root and os.path.isdir(spill_root) else None
    return Path(tempfile.mkdtemp(prefix=prefix, dir=root))


class KeyRuns:
    """Rows of ``keys`` (``key_dtype``, non-negative) and ``values`` (one dtype each),
    sorted by key (stable: rows added earlier first among equal keys)."""

    def __init__(
        self,
        key_dtype: np.dtype | type,
        value_dtypes: Sequence[np.dtype | type] = (),
        hold_bytes: int | None = None,
        spill_root: str | None = None,
        prefix: str = "dedup-runs-",
    ) -> None:
        self.dtypes = [np.dtype(key_dtype), *(np.dtype(d) for d in value_dtypes)]
        self.row_bytes = sum(d.itemsize for d in self.dtypes)
        self.hold_bytes, self.spill_root, self.prefix = hold_bytes, spill_root, prefix
        self._pending: list[list[np.ndarray]] = []
        self._pending_rows = 0
        self._held: list[np.ndarray] | None = None
        """Every column sorted by key, once :meth:`finish` found nothing spilled."""
        self._runs: list[Path] = []
        self._levels: list[int] = []
        """Each run's merge level (0: written from memory; L + 1: FAN_IN runs of L)."""
        self._made = 0
        self._dir: Path | None = None
        self._cuts: dict[tuple[int, int], list[int]] = {}
        self.count = 0
        self.max_key = 0

    @property
    def spilled_runs(self) -> int:
        """Runs written to disk (merged ones included; 0: every row held)."""
        return self._made

    @property
    def nbytes(self) -> int:
        """Bytes of every row, held or spilled."""
        return self.count * self.row_bytes

    def _hold_rows(self) -> int:
        """Rows gathered before a run is written: with the copies sorting them makes
        (:data:`SORT_COPIES`), within ``hold_bytes``."""
        return max(MIN_RUN_ROWS, (self.hold_bytes or 0) // SORT_COPIES // self.row_bytes)

    def add(self, keys: np.ndarray, *values: np.ndarray) -> None:
        """Keep rows; past ``hold_bytes`` the rows gathered so far go to disk as one run."""
        if len(values) != len(self.dtypes) - 1:
            raise ValueError(f"KeyRuns.add: {len(self.dtypes) - 1} value columns expected")
        if len(keys) == 0:
            return
        if self._held is not None:  # added after a read: the held rows become pending again
            self._pending, self._held = [self._held], None
            self._pending_rows = len(self._pending[0][0])
        columns = [np.asarray(c, d) for c, d in zip((keys, *values), self.dtypes, strict=True)]
        self._pending.append(columns)
        self._pending_rows += len(keys)
        self.count += len(keys)
        self.max_key = max(self.max_key, int(columns[0].max()))
        self._cuts = {}
        if self.hold_bytes is not None and self._pending_rows > self._hold_rows():
            self._spill()

    def finish(self) -> None:
        """No more rows for now: the held ones are sorted (or, when some went to disk
        already, written as one more run)."""
        if self._held is not None:
            return
        if self._runs:
            self._spill()
            self._held = [np.zeros(0, d) for d in self.dtypes]
        else:
            self._held = self._sorted_pending()

    def _sorted_pending(self) -> list[np.ndarray]:
        columns = [
            np.concatenate([np.zeros(0, d), *(p[i] for p in self._pending)])
            for i, d in enumerate(self.dtypes)
        ]
        self._pending, self._pending_rows = [], 0
        if len(self.dtypes) == 1:
            columns[0].sort(kind="stable")  # in place: no order array, no copy
            return columns
        order = np.argsort(columns[0], kind="stable")
        return [c[order] for c in columns]

    def _spill(self) -> None:
        if not self._pending:
            return
        self._write_run(self._sorted_pending(), level=0)
        level = 0
        while self._levels.count(level) >= FAN_IN:  # FAN_IN runs of a level become one
            self._merge_level(level)
            level += 1

    def _write_run(self, columns: list[np.ndarray] | None, level: int) -> Path:
        if self._dir is None:
            self._dir = spill_dir(self.spill_root, self.prefix)
        self._made += 1
        run = self._dir / f"run-{self._made:06d}"
        run.mkdir()
        if columns is not None:
            for name, column in zip(self._names(), columns, strict=True):
                _write(run / name, column)
        self._runs.append(run)
        self._levels.append(level)
        return run

    def _names(self) -> list[str]:
        return [_KEYS, *(f"value{i}" for i in range(len(self.dtypes) - 1))]

    def _merge_level(self, level: int) -> None:
        """The runs of ``level`` become one run of the next level (each row is merged
        once per level: O(rows log rows) in all, and at most :data:`FAN_IN` runs of each
        level stay on disk). Output ranges are cut at sampled keys so that each holds
        about ``hold_bytes`` of rows (more only where one key repeats past it), gathered
        from every run, sorted and appended."""
        runs = [r for r, lv in zip(self._runs, self._levels, strict=True) if lv == level]
        self._runs = [r for r, lv in zip(self._runs, self._levels, strict=True) if lv != level]
        self._levels = [lv for lv in self._levels if lv != level]
        step = max(1, self._hold_rows() // (2 * len(runs)))
        cuts = np.unique(np.concatenate([self._samples(r, step) for r in runs]))
        # each run holds at most ``step`` keys between two of its samples: a range between
        # two cuts chosen every ``len(runs)`` samples holds at most 2 * step * len(runs)
        bounds = [None, *cuts[len(runs) :: len(runs)].tolist(), None]
        merged = self._write_run(None, level + 1)
        files = [open(merged / name, "wb") for name in self._names()]  # noqa: SIM115
        try:
            for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
                for file, column in zip(files, self._gather(runs, lo, hi), strict=True):
                    _append(file, column)
        finally:
            for file in files:
                file.close()
        for run in runs:
            shutil.rmtree(run, ignore_errors=True)

    def _rows(self, run: Path, column: int) -> int:
        return (run / self._names()[column]).stat().st_size // self.dtypes[column].itemsize

    def _read(self, run: Path, column: int, start: int, stop: int) -> np.ndarray:
        """Rows ``[start, stop)`` of column ``column`` of a run, read into memory."""
        dtype = self.dtypes[column]
        if stop <= start:
            return np.zeros(0, dtype)
        little = dtype.newbyteorder("<")
        with open(run / self._names()[column], "rb") as file:
            found = np.fromfile(file, little, stop - start, offset=start * little.itemsize)
        return found.astype(dtype, copy=False)

    def _chunks(self, run: Path, chunk: int = _SCAN) -> Iterator[tuple[int, np.ndarray]]:
        """A run's keys, ``chunk`` at a time, with the row each chunk starts at."""
        rows = self._rows(run, 0)
        for lo in range(0, rows, chunk):
            yield lo, self._read(run, 0, lo, min(rows, lo + chunk))

    def _samples(self, run: Path, step: int) -> np.ndarray:
        """Keys at rows ``step, 2 step, ...`` of a run."""
        chunk = step * max(1, _SCAN // step)  # a multiple of step: every chunk starts at one
        found = [keys[::step] for _, keys in self._chunks(run, chunk)]
        return np.concatenate([np.zeros(0, self.dtypes[0]), *found])[1:]

    def _gather(self, runs: list[Path], lo: int | None, hi: int | None, held=None) -> list:
        """The rows with ``lo <= key < hi`` (``None``: unbounded) of the held rows and
        every run, sorted by key (read into memory)."""
        key_dtype = self.dtypes[0]
        parts = []
        if held is not None and len(held[0]):
            keys = held[0]
            a = 0 if lo is None else int(np.searchsorted(keys, np.array(lo, key_dtype)))
            b = len(keys) if hi is None else int(np.searchsorted(keys, np.array(hi, key_dtype)))
            parts.append([np.array(c[a:b]) for c in held])
        for run in runs:
            with open(run / _KEYS, "rb") as file:
                fd = file.fileno()
                a = 0 if lo is None else _file_below(fd, key_dtype, lo)
                b = self._rows(run, 0) if hi is None else _file_below(fd, key_dtype, hi)
            parts.append([self._read(run, i, a, b) for i in range(len(self.dtypes))])
        if len(parts) == 1:
            return parts[0]
        columns = [
            np.concatenate([np.zeros(0, d), *(p[i] for p in parts)])
            for i, d in enumerate(self.dtypes)
        ]
        del parts
        order = np.argsort(columns[0], kind="stable")  # runs in order: earlier rows first
        return [c[order] for c in columns]

    def between(self, lo: int | None, hi: int | None) -> list[np.ndarray]:
        """The columns (keys first) of the rows whose key is in ``[lo, hi)`` (``None``:
        unbounded), sorted by key."""
        self.finish()
        return self._gather(self._runs, lo, hi, self._held)

    def histogram(self, shift: int, bins: int) -> np.ndarray:
        """Rows per bin ``key >> shift`` (``bins`` counts; the last takes the rest)."""
        self.finish()
        assert self._held is not None
        counts = np.zeros(bins, np.int64)
        held = self._held[0]
        chunks = [((lo, held[lo : lo + _SCAN]) for lo in range(0, len(held), _SCAN))]
        for source in chunks + [self._chunks(run) for run in self._runs]:
            for _, keys in source:
                part = keys >> np.array(shift, keys.dtype)
                counts += np.bincount(np.minimum(part, bins - 1).astype(np.int64), minlength=bins)
        return counts

    def round_range(self, round_: int, rounds: int, align: int = 0) -> tuple[int, int | None]:
        """Keys ``[lo, hi)`` (``hi`` None: no upper bound) of round ``round_`` of
        ``rounds``: consecutive ranges, about equal in rows, cut at multiples of
        ``2^align`` (every row in exactly one round)."""
        if rounds <= 1:
            return 0, None
        if (rounds, align) not in self._cuts:
            self.finish()
            held, dtype = self._held[0], self.dtypes[0]
            # one key read at a time (61 cuts of 5.4 GB of runs through maps had left 4.4 GB
            # of their pages resident in the shard)
            files = [open(run / _KEYS, "rb") for run in self._runs]  # noqa: SIM115

            def below(unit: int) -> int:  # rows with a key below unit << align
                bound = unit << align
                found = int(np.searchsorted(held, np.array(bound, dtype)))
                return found + sum(_file_below(f.fileno(), dtype, bound) for f in files)

            # round k starts at the smallest multiple of 2^align with the first k shares of
            # the rows below it (binary search: exact, whatever the keys' distribution)
            top, starts = (self.max_key >> align) + 1, [0]
            try:
                for k in range(1, rounds):
                    lo, hi, want = starts[-1] >> align, top, self.count * k // rounds
                    while lo < hi:
                        mid = (lo + hi) // 2
                        lo, hi = (mid + 1, hi) if below(mid) < want else (lo, mid)
                    starts.append(min(lo, top - 1) << align)  # a key past the last: overflow
            finally:
                for file in files:
                    file.close()
            self._cuts[(rounds, align)] = starts
        starts = self._cuts[(rounds, align)]
        return starts[round_], starts[round_ + 1] if round_ + 1 < len(starts) else None

    def clear(self) -> None:
        """Forget every row; remove the spill directory."""
        self._pending, self._pending_rows, self._held, self._runs = [], 0, None, []
        self._levels, self._cuts = [], {}
        self.count = self.max_key = 0
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None


def cut_ranges(counts: list[int], per_range: int, shift: int) -> list[tuple[int, int | None]]:
    """Consecutive ranges ``[lo, hi)`` of keys (bins of ``2^shift`` keys with ``counts``
    rows each) of at most ``per_range`` rows where the bins allow (a bin is never split);
    the last range is open-ended (``hi`` None)."""
    ranges, start, held = [], 0, 0
    for b, count in enumerate(counts):
        if held and held + count > per_range:
            ranges.append((start << shift, b << shift))
            start, held = b, 0
        held += count
    ranges.append((start << shift, None))
    return ranges


def _file_below(fd: int, dtype: np.dtype, bound: int) -> int:
    """Rows of the sorted little-endian keys in file ``fd`` below ``bound`` (binary search,
    one key read at a time)."""
    size = np.dtype(dtype).itemsize
    lo, hi = 0, os.fstat(fd).st_size // size
    little = np.dtype(dtype).newbyteorder("<")
    while lo < hi:
        mid = (lo + hi) // 2
        if int(np.frombuffer(os.pread(fd, size, mid * size), little)[0]) < bound:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _write(path: Path, column: np.ndarray) -> None:
    with open(path, "wb") as file:
        _append(file, column)


def _append(file, column: np.ndarray) -> None:
    """``column`` as raw little-endian bytes at the end of ``file``."""
    file.write(column.astype(column.dtype.newbyteorder("<"), copy=False).tobytes())


class EdgeRuns:
    """Decided edges ``(small, big)``, ``small < big``, by the larger node: keys
    ``big << 32 | small`` (nodes below 2^31) and their similarity (float64: the clustering
    ranks by it, so it is kept as verification made it), 16 bytes an edge."""

    def __init__(self, hold_bytes: int | None = None, spill_root: str | None = None) -> None:
        self._runs = KeyRuns(np.int64, (np.float64,), hold_bytes, spill_root, "dedup-edges-")

    @property
    def count(self) -> int:
        return self._runs.count

    @property
    def spilled_runs(self) -> int:
        return self._runs.spilled_runs

    def add(self, edges: np.ndarray, similarity: np.ndarray) -> None:
        """Keep ``(k, 2)`` edges ``(small, big)`` and their similarity."""
        edges = np.asarray(edges, np.int64).reshape(-1, 2)
        self._runs.add(edges[:, 1] << 32 | edges[:, 0], similarity)

    def finish(self) -> None:
        self._runs.finish()

    def histogram(self, shift: int, bins: int) -> np.ndarray:
        """Edges per bin ``big >> shift`` (``bins`` counts; the last takes the rest)."""
        return self._runs.histogram(32 + shift, bins)

    def between(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(big, small, similarity)`` of the edges whose larger node is in ``[lo, hi)``,
        sorted by ``(big, small)``."""
        # keys are below 2^31: past it the range is open (2^31 << 32 would overflow int64)
        top = None if hi >= 1 << 31 else hi << 32
        keys, sims = self._runs.between(max(0, lo) << 32, top)
        return keys >> 32, keys & 0xFFFFFFFF, sims

    def clear(self) -> None:
        self._runs.clear()
