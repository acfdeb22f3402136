"""The shared-memory state of a ``streaming.StreamingDataset``, read and removed safely.

streaming keeps a dataset's coordination state in POSIX shared memory named
``<prefix:06>_<name>``; the ``locals`` segment lists the local directories of the datasets
that share the prefix. Removing a dead run's segments, and handing the ones a rank created
to the owner's unlink, needs streaming's private helpers (``_get_path``, ``_unpack_locals``,
``StreamingDataset._shm_prefix_int``, the dataset's segment attributes); this
module is the only place that touches them, so a streaming upgrade that changes them breaks
one tested module (``tests/loader/test_loader_shm_cleanup.py``, ``tests/io/test_mds_reader.py``)
instead of the loader.
"""

from __future__ import annotations

from multiprocessing import resource_tracker
from multiprocessing.shared_memory import SharedMemory
from typing import Any

__all__ = [
    "close_segments",
    "dataset_segments",
    "dataset_shm_prefix",
    "release_created_shm",
    "shm_locals",
    "unlink_shm",
]

_SEGMENT_HOLDERS = (
    "_locals_shm",
    "_shared_barrier._arr.shm",
    "_next_epoch.arr.shm",
    "_cache_usage.arr.shm",
    "_shard_states.shm",
    "_shard_access_times.shm",
)
"""Where a ``StreamingDataset`` keeps its ``streaming`` SharedMemory wrappers (attribute paths)."""


def dataset_segments(dataset: Any) -> list[Any]:
    """The ``streaming`` SharedMemory wrappers a live ``StreamingDataset`` holds."""
    found = []
    for path in _SEGMENT_HOLDERS:
        holder = dataset
        for attr in path.split("."):
            holder = getattr(holder, attr, None)
        if holder is not None and hasattr(holder, "cleanup"):
            found.append(holder)
    return found


def close_segments(segments: list[Any]) -> int:
    """Close this process's mappings of ``segments`` (from :func:`dataset_segments`, taken
    before the dataset was dropped); returns how many were closed.

    Why: each wrapper registers its ``cleanup`` with ``atexit``, which keeps the wrapper and
    its open mapping (one file descriptor each) alive until the process exits: a process
    that builds loader after loader (tests, an ablation scoring checkpoint after
    checkpoint) runs out of descriptors. A mapping still exported (an array over it) stays
    open and is closed at exit as before.
    """
    import atexit

    closed = 0
    for segment in segments:
        atexit.unregister(segment.cleanup)
        for shm in (getattr(segment, "shm", None),):
            try:
                shm.close()
            except BufferError:  # still viewed by a live array: left to exit
                atexit.register(segment.cleanup)
                continue
            closed += 1
    return closed


def dataset_shm_prefix(dataset: Any) -> int:
    """The shared-memory prefix number a live ``StreamingDataset`` registered."""
    return int(dataset._shm_prefix_int)


def release_created_shm(dataset: Any) -> int:
    """Hand the segments this process created for ``dataset`` over to :func:`unlink_shm`;
    returns how many. Call it in every local rank when the dataset is dropped.

    Why: streaming creates each segment in whichever local rank gets there first, and that
    process's ``resource_tracker`` then counts it; the loader's owner (local rank 0) unlinks
    them all, so a tracker that still counts a segment another process unlinked warns at
    exit ("leaked shared_memory objects", then "No such file or directory" per segment).
    Unregistering here, and taking them off streaming's own atexit unlink list, leaves the
    unlink (and its tracker bookkeeping, which nets to zero there) to the owner alone.
    """
    released = 0
    for path in _SEGMENT_HOLDERS:
        holder = dataset
        for attr in path.split("."):
            holder = getattr(holder, attr, None)
        for segment in getattr(holder, "created_shms", ()):
            resource_tracker.unregister(segment._name, "shared_memory")
            released += 1
        if holder is not None and hasattr(holder, "created_shms"):
            holder.created_shms = []
    return released


def shm_locals(prefix: int) -> list[str] | None:
    """The local directories registered under ``prefix``, or None if it has no segment."""
    from streaming.base.constant import LOCALS
    from streaming.base.shared.memory import SharedMemory as UntrackedSharedMemory
    from streaming.base.shared.prefix import _get_path, _unpack_locals

    try:  # streaming's attach registers nothing with this process's resource_tracker,
        # which would otherwise unlink another process's live segment at our exit
        segment = UntrackedSharedMemory(_get_path(prefix, LOCALS), create=False, auto_cleanup=False)
    except FileNotFoundError:
        return None
    try:
        dirs, _ = _unpack_locals(bytes(segment.buf))
    finally:
        segment.shm.close()
    return dirs


def unlink_shm(prefix: int) -> int:
    """Unlink every shared-memory segment streaming creates under ``prefix``; returns how
    many this call removed (the ranks of a node close at once, each unlinking what is
    left). The caller checks first (:func:`shm_locals`) that they are its own."""
    from streaming.base.constant import SHM_TO_CLEAN
    from streaming.base.shared.prefix import _get_path

    removed = 0
    for name in SHM_TO_CLEAN:
        try:
            segment = SharedMemory(_get_path(prefix, name), create=False)
        except FileNotFoundError:
            continue
        segment.close()
        try:
            segment.unlink()  # ours: the caller proved the prefix its own (shm_locals)
        except FileNotFoundError:
            continue  # another rank of this node unlinked it between the open and here
        removed += 1
    return removed
