"""Properties of the batch plan (no shards needed): budget, exactly-once, equal shares."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from dataforge.loader.batching import effective_lengths, plan_batches
from dataforge.loader.config import LoaderConfig, StreamSpec
from dataforge.loader.order import Layout, epoch_order, stream_choose
from dataforge.loader.packing import plan_packed
from dataforge.loader.plan import build_epoch_plan
from dataforge.loader.sharding import equalize

SETTINGS = settings(max_examples=60, deadline=None)


def _config(**kw) -> LoaderConfig:
    return LoaderConfig(streams=[{"path": "unused"}], **kw)


def _padded_tokens(batch, lengths, config) -> int:
    rows = 2 if config.mode == "dpo" else 1
    return rows * len(batch) * config.padded_len(max(int(lengths[row[0]]) for row in batch))


@SETTINGS
@given(
    lengths=st.lists(st.integers(1, 300), min_size=1, max_size=400),
    max_seq_len=st.integers(16, 256),
    budget_factor=st.integers(1, 8),
    buffer=st.integers(1, 64),
    multiple=st.sampled_from([1, 8]),
    mode=st.sampled_from(["pretrain", "dpo"]),
    buckets=st.sampled_from(["auto", [32, 64, 128]]),
    seed=st.integers(0, 2**16),
)
def test_padded_batches_never_exceed_budget_and_cover_each_sample_once(
    lengths, max_seq_len, budget_factor, buffer, multiple, mode, buckets, seed
):
    rows_per_sample = 2 if mode == "dpo" else 1
    longest = -(-max_seq_len // multiple) * multiple
    config = _config(
        mode=mode,
        max_seq_len=max_seq_len,
        max_tokens=rows_per_sample * longest * budget_factor + seed % 7,
        shuffle_buffer=buffer,
        pad_to_multiple_of=multiple,
        bucket_boundaries=buckets,
        seed=seed,
        long_samples="truncate",  # one row per sample (test_split_long_samples.py: pieces)
    )
    raw = np.array(lengths)
    keep, _, lens, stats = effective_lengths(raw, config)
    ids = np.arange(len(raw))[keep]
    eff = dict(zip(ids.tolist(), lens.tolist(), strict=True))
    batches = plan_batches(ids, lens, config, np.random.default_rng(seed))
    for batch in batches:
        assert _padded_tokens(batch, eff, config) <= config.max_tokens
        if buckets != "auto":
            buckets_hit = {int(np.searchsorted(buckets, eff[row[0]], side="left")) for row in batch}
            assert len(buckets_hit) == 1
    flat = sorted(i for b in batches for row in b for i in row)
    assert flat == ids.tolist()
    assert stats.truncated == int((raw > max_seq_len).sum())


@SETTINGS
@given(
    lengths=st.lists(st.integers(1, 200), min_size=1, max_size=300),
    max_seq_len=st.integers(8, 200),
    rows=st.integers(1, 4),
    buffer=st.integers(1, 64),
    seed=st.integers(0, 2**16),
)
def test_packed_rows_fit_and_cover_each_sample_once(lengths, max_seq_len, rows, buffer, seed):
    config = _config(
        max_seq_len=max_seq_len,
        max_tokens=rows * max_seq_len,
        packing=True,
        shuffle_buffer=buffer,
        long_samples="truncate",
    )
    keep, _, lens, _ = effective_lengths(np.array(lengths), config)
    ids = np.arange(len(lengths))[keep]
    eff = dict(zip(ids.tolist(), lens.tolist(), strict=True))
    batches = plan_packed(ids, lens, config, np.random.default_rng(seed))
    for batch in batches:
        assert 1 <= len(batch) <= rows
        assert all(sum(eff[i] for i in row) <= max_seq_len for row in batch)
    assert sorted(i for b in batches for row in b for i in row) == ids.tolist()


@SETTINGS
@given(
    lengths=st.lists(st.integers(1, 120), min_size=4, max_size=200),
    world=st.integers(1, 4),
    packing=st.booleans(),
    epoch=st.integers(0, 3),
    seed=st.integers(0, 1000),
)
def test_ranks_get_equal_batch_counts_and_disjoint_complete_samples(
    lengths, world, packing, epoch, seed
):
    config = _config(max_seq_len=128, max_tokens=512, packing=packing, shuffle_buffer=32, seed=seed)
    layout = Layout(samples_per_shard=np.array([len(lengths)]), shards_per_stream=np.array([1]))
    plans = [
        build_epoch_plan(config, layout, np.array(lengths), epoch, r, world) for r in range(world)
    ]
    assert len({len(p) for p in plans}) == 1
    seen = np.concatenate([p.samples for p in plans])
    assert sorted(seen.tolist()) == list(range(len(lengths)))


def test_equalize_splits_until_divisible_and_refuses_impossible_cases():
    batches = [[[0], [1], [2]], [[3]]]
    out = equalize(batches, 3)
    assert len(out) == 3 and sorted(i for b in out for r in b for i in r) == [0, 1, 2, 3]
    packed = equalize([[[0, 1, 2]]], 2)  # one packed row is split into two rows
    assert packed == [[[0]], [[1, 2]]]
    try:
        equalize([[[0]], [[1]], [[2]]], 2)
    except ValueError as exc:
        assert "same number of batches" in str(exc)
    else:
        raise AssertionError("expected ValueError")


def test_epoch_order_is_deterministic_and_differs_between_epochs():
    layout = Layout(samples_per_shard=np.array([5, 7, 4]), shards_per_stream=np.array([2, 1]))
    specs = (StreamSpec("a"), StreamSpec("b"))
    kw = dict(epoch_size=None, seed=3, shuffle=True, block_size=4)
    a = epoch_order(layout, specs, epoch=0, **kw)
    assert np.array_equal(a, epoch_order(layout, specs, epoch=0, **kw))
    assert not np.array_equal(a, epoch_order(layout, specs, epoch=1, **kw))
    assert sorted(a.tolist()) == list(range(16))
    plain = epoch_order(
        layout, specs, epoch=0, epoch_size=None, seed=3, shuffle=False, block_size=4
    )
    assert plain.tolist() == list(range(16))


def test_stream_weights_choose_exact_counts():
    sizes = np.array([100, 50])
    props = (StreamSpec("a", proportion=0.25), StreamSpec("b", proportion=0.75))
    assert stream_choose(props, sizes, 200).tolist() == [50, 150]
    mixed = (StreamSpec("a", repeat=1.5), StreamSpec("b", choose=10))
    assert stream_choose(mixed, sizes, None).tolist() == [150, 10]
    layout = Layout(samples_per_shard=np.array([100, 50]), shards_per_stream=np.array([1, 1]))
    order = epoch_order(
        layout, mixed, epoch_size=None, seed=0, epoch=0, shuffle=True, block_size=64
    )
    counts = np.bincount(order, minlength=150)
    assert counts[:100].sum() == 150 and counts[:100].max() == 2 and counts[:100].min() == 1
    assert counts[100:].sum() == 10 and counts[100:].max() == 1


def test_long_sample_policy_counts():
    raw = np.array([5, 50, 0, 200, 100])
    truncate = _config(max_seq_len=100, max_tokens=100, long_samples="truncate")
    keep, _, lens, stats = effective_lengths(raw, truncate)
    assert lens.tolist() == [5, 50, 100, 100] and stats.truncated == 1 and stats.dropped_empty == 1
    keep, _, lens, stats = effective_lengths(
        raw, _config(max_seq_len=100, max_tokens=100, long_samples="drop")
    )
    assert lens.tolist() == [5, 50, 100] and stats.dropped_long == 1 and stats.truncated == 0


def test_the_shard_checks_leave_the_plan_fields_alone():
    """A checkpoint resumes whether or not hashes are verified or ids checked."""
    import pytest

    plain = LoaderConfig(streams=["a"])
    checked = LoaderConfig(streams=["a"], vocab_size=512, verify_hashes=False)
    assert checked.plan_fields() == plain.plan_fields()
    assert "vocab_size" not in plain.plan_fields()
    with pytest.raises(ValueError, match="vocab_size must be a positive integer or None, got 0"):
        LoaderConfig(streams=["a"], vocab_size=0)
