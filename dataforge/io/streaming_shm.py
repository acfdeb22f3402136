"""The shared-memory state of a ``streaming.StreamingDataset``, read and removed safely.

streaming keeps a dataset's coordination state in POSIX shared memory named
``<prefix:06>_<name>``; the ``locals`` segment lists the local directories of the datasets
that share the prefix. Removing a dead run's segments needs three of streaming's private
helpers (``_get_path``, ``_unpack_locals`` and ``StreamingDataset._shm_prefix_int``); this
module is the only place that touches them, so a streaming upgrade that changes them breaks
one tested module (``tests/io/test_streaming_shm.py``) instead of the loader.
"""

from __future__ import annotations

from multiprocessing.shared_memory import SharedMemory
from typing import Any

__all__ = ["dataset_shm_prefix", "shm_locals", "unlink_shm"]


def dataset_shm_prefix(dataset: Any) -> int:
    """The shared-memory prefix number a live ``StreamingDataset`` registered."""
    return int(dataset._shm_prefix_int)


def shm_locals(prefix: int) -> list[str] | None:
    """The local directories registered under ``prefix``, or None if it has no segment."""
    from streaming.base.constant import LOCALS
    from streaming.base.shared.prefix import _get_path, _unpack_locals

    try:
        segment = SharedMemory(_get_path(prefix, LOCALS), create=False)
    except FileNotFoundError:
        return None
    try:
        dirs, _ = _unpack_locals(bytes(segment.buf))
    finally:
        segment.close()
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
