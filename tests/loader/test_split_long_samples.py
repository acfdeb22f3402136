"""``long_samples: split``: every token of every sample reaches exactly one row per epoch,
as pieces of ``max_seq_len`` tokens that are batched and packed as documents of their own;
the plan stays deterministic and resumable; ``truncate``/``drop`` plan as before."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from loader_shards import write_mds

from dataforge.loader import LoaderConfig, build_dataloader
from dataforge.loader.batching import effective_lengths, plan_batches
from dataforge.loader.collate import collate, piece
from dataforge.loader.order import Layout, epoch_order
from dataforge.loader.packing import plan_packed
from dataforge.loader.plan import build_epoch_plan
from dataforge.loader.sharding import equalize, rank_share
from dataforge.typed_config import ConfigError, from_mapping

SETTINGS = settings(max_examples=60, deadline=None)


def _config(**kw) -> LoaderConfig:
    return LoaderConfig(streams=[{"path": "unused"}], **kw)


def _segments(batch: dict[str, torch.Tensor], packing: bool) -> list[torch.Tensor]:
    """The documents of a collated batch: cu_seqlens segments (packed) or rows (padded),
    each cut to its real tokens; checks that positions restart in every one."""
    ids, mask, pos = batch["input_ids"], batch["attention_mask"], batch["position_ids"]
    if not packing:
        out = []
        for row in range(ids.shape[0]):
            n = int(mask[row].sum())
            assert torch.equal(pos[row, :n], torch.arange(n))
            out.append(ids[row, :n])
        return out
    flat_ids, flat_mask, flat_pos = ids.flatten(), mask.flatten(), pos.flatten()
    cu = batch["cu_seqlens"].tolist()
    out = []
    for a, b in zip(cu, cu[1:], strict=False):
        if flat_mask[a:b].any():
            assert flat_mask[a:b].all()
            assert torch.equal(flat_pos[a:b], torch.arange(b - a))
            out.append(flat_ids[a:b])
    return out


@SETTINGS
@given(
    lengths=st.lists(st.integers(0, 300), min_size=1, max_size=120),
    max_seq_len=st.integers(4, 64),
    budget_rows=st.integers(1, 6),
    multiple=st.sampled_from([1, 8]),
    buckets=st.sampled_from(["auto", [8, 16, 32]]),
    packing=st.booleans(),
    world=st.integers(1, 3),
    buffer=st.integers(1, 48),
    seed=st.integers(0, 2**16),
)
def test_split_trains_on_every_token_exactly_once_per_epoch(
    lengths, max_seq_len, budget_rows, multiple, buckets, packing, world, buffer, seed
):
    longest = -(-max_seq_len // multiple) * multiple
    config = _config(
        max_seq_len=max_seq_len,
        max_tokens=budget_rows * longest + seed % 5,
        pad_to_multiple_of=multiple,
        bucket_boundaries=buckets,
        packing=packing,
        shuffle_buffer=buffer,
        seed=seed,
    )
    assert config.long_samples == "split"  # the pretrain default
    # Every token of the dataset is a distinct id, so a token seen twice or never shows.
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    samples = [
        {"tokens": np.arange(offsets[i], offsets[i + 1]), "num_tokens": n}
        for i, n in enumerate(lengths)
    ]
    layout = Layout(samples_per_shard=np.array([len(lengths)]), shards_per_stream=np.array([1]))
    try:
        plans = [
            build_epoch_plan(config, layout, np.array(lengths), 1, r, world) for r in range(world)
        ]
    except ValueError as exc:  # an odd count of one-row batches: no equal share exists
        assert "same number of batches" in str(exc) and world > 1
        assume(False)
    assert len({len(p) for p in plans}) == 1 and plans[0].global_batches == world * len(plans[0])
    seen = []
    for plan in plans:
        for k in range(len(plan)):
            rows = [[piece(samples[i], start) for i, start in row] for row in plan.batch(k)]
            batch = collate(rows, config)
            assert batch["input_ids"].numel() <= config.max_tokens
            if buckets != "auto" and not packing:
                widths = batch["attention_mask"].sum(1).numpy()
                assert len(set(np.searchsorted(buckets, widths, side="left").tolist())) == 1
            for doc in _segments(batch, packing):
                # A piece: max_seq_len consecutive tokens of one sample (the last one the
                # remainder), starting at a multiple of max_seq_len; no token added.
                first = int(doc[0])
                i = int(np.searchsorted(offsets, first, side="right")) - 1
                start = first - offsets[i]
                assert start % max_seq_len == 0
                assert len(doc) == min(max_seq_len, lengths[i] - start)
                assert torch.equal(doc, torch.arange(first, first + len(doc)))
                seen.append(doc)
    tokens = torch.cat(seen).sort().values if seen else torch.zeros(0, dtype=torch.int64)
    assert torch.equal(tokens, torch.arange(int(offsets[-1])))
    stats = plans[0].stats
    assert stats.tokens == stats.tokens_used == sum(lengths) and stats.tokens_lost == 0
    assert stats.truncated == stats.dropped_long == 0
    assert stats.split == sum(n > max_seq_len for n in lengths)
    assert stats.pieces == sum(-(-n // max_seq_len) for n in lengths if n > max_seq_len)


def test_pieces_of_a_sample_follow_each_other_in_read_order():
    positions, starts, lens, stats = effective_lengths(
        np.array([5, 25, 0, 10, 21]), _config(max_seq_len=10, max_tokens=10)
    )
    assert positions.tolist() == [0, 1, 1, 1, 3, 4, 4, 4]
    assert starts.tolist() == [0, 0, 10, 20, 0, 0, 10, 20]
    assert lens.tolist() == [5, 10, 10, 5, 10, 10, 10, 1]
    assert (stats.split, stats.pieces, stats.dropped_empty) == (2, 6, 1)
    assert (stats.tokens, stats.tokens_used) == (61, 61)


@pytest.mark.parametrize("packing", [False, True])
@pytest.mark.parametrize("policy", ["truncate", "drop"])
def test_truncate_and_drop_plan_exactly_as_the_planners_over_sample_ids(packing, policy):
    """The plan of truncate/drop is the one the planners give over the kept sample ids,
    which is how it was made before pieces existed; token counts say what was lost."""
    lengths = np.random.default_rng(5).integers(0, 300, 500)
    config = _config(
        max_seq_len=128, max_tokens=512, packing=packing, long_samples=policy, shuffle_buffer=64
    )
    layout = Layout(samples_per_shard=np.array([300, 200]), shards_per_stream=np.array([2]))
    order = epoch_order(
        layout, config.streams, epoch_size=None, seed=0, epoch=2, shuffle=True, block_size=1 << 16
    )
    positions, starts, lens, stats = effective_lengths(lengths[order], config)
    keep = (lengths[order] > 0) & ((lengths[order] <= 128) | (policy == "truncate"))
    assert positions.tolist() == np.flatnonzero(keep).tolist() and not starts.any()
    planner = plan_packed if packing else plan_batches
    rng = np.random.default_rng([0, 2, 0xBA7C])
    expected = rank_share(equalize(planner(order[keep], lens, config, rng), 2), 1, 2)
    plan = build_epoch_plan(config, layout, lengths, 2, 1, 2)
    got = [[[i for i, _ in row] for row in plan.batch(k)] for k in range(len(plan))]
    assert got == expected and not plan.starts.any()
    assert stats.tokens == int(lengths.sum())
    assert stats.tokens_used == int(np.minimum(lengths[order][keep], 128).sum())
    assert stats.tokens_lost > 0 and stats.split == stats.pieces == 0


@pytest.mark.parametrize("mode", ["sft", "dpo"])
def test_split_is_refused_where_a_piece_would_not_be_a_sample(mode):
    with pytest.raises(ValueError, match=r"long_samples='split'.*valid in that mode: 'truncate'"):
        _config(mode=mode, long_samples="split")
    with pytest.raises(ConfigError, match=r"^data\.loader.*long_samples='split'.*'drop'"):
        from_mapping(
            LoaderConfig,
            {"streams": ["x"], "mode": mode, "long_samples": "split"},
            "data.loader",
        )
    assert _config(mode=mode).long_samples == "truncate"
    assert _config(mode=mode, long_samples="drop").long_samples == "drop"
    assert _config().long_samples == "split"
    assert _config(long_samples="truncate").long_samples == "truncate"
    with pytest.raises(ValueError, match="valid: 'auto', 'split', 'truncate', 'drop'"):
        _config(long_samples="chunk")


# -- end to end over MDS shards ------------------------------------------------------------


@pytest.fixture(scope="module")
def long_dir(tmp_path_factory) -> tuple[Path, list[dict]]:
    out = tmp_path_factory.mktemp("long") / "mds"
    lengths = np.random.default_rng(3).integers(1, 420, 150).tolist()
    return out, write_mds(out, lengths, "pretrain", compression="zstd")


def _loader_config(path: Path, cache_dir: str, **kw) -> LoaderConfig:
    base = dict(streams=[str(path)], max_tokens=512, max_seq_len=128, shuffle_buffer=48, seed=11)
    return LoaderConfig(**{**base, **kw, "cache_dir": cache_dir})


def _pieces(plan, samples: list[dict], batches: list[dict], packing: bool) -> list[tuple]:
    """(sample, start) of every document of ``batches`` (an epoch of ``plan``), checked
    against the sample's tokens; in plan order."""
    out = []
    for k, batch in enumerate(batches):
        entries = [e for row in plan.batch(k) for e in row]
        docs = _segments(batch, packing)
        assert len(docs) == len(entries)
        for (i, start), doc in zip(entries, docs, strict=True):
            tokens = samples[i]["tokens"].astype(np.int64)[start : start + 128]
            assert doc.tolist() == tokens.tolist()
            out.append((i, start))
    return out


