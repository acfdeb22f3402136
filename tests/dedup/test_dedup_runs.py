"""KeyRuns: a shard's sorted keys and their columns, held or in sorted runs on disk."""

from __future__ import annotations

import mmap

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataforge.ops.dedup import runs as runs_module
from dataforge.ops.dedup.runs import FAN_IN, KeyRuns


def _reference(keys: np.ndarray, values: np.ndarray, lo, hi) -> tuple[list, list]:
    """Rows in ``[lo, hi)`` sorted by key, earlier rows first among equal keys."""
    mine = np.ones(len(keys), bool)
    if lo is not None:
        mine &= keys >= np.array(lo, keys.dtype)
    if hi is not None:
        mine &= keys < np.array(hi, keys.dtype)
    order = np.flatnonzero(mine)[np.argsort(keys[mine], kind="stable")]
    return keys[order].tolist(), values[order].tolist()


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(0, 3000),
    distinct=st.sampled_from([3, 1000, 1 << 40]),
    dtype=st.sampled_from([np.uint64, np.int64]),
    high=st.booleans(),
    pieces=st.integers(1, 40),
    hold=st.sampled_from([None, 1, 800, 10_000]),
    fan_in=st.sampled_from([2, 16]),
    rounds=st.integers(1, 9),
    seed=st.integers(0, 2**32 - 1),
)
def test_key_runs_read_by_range_and_round_as_one_sort(
    tmp_path_factory, n, distinct, dtype, high, pieces, hold, fan_in, rounds, seed
):
    """Any budget, fan-in and split of the input: every range read (and every round)
    gives the rows one stable sort by key would, the rounds cover each row once at
    multiples of 2^32, and clearing removes the runs' files."""
    rng = np.random.default_rng(seed)
    keys = rng.integers(0, distinct, n).astype(dtype)
    if high and dtype is np.uint64:
        keys = keys << np.uint64(24)  # keys up to 2^64 - 2^24: unsigned order
    values = np.arange(n, dtype=np.uint32)  # the row's place: stability is visible
    spill = tmp_path_factory.mktemp("runs")
    old = runs_module.FAN_IN, runs_module.MIN_RUN_ROWS
    runs_module.FAN_IN, runs_module.MIN_RUN_ROWS = fan_in, 1
    try:
        runs = KeyRuns(dtype, (np.uint32,), hold, str(spill))
        size = -(-n // pieces) or 1
        for start in range(0, n, size):
            runs.add(keys[start : start + size], values[start : start + size])
        assert runs.count == n and (runs.spilled_runs > 0) == (
            hold is not None and n > max(1, hold // 3 // 12)
        )
        ks, vs = runs.between(None, None)
        assert (ks.tolist(), vs.tolist()) == _reference(keys, values, None, None)
        if n:
            lo, hi = sorted(int(k) for k in rng.choice(keys, 2))
            got = runs.between(lo, hi)
            assert (got[0].tolist(), got[1].tolist()) == _reference(keys, values, lo, hi)
        seen = []
        for r in range(rounds):
            lo, hi = runs.round_range(r, rounds, align=32)
            assert lo % (1 << 32) == 0 and (hi is None or hi % (1 << 32) == 0)
            got = runs.between(lo, hi)
            assert (got[0].tolist(), got[1].tolist()) == _reference(keys, values, lo, hi)
            seen += got[1].tolist()
        assert sorted(seen) == values.tolist()
        runs.clear()
        assert list(spill.iterdir()) == []
    finally:
        runs_module.FAN_IN, runs_module.MIN_RUN_ROWS = old


def test_rounds_are_about_equal_in_rows_on_a_skewed_key_set(tmp_path):
    """Keys crowded at the bottom of their range: the rounds still split the rows about
    equally (cut at the histogram's quantiles, not at equal key ranges)."""
    rng = np.random.default_rng(0)
    keys = (rng.zipf(1.5, 200_000).astype(np.int64) % (1 << 30)) << 32 | rng.integers(0, 9, 200_000)
    runs = KeyRuns(np.int64, (), hold_bytes=100_000, spill_root=str(tmp_path))
    runs.add(keys)
    sizes = [len(runs.between(*runs.round_range(r, 8, align=32))[0]) for r in range(8)]
    assert sum(sizes) == len(keys)
    # rows of one key (here: 1 alone holds ~40%) are never split, the rest are shared
    assert max(sizes) <= max(np.unique(keys >> 32, return_counts=True)[1]) + len(keys) // 8


def test_adding_after_a_read_keeps_every_row(tmp_path):
    runs = KeyRuns(np.int64, (np.float64,), hold_bytes=None)
    runs.add(np.array([5, 1]), np.array([0.5, 0.1]))
    assert runs.between(None, None)[0].tolist() == [1, 5]
    runs.add(np.array([3]), np.array([0.3]))
    keys, sims = runs.between(2, None)
    assert keys.tolist() == [3, 5] and sims.tolist() == [0.3, 0.5]


def test_a_wrong_number_of_columns_is_refused():
    with pytest.raises(ValueError, match="1 value columns expected"):
        KeyRuns(np.int64, (np.float64,)).add(np.array([1]))


def test_spilled_runs_are_read_never_mapped(tmp_path, monkeypatch):
    """Runs are written, merged, cut into rounds, counted and read back without a memory
    map: a map's read-ahead left most of the runs' pages resident (4.7 GB at 5.4 GB of
    runs). Cuts, histogram and ranges are those of one sorted array."""

    def refuse(*args, **kwargs):
        pytest.fail("a run was memory-mapped")

    monkeypatch.setattr(np, "memmap", refuse)
    monkeypatch.setattr(mmap, "mmap", refuse)
    rng = np.random.default_rng(3)
    keys = rng.integers(0, 1 << 40, 100_000).astype(np.int64)
    runs = KeyRuns(np.int64, (np.int32,), 8 * 4096, str(tmp_path))
    for part in np.array_split(keys, 40):
        runs.add(part, (part & 0xFFFF).astype(np.int32))
    runs.finish()
    assert runs.spilled_runs > FAN_IN  # a level was merged
    rounds, ordered = 7, np.sort(keys)
    cuts = [runs.round_range(r, rounds, align=8) for r in range(rounds)]
    for lo, hi in cuts:
        rows = (
            np.searchsorted(ordered, lo),
            len(ordered) if hi is None else np.searchsorted(ordered, hi),
        )
        assert lo % 256 == 0 and (hi is None or hi % 256 == 0)
        assert abs(int(rows[1] - rows[0]) - len(keys) / rounds) <= 256  # about equal rows
        got_keys, got_values = runs.between(lo, hi)
        assert np.array_equal(got_keys, ordered[rows[0] : rows[1]])
        assert np.array_equal(got_values, (got_keys & 0xFFFF).astype(np.int32))
    assert [c[1] for c in cuts[:-1]] == [c[0] for c in cuts[1:]] and cuts[-1][1] is None
    expected = np.bincount(np.minimum(keys >> 30, 99), minlength=100)
    assert np.array_equal(runs.histogram(30, 100), expected)
