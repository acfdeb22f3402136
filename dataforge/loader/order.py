"""The epoch's read order: which samples an epoch contains (stream weights) and in what order.

Deterministic in ``(seed, epoch)``: every rank computes the same order, so the batch plan
built on it is the same on every rank and each rank can take its own share of batches.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from dataforge.loader.config import StreamSpec

__all__ = ["Layout", "epoch_order", "stream_choose"]


@dataclasses.dataclass(frozen=True)
class Layout:
    """Sample counts of the concatenated streams (global sample ids run stream by stream,
    shard by shard, as in ``streaming.StreamingDataset``)."""

    samples_per_shard: np.ndarray
    shards_per_stream: np.ndarray

    @property
    def num_samples(self) -> int:
        return int(self.samples_per_shard.sum())

    def samples_per_stream(self) -> np.ndarray:
        ends = np.cumsum(self.shards_per_stream)
        starts = ends - self.shards_per_stream
        return np.array(
            [self.samples_per_shard[a:b].sum() for a, b in zip(starts, ends, strict=True)], np.int64
        )

    def shard_offsets(self) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(self.samples_per_shard)]).astype(np.int64)


def stream_choose(
    specs: tuple[StreamSpec, ...], sizes: np.ndarray, epoch_size: int | None
) -> np.ndarray:
    """Samples each stream contributes to one epoch.

    ``proportion`` shares ``epoch_size`` (default: all samples) among streams; ``repeat``
    scales a stream's size; ``choose`` is absolute; none of them means the stream's size.
    """
    sizes = np.asarray(sizes, np.int64)
    if specs and specs[0].proportion is not None:
        total = int(epoch_size if epoch_size is not None else sizes.sum())
        weights = np.array([s.proportion for s in specs], np.float64)
        if weights.sum() <= 0:
            raise ValueError("stream proportions sum to 0")
        exact = total * weights / weights.sum()
        choose = np.floor(exact).astype(np.int64)
        # Largest remainders get the leftover samples so that the sum is exactly epoch_size.
        leftover = total - int(choose.sum())
        choose[np.argsort(-(exact - choose), kind="stable")[:leftover]] += 1
    else:
        choose = sizes.copy()
        for i, spec in enumerate(specs):
            if spec.repeat is not None:
                choose[i] = round(spec.repeat * sizes[i])
            elif spec.choose is not None:
                choose[i] = spec.choose
    empty = [specs[i].path for i in range(len(specs)) if choose[i] > 0 and sizes[i] == 0]
    if empty:
        raise ValueError(f"streams {empty} have no samples but are asked for some")
    return choose


def epoch_order(
    layout: Layout,
    specs: tuple[StreamSpec, ...],
    *,
    epoch_size: int | None,
    seed: int,
    epoch: int,
    shuffle: bool,
    block_size: int,
) -> np.ndarray:
    """Global sample ids of one epoch in read order (a sample repeats when its stream is
    upsampled; each entry is delivered exactly once per epoch).

    Shuffling keeps reads local: shards are visited in a random order and samples are
    shuffled within blocks of ``block_size`` consecutive samples of that order.
    """
    rng = np.random.default_rng([seed, epoch, 0x5EED])
    sizes = layout.samples_per_stream()
    choose = stream_choose(specs, sizes, epoch_size)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    parts = []
    for start, size, n in zip(starts, sizes, choose, strict=True):
        full, extra = divmod(int(n), int(size)) if size else (0, 0)
        ids = [np.tile(np.arange(size, dtype=np.int64), full)]
        if extra:
            pick = rng.choice(size, extra, replace=False) if shuffle else np.arange(extra)
            ids.append(np.sort(pick).astype(np.int64))
        parts.append(np.concatenate(ids) + start)
    order = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    if not shuffle or len(order) == 0:
        return order
    shard_of = np.searchsorted(layout.shard_offsets(), order, side="right") - 1
    shard_rank = rng.permutation(len(layout.samples_per_shard))
    order = order[np.lexsort((rng.random(len(order)), shard_rank[shard_of]))]
    for begin in range(0, len(order), block_size):
        rng.shuffle(order[begin : begin + block_size])
    return order
