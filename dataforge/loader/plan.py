"""One epoch's batch plan for one rank: read order -> long-sample policy -> batches ->
equal share per rank, stored compactly (CSR arrays) so that it pickles cheaply to workers.

The planners see entries (a sample, or one piece of a split sample) by their position in
the policy's output, so they never tell pieces from samples; the plan maps each entry back
to its global sample id and its first token."""

from __future__ import annotations

import dataclasses

import numpy as np

from dataforge.loader.batching import LengthStats, effective_lengths, plan_batches
from dataforge.loader.config import LoaderConfig
from dataforge.loader.order import Layout, epoch_order
from dataforge.loader.packing import plan_packed
from dataforge.loader.sharding import equalize, rank_share

__all__ = ["EpochPlan", "build_epoch_plan"]


@dataclasses.dataclass(frozen=True)
class EpochPlan:
    """The batches of one rank in one epoch.

    Attributes:
        epoch: the epoch number.
        samples: global sample ids, batch by batch and row by row.
        starts: the first token of each entry of ``samples`` (0 unless it is a later
            piece of a split sample).
        row_ptr: row ``j`` is ``samples[row_ptr[j]:row_ptr[j + 1]]``.
        batch_ptr: batch ``k`` is rows ``batch_ptr[k]`` to ``batch_ptr[k + 1]``.
        global_batches: batches of all ranks together.
        stats: what the long-sample policy did (whole epoch, all ranks).
    """

    epoch: int
    samples: np.ndarray
    starts: np.ndarray
    row_ptr: np.ndarray
    batch_ptr: np.ndarray
    global_batches: int
    stats: LengthStats

    def __len__(self) -> int:
        return len(self.batch_ptr) - 1

    def batch(self, k: int) -> list[list[tuple[int, int]]]:
        """Batch ``k`` as rows of (global sample id, first token) entries."""
        rows = range(int(self.batch_ptr[k]), int(self.batch_ptr[k + 1]))
        return [
            list(
                zip(
                    self.samples[self.row_ptr[j] : self.row_ptr[j + 1]].tolist(),
                    self.starts[self.row_ptr[j] : self.row_ptr[j + 1]].tolist(),
                    strict=True,
                )
            )
            for j in rows
        ]


def _csr(
    epoch: int,
    batches: list[list[list[int]]],
    sample_of: np.ndarray,
    start_of: np.ndarray,
    global_batches: int,
    stats: LengthStats,
) -> EpochPlan:
    rows = [row for batch in batches for row in batch]
    row_lens = np.array([len(r) for r in rows], np.int64)
    batch_lens = np.array([len(b) for b in batches], np.int64)
    entries = np.array([i for row in rows for i in row], np.int64)
    return EpochPlan(
        epoch=epoch,
        samples=sample_of[entries],
        starts=start_of[entries],
        row_ptr=np.concatenate([[0], np.cumsum(row_lens)]).astype(np.int64),
        batch_ptr=np.concatenate([[0], np.cumsum(batch_lens)]).astype(np.int64),
        global_batches=global_batches,
        stats=stats,
    )


def build_epoch_plan(
    config: LoaderConfig,
    layout: Layout,
    lengths: np.ndarray,
    epoch: int,
    rank: int,
    world_size: int,
) -> EpochPlan:
    """The batches of ``rank`` in ``epoch``; identical inputs give identical plans on every rank.

    Args:
        config: the loader config.
        layout: sample counts of the streams.
        lengths: ``num_tokens`` of every global sample id.
    """
    order = epoch_order(
        layout,
        config.streams,
        epoch_size=config.epoch_size,
        seed=config.seed,
        epoch=epoch,
        shuffle=config.shuffle,
        block_size=config.shuffle_block_size,
    )
    positions, starts, lens, stats = effective_lengths(lengths[order], config)
    rng = np.random.default_rng([config.seed, epoch, 0xBA7C])
    planner = plan_packed if config.packing else plan_batches
    entries = np.arange(len(lens), dtype=np.int64)
    batches = equalize(planner(entries, lens, config, rng), world_size)
    mine = rank_share(batches, rank, world_size)
    return _csr(epoch, mine, order[positions], starts, len(batches), stats)
