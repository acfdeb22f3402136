"""Duplicate ``id_key`` values across the splits of one file.

Read whole, a file drops every record whose id an earlier record of the file already has
(reason ``duplicate_id``). Read as splits, each split only knows its own ids. So that the
output does not depend on the split size, each split of a file with ``id_key`` records
the ids it accepted (``split_ids.parquet``: id and its xxh64); after segment 0 the driver
finds, per file, the ids a split accepted that an earlier split of the file had accepted
too, and that split is run again knowing them (``InputTask.known_ids``), which drops
those records as the whole-file reader would. Hashes find the candidates in one sort
(O(n log n), 8 bytes per record); the id strings confirm them. A file whose ids are
unique, the normal case, costs one read of the hash column per split.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import xxhash

from dataforge.config import PipelineConfig
from dataforge.io.readers import InputTask

__all__ = [
    "SPLIT_IDS_FILE",
    "duplicate_ids_across_splits",
    "is_split_with_ids",
    "settle_split_ids",
    "write_split_ids",
]

SPLIT_IDS_FILE = "split_ids.parquet"


def is_split_with_ids(task: InputTask, config: PipelineConfig) -> bool:
    """Whether this task is one split of a file whose source has an ``id_key``."""
    source = next(s for s in config.inputs if s.name == task.source)
    split = task.length is not None or task.row_groups is not None
    return split and source.id_key is not None


def write_split_ids(part_dir: Path, ids: Iterable[str]) -> None:
    """Record the ids a split accepted, in its part directory."""
    ordered = sorted(ids)
    hashes = np.fromiter((xxhash.xxh64_intdigest(i) for i in ordered), np.uint64, len(ordered))
    pq.write_table(pa.table({"id": ordered, "hash": hashes}), part_dir / SPLIT_IDS_FILE)


def duplicate_ids_across_splits(
    seg0: Path, tasks: list[InputTask], config: PipelineConfig
) -> dict[str, tuple[str, ...]]:
    """Task id -> the ids that split accepted although an earlier split of the same file
    had accepted them (only splits that have some)."""
    by_file: dict[str, list[InputTask]] = {}
    for task in tasks:
        if is_split_with_ids(task, config):
            by_file.setdefault(task.path, []).append(task)
    found: dict[str, tuple[str, ...]] = {}
    for splits in by_file.values():
        found.update(_file_duplicates(seg0, splits))
    return found


def _file_duplicates(seg0: Path, splits: list[InputTask]) -> dict[str, tuple[str, ...]]:
    paths = [seg0 / t.task_id / SPLIT_IDS_FILE for t in splits]
    hashes = [pq.read_table(p, columns=["hash"]).column("hash").to_numpy() for p in paths]
    if sum(len(h) for h in hashes) == 0:
        return {}
    allh = np.concatenate(hashes)
    split_of = np.concatenate([np.full(len(h), k) for k, h in enumerate(hashes)])
    order = np.lexsort((split_of, allh))  # by hash, then split: a group's first is earliest
    sorted_h = allh[order]
    repeat = np.zeros(len(order), dtype=bool)
    repeat[1:] = sorted_h[1:] == sorted_h[:-1]
    if not repeat.any():
        return {}
    ids = [pq.read_table(p, columns=["id"]).column("id") for p in paths]
    offsets = np.cumsum([0] + [len(h) for h in hashes])
    involved = repeat.copy()
    involved[:-1] |= repeat[1:]  # a repeated hash and the first record of its group
    found: dict[str, set[str]] = {}
    group_ids: set[str] = set()
    for pos in np.flatnonzero(involved):
        idx = order[pos]
        k = int(split_of[idx])
        value = ids[k][int(idx - offsets[k])].as_py()
        if not repeat[pos]:
            group_ids = {value}
        elif value in group_ids:
            found.setdefault(splits[k].task_id, set()).add(value)
        else:
            group_ids.add(value)  # a hash collision between different ids
    return {task_id: tuple(sorted(v)) for task_id, v in found.items()}


def settle_split_ids(
    seg0: Path,
    tasks: list[InputTask],
    config: PipelineConfig,
    rerun: Callable[[list[InputTask]], None],
) -> list[InputTask]:
    """After segment 0: run again (``rerun``) every split that accepted ids an earlier
    split of its file holds, now knowing them. Returns the tasks with their ``known_ids``.
    Idempotent, so a kill in the middle is settled by the resumed run."""
    known = duplicate_ids_across_splits(seg0, tasks, config)
    if not known:
        return tasks
    tasks = [
        dataclasses.replace(t, known_ids=tuple(sorted({*t.known_ids, *known[t.task_id]})))
        if t.task_id in known
        else t
        for t in tasks
    ]
    for task_id in known:
        (seg0 / f"{task_id}.done").unlink(missing_ok=True)  # ours: in the run's _work/seg0
        shutil.rmtree(seg0 / task_id, ignore_errors=True)  # ours: a task part in _work/seg0
    rerun([t for t in tasks if t.task_id in known])
    return tasks
