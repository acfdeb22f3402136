"""Freed heap pages go back to the system between the dedup barrier's phases."""

from __future__ import annotations

import platform

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from dataforge.ops.barrier import memory


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_freed_small_arrays_leave_the_resident_set_once_trimmed():
    """Many arrays below glibc's mmap threshold come from the heap; freed, their pages
    stay resident until trimmed."""
    memory.return_free_memory()
    arrays = [np.ones(8_000) for _ in range(8_000)]  # 64 KB each, 512 MB in all
    keep = arrays[-1]  # the heap's top stays in use: free() alone cannot shrink it
    del arrays
    freed = _rss()
    assert memory.return_free_memory() is True
    trimmed = _rss()
    assert freed - trimmed > 400_000_000  # the freed arrays' pages left only now
    assert keep.sum() == 8_000


def test_without_malloc_trim_nothing_happens(monkeypatch):
    monkeypatch.setattr(memory, "_malloc_trim", lambda: None)
    assert memory.return_free_memory() is False


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_freed_arrow_buffers_leave_the_resident_set_once_released():
    """Arrow's allocator keeps the pages of freed buffers (the Parquet parts a phase read);
    they leave the resident set once released."""
    memory.return_free_memory()
    base = pa.array(np.ones(8_000))
    arrays = [pc.add(base, 1.0) for _ in range(8_000)]  # 64 KB each from Arrow's pool
    assert pa.total_allocated_bytes() >= 8_000 * 64_000
    del arrays
    freed = _rss()
    memory.return_free_memory()
    assert freed - _rss() > 400_000_000