@pytest.mark.parametrize("packing", [False, True])
def test_loader_delivers_every_piece_of_every_sample_once(long_dir, cache_dir, packing):
    path, samples = long_dir
    with build_dataloader(_loader_config(path, cache_dir, packing=packing)) as loader:
        plan = loader.plan()
        batches = list(loader)
        pieces = _pieces(plan, samples, batches, packing)
    expected = [(i, s) for i, x in enumerate(samples) for s in range(0, x["num_tokens"], 128)]
    assert sorted(pieces) == expected
    total = sum(x["num_tokens"] for x in samples)
    real = sum(int(b["attention_mask"].sum()) for b in batches)
    assert real == plan.stats.tokens == plan.stats.tokens_used == total
    assert plan.stats.split == sum(x["num_tokens"] > 128 for x in samples) > 0


def _same(a: list[dict], b: list[dict]) -> bool:
    return len(a) == len(b) and all(
        x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)
        for x, y in zip(a, b, strict=True)
    )


@pytest.mark.parametrize(("packing", "workers"), [(True, 0), (True, 2), (False, 2)])
def test_split_resumes_mid_epoch_to_the_uninterrupted_stream(long_dir, cache_dir, packing, workers):
    path, samples = long_dir
    cfg = _loader_config(path, cache_dir, packing=packing)
    with build_dataloader(cfg) as reference, build_dataloader(cfg) as again:
        plan = reference.plan()
        full = list(reference)
        assert _same(full, list(again))  # another loader of the same config: the same stream
        reference_pieces = _pieces(plan, samples, full, packing)
    k = len(full) // 2 + 1
    resumed_cfg = _loader_config(path, cache_dir, packing=packing, num_workers=workers)
    with build_dataloader(resumed_cfg) as loader:
        head = []
        for batch in loader:
            head.append(batch)
            if len(head) == k:
                break
        state = loader.state_dict()
    with build_dataloader(resumed_cfg) as resumed:
        resumed.load_state_dict(state)
        rest = list(resumed)
    assert _same(head + rest, full)
    assert _pieces(plan, samples, head + rest, packing) == reference_pieces
