"""Record keys of the dedup planner (step 1 of :mod:`dataforge.ops.dedup.planner`).

The sort behind the keys runs within a share of the planner's memory budget
(:attr:`BarrierContext.memory_bytes`): a corpus whose key columns fit is sorted in memory;
a larger one is sorted in runs spilled to the stage's spill directory and merged
(:class:`~dataforge.ops.barrier.external_sort.ExternalSort`), and then the keys by
row and the ids and sources by key are files there too, memory-mapped, not held. Rows are
numbered (``row``, the last sort key) so that the order, and every key, is the same
whatever the budget.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from dataforge.ops.barrier import BarrierContext
from dataforge.ops.barrier.external_sort import ExternalSort
from dataforge.ops.dedup import Dedup
from dataforge.ops.dedup.buckets import MAX_NODE
from dataforge.records import ORD

__all__ = ["KEY_SHARE", "Keys", "assign_keys"]

KEY_SHARE = 4
"""The key sort's runs take this fraction (1/4) of the planner's budget: sorting a run
holds it, its order and its sorted copy at once, and the index shards share the process."""
_READ_ROWS = 65_536
"""Rows of a part read at a time at most (a part may be larger than a run); within a
budget, at most a 256th of a run's bytes in rows (a row takes more than 256 bytes only
with ids of hundreds of characters), so that reading adds little to the run."""
_SORT_KEYS = ["origin", "rank", "id", "task", "ord", "row"]


@dataclasses.dataclass
class Keys:
    """Record keys by row (the ``against`` records, then each task's in file order), and
    ids/sources by key (for cluster ids and audit). Spilled: memory-mapped files."""

    by_row: np.ndarray
    bounds: dict[str, tuple[int, int]]
    n_previous: int
    ids: pa.Array | pa.ChunkedArray
    sources: pa.Array | pa.ChunkedArray
    spilled_runs: int = 0

    @property
    def count(self) -> int:
        """Records keyed (``against`` ones included)."""
        return len(self.by_row)

    def of_task(self, task: str) -> np.ndarray:
        """Keys of ``task``'s records, in the order of its part (a copy in memory)."""
        start, stop = self.bounds[task]
        return np.array(self.by_row[start:stop])

    def of_previous(self) -> np.ndarray:
        """Keys of the ``against`` records, in the order of their table."""
        return np.array(self.by_row[: self.n_previous])

    def ids_of(self, keys: np.ndarray) -> pa.Array:
        """The ids of the records with keys ``keys``."""
        return _take(self.ids, keys)


def assign_keys(
    op: Dedup, ctx: BarrierContext, tasks: list[str], previous: pa.Table | None
) -> Keys:
    """Every record's key: its rank in ``(origin, prefer_source rank, id, task, _ord)``,
    records of the ``against`` runs (``previous``) first."""
    run_bytes = None if ctx.memory_bytes is None else ctx.memory_bytes // KEY_SHARE
    sorter = ExternalSort(_SORT_KEYS, run_bytes, ctx.spill_dir)
    bounds: dict[str, tuple[int, int]] = {}
    n_prev = 0 if previous is None else previous.num_rows
    if previous is not None:
        sorter.add(_previous_rows(previous))
    rows = n_prev
    read = _READ_ROWS if run_bytes is None else max(1024, min(_READ_ROWS, run_bytes // 256))
    for t, task in enumerate(tasks):
        start = rows
        for table in _part_rows(ctx.parts[task], t, op.config.keep.prefer_source, rows, read):
            sorter.add(table)
            rows += table.num_rows
        bounds[task] = (start, rows)
    if rows > MAX_NODE:
        raise ValueError(f"dedup: {rows} records exceed the {MAX_NODE} keys of one run")
    if not rows:
        empty = pa.array([], pa.string())
        return Keys(np.zeros(0, np.int64), bounds, 0, empty, empty)
    return _ranked(sorter, rows, bounds, n_prev)


def _ranked(
    sorter: ExternalSort, rows: int, bounds: dict[str, tuple[int, int]], n_prev: int
) -> Keys:
    """Keys from the sorted rows: a row's key is its place in the order."""
    if not sorter.spilled:
        (table,) = sorter.sorted_tables()
        by_row = np.empty(rows, np.int64)
        by_row[table.column("row").to_numpy()] = np.arange(rows)
        ids, sources = (table.column(c).combine_chunks() for c in ("id", "source"))
        return Keys(by_row, bounds, n_prev, ids, sources)
    spill: Path = sorter.spill_dir
    by_row = np.lib.format.open_memmap(spill / "keys.npy", mode="w+", dtype=np.int64, shape=(rows,))
    names = pa.schema([("id", pa.string()), ("source", pa.string())])
    key = 0
    with pa.ipc.new_file(str(spill / "names.arrow"), names) as names_file:
        for table in sorter.sorted_tables():
            by_row[table.column("row").to_numpy()] = np.arange(key, key + table.num_rows)
            key += table.num_rows
            names_file.write_table(table.select(["id", "source"]))
    by_row.flush()
    # memory-mapped: pages the kernel may drop, not memory the planner holds
    mapped = pa.ipc.open_file(pa.memory_map(str(spill / "names.arrow"))).read_all()
    runs = len(sorter.runs)
    return Keys(by_row, bounds, n_prev, mapped.column("id"), mapped.column("source"), runs)


def _previous_rows(previous: pa.Table) -> pa.Table:
    """Sort rows of the ``against`` records (origin 0, all of rank 0, task -1)."""
    n = previous.num_rows
    return _rows(
        0, np.zeros(n, np.int32), previous.column("id"), previous.column("source"), -1,
        np.arange(n, dtype=np.int64), 0,
    )  # fmt: skip


def _part_rows(
    path: Path, task: int, prefer_source: tuple[str, ...], first_row: int, read_rows: int
) -> Iterator[pa.Table]:
    """Sort rows of a part's records, ``read_rows`` at a time."""
    prefer = pa.array(list(prefer_source), pa.string())
    for batch in pq.ParquetFile(path).iter_batches(read_rows, columns=["id", "source", ORD]):
        # a source's place in prefer_source; the sources not listed after all of them
        rank = pc.fill_null(pc.index_in(batch.column("source"), value_set=prefer), len(prefer))
        ords = batch.column(ORD).to_numpy()
        yield _rows(1, rank, batch.column("id"), batch.column("source"), task, ords, first_row)
        first_row += batch.num_rows


def _rows(origin, rank, ids, sources, task, ords, first_row) -> pa.Table:
    n = len(ids)
    return pa.table(
        {
            "origin": pa.array(np.full(n, origin, np.int8)),
            "rank": pa.array(np.asarray(rank, np.int32)),
            "id": ids.cast(pa.string()),
            "task": pa.array(np.full(n, task, np.int32)),
            "ord": pa.array(np.asarray(ords, np.int64)),
            "row": pa.array(np.arange(first_row, first_row + n, dtype=np.int64)),
            "source": sources.cast(pa.string()),
        }
    )


def _take(values: pa.Array | pa.ChunkedArray, keys: np.ndarray) -> pa.Array:
    """``values.take(keys)``, chunk by chunk for a chunked array (a chunked take may
    concatenate every chunk first: the whole memory-mapped column in memory)."""
    keys = np.asarray(keys, np.int64)
    if isinstance(values, pa.Array):
        return values.take(pa.array(keys))
    if not len(keys):
        return pa.array([], values.type)
    starts = np.cumsum([0, *(len(c) for c in values.chunks)])
    chunk_of = np.searchsorted(starts, keys, side="right") - 1
    order = np.argsort(chunk_of, kind="stable")
    by_chunk, grouped = chunk_of[order], keys[order]
    pieces = []
    for c in np.unique(by_chunk):  # one slice per chunk: not a scan of every key per chunk
        lo, hi = np.searchsorted(by_chunk, [c, c + 1])
        pieces.append(values.chunk(int(c)).take(pa.array(grouped[lo:hi] - starts[c])))
    gathered = pa.concat_arrays(pieces)
    inverse = np.empty_like(order)
    inverse[order] = np.arange(len(order))
    return gathered.take(pa.array(inverse))
