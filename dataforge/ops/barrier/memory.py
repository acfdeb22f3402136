"""Giving freed heap memory back to the operating system between a barrier's phases.

A barrier phase allocates and frees large numpy arrays. glibc serves arrays past its mmap
threshold with ``mmap`` and unmaps them when freed, but it raises that threshold (up to
32 MiB on 64-bit) each time such an array is freed, so the next phases' arrays come from
the heap, whose free pages it keeps: a worker's RSS then holds what earlier phases freed
(1.4–2.0 GB in the dedup planner at 1 GB of input) under the next phase's peak.
``malloc_trim(0)`` returns every free whole page of the heap (it has no Python API; this
is its one wrapper). Elsewhere than glibc it does nothing. Arrow's allocator (mimalloc or
jemalloc) keeps the pages of the Parquet parts a phase read for itself: after the dedup
planner streamed the candidates' texts at 1 GB of input, 290 MB of them while Arrow had
42 MB allocated; ``release_unused`` hands them back too.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

__all__ = ["return_free_memory"]


@functools.cache
def _malloc_trim():
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):  # not glibc: no malloc_trim
        return None


def return_free_memory() -> bool:
    """Return Arrow's and the heap's free pages to the system; whether the heap's could
    (glibc only)."""
    import pyarrow as pa

    pa.default_memory_pool().release_unused()
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
