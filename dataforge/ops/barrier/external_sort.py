"""A sort of Arrow tables larger than a planner's memory: sorted runs spilled to disk, merged.

Tables are added in order; while what is buffered stays within the run budget nothing
touches the disk and :meth:`ExternalSort.sorted_tables` yields one table, sorted in memory.
Past it, each full buffer is sorted and written to ``spill_dir`` as an Arrow IPC file in
blocks, and the runs are merged :data:`FAN_IN` at a time (more runs: merged runs are
merged again), so memory holds one run, or one block per merged run, never the whole
input. Rows must be unique under the sort keys (give a row number as the last key): then
the merged order is the one sort of everything would give, whatever the budget.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["FAN_IN", "ExternalSort"]

FAN_IN = 16
"""Runs merged at once: each holds one block in memory, and each merge pass reads and
writes everything once, so 16 keeps the blocks large and the passes few."""
_MIN_BLOCK_ROWS = 256
"""Rows of a block at least, however small the budget: below it a merge round is mostly
per-round overhead."""


class ExternalSort:
    """Sort tables (one schema) by ``sort_keys`` (ascending) within ``run_bytes`` of
    buffered data (None: no bound, never spills), spilling runs to ``spill_dir``."""

    def __init__(self, sort_keys: list[str], run_bytes: int | None, spill_dir: Path | None):
        if run_bytes is not None and spill_dir is None:
            raise ValueError("ExternalSort: a run budget needs a spill_dir")
        self.sort_keys = [(k, "ascending") for k in sort_keys]
        self.run_bytes, self.spill_dir = run_bytes, spill_dir
        self.buffer: list[pa.Table] = []
        self.buffered = 0
        self.runs: list[Path] = []
        self._names = itertools.count()

    @property
    def spilled(self) -> bool:
        """Some rows went to disk (the merged order is streamed from there)."""
        return bool(self.runs)

    def add(self, table: pa.Table) -> None:
        """Buffer ``table``; spill the buffer as a sorted run each time it fills the
        budget (a table larger than what is left is split)."""
        if self.run_bytes is None:
            self.buffer.append(table)
            return
        row_bytes = max(1, table.nbytes // max(1, table.num_rows))
        while table.num_rows:
            room = max(1, (self.run_bytes - self.buffered) // row_bytes)
            self.buffer.append(table.slice(0, room))
            self.buffered += min(room, table.num_rows) * row_bytes
            table = table.slice(room)
            if self.buffered >= self.run_bytes:
                self._spill()

    def sorted_tables(self) -> Iterator[pa.Table]:
        """Every row added, in sort order, as consecutive tables."""
        if not self.runs:
            if self.buffer:
                yield self._sorted_buffer()
            return
        if self.buffer:
            self._spill()
        runs = self.runs
        while len(runs) > FAN_IN:  # merge passes until one merge reads them all
            runs = [
                self._write(self._merge(runs[i : i + FAN_IN])) for i in range(0, len(runs), FAN_IN)
            ]
        yield from self._merge(runs)

    # -- runs ------------------------------------------------------------------------

    def _sorted_buffer(self) -> pa.Table:
        table = pa.concat_tables(self.buffer)
        self.buffer, self.buffered = [], 0
        return table.take(pc.sort_indices(table, sort_keys=self.sort_keys))

    def _spill(self) -> None:
        self.runs.append(self._write(iter([self._sorted_buffer()])))

    def _write(self, tables: Iterator[pa.Table]) -> Path:
        """A run file of ``tables`` (sorted, consecutive) in blocks of a fan-in's share."""
        path = self.spill_dir / f"run-{next(self._names):06d}.arrow"
        writer = None
        try:
            for table in tables:
                if writer is None:
                    writer = pa.ipc.new_file(str(path), table.schema)
                for block in _blocks(table, self._block_rows(table)):
                    writer.write_table(block)
        finally:
            if writer is not None:
                writer.close()
        return path

    def _block_rows(self, table: pa.Table) -> int:
        """Rows per block: the blocks of a merge (one per run) and its output fit a run."""
        row_bytes = max(1, table.nbytes // max(1, table.num_rows))
        return max(_MIN_BLOCK_ROWS, self.run_bytes // (FAN_IN + 1) // row_bytes)

    def _merge(self, runs: list[Path]) -> Iterator[pa.Table]:
        """The rows of sorted ``runs`` in order (one table per merge round); each run file
        is removed once read."""
        readers = [_read_blocks(path) for path in runs]
        heads = [next(reader, None) for reader in readers]
        while any(h is not None for h in heads):
            live = [i for i, h in enumerate(heads) if h is not None]
            merged, taken = self._merge_round([heads[i] for i in live])
            yield merged
            for i, count in zip(live, taken, strict=True):
                rest = heads[i].slice(count)
                heads[i] = rest if rest.num_rows else next(readers[i], None)

    def _merge_round(self, blocks: list[pa.Table]) -> tuple[pa.Table, list[int]]:
        """The rows of ``blocks`` up to the smallest of their last rows (every row after it
        may still be preceded by a row of a block not yet read), sorted; and how many rows
        of each block that is (a prefix of each: blocks are sorted)."""
        table = pa.concat_tables(blocks)
        order = pc.sort_indices(table, sort_keys=self.sort_keys).to_numpy()
        place = np.empty(len(order), np.int64)
        place[order] = np.arange(len(order))
        ends = np.cumsum([b.num_rows for b in blocks])
        limit = place[ends - 1].min()
        starts = ends - [b.num_rows for b in blocks]
        taken = [int((place[s:e] <= limit).sum()) for s, e in zip(starts, ends, strict=True)]
        return table.take(pa.array(order[: limit + 1])), taken


def _blocks(table: pa.Table, rows: int) -> Iterator[pa.Table]:
    for start in range(0, table.num_rows, rows):
        yield table.slice(start, rows)


def _read_blocks(path: Path) -> Iterator[pa.Table]:
    """The blocks of run file ``path`` one at a time; the file is removed after."""
    try:
        with pa.OSFile(str(path)) as source:
            reader = pa.ipc.open_file(source)
            for i in range(reader.num_record_batches):
                batch = reader.get_batch(i)
                if batch.num_rows:
                    yield pa.Table.from_batches([batch])
    finally:
        path.unlink(missing_ok=True)
