"""``build_dataloader``: the loader object the trainer iterates.

The main process reads every sample's length once (``num_tokens`` from the raw shard
bytes; under torch.distributed each rank reads a slice and the slices are all-gathered),
then each epoch's plan is a pure function of (lengths, config, epoch, rank, world size).
DataLoader workers take plan batches ``start + w, start + w + W, ...`` (worker ``w`` of
``W``); torch hands results back round-robin, so batches arrive in plan order. The loader
counts batches as it yields them, which is what makes resume exact with workers that
prefetch.
"""

from __future__ import annotations

import multiprocessing
import os
import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from dataforge.loader.batching import LengthStats
from dataforge.loader.collate import collate, piece
from dataforge.loader.config import MODE_COLUMNS, LoaderConfig
from dataforge.loader.plan import EpochPlan, build_epoch_plan
from dataforge.loader.source import StreamSource
from dataforge.loader.state import LoaderState, plan_fingerprint

__all__ = ["DataforgeLoader", "build_dataloader"]


class _PlannedBatches(IterableDataset):
    """Yields collated batches of one rank's plan; runs in the DataLoader workers."""

    def __init__(
        self, source: StreamSource, config: LoaderConfig, lengths: np.ndarray, rank: int, world: int
    ):
        self.source, self.config, self.lengths = source, config, lengths
        self.rank, self.world = rank, world
        # (epoch, first batch) shared with persistent workers, which are not re-pickled.
        self.progress = multiprocessing.RawArray("q", 2)
        self.columns = MODE_COLUMNS[config.mode]
        self._plan: EpochPlan | None = None

    def plan(self, epoch: int) -> EpochPlan:
        if self._plan is None or self._plan.epoch != epoch:
            self._plan = build_epoch_plan(
                self.config, self.source.layout, self.lengths, epoch, self.rank, self.world
            )
        return self._plan

    def __iter__(self) -> Iterator[dict[str, torch.Tensor] | ValueError]:
        epoch, start = int(self.progress[0]), int(self.progress[1])
        plan = self.plan(epoch)
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        for k in range(start + worker, len(plan), workers):
            try:
                rows = [
                    [piece(self.source.get(i, self.columns), start) for i, start in row]
                    for row in plan.batch(k)
                ]
                batch = collate(rows, self.config)
            except ValueError as exc:  # corrupt shards or samples (MDSCorruptError is one)
                # torch re-raises a worker's exception with the worker's traceback in its
                # message; handed back as a value, the main process raises it as it was.
                yield exc
                return
            yield batch


def _dist() -> tuple[int, int, bool]:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size(), True
    return 0, 1, False


class DataforgeLoader:
    """Iterable of batches (dicts of tensors) with exact mid-epoch resume.

    Iterating runs the rest of the current epoch, then advances the epoch. Use it as a
    context manager (or call :meth:`close`) to remove the run's stream directories.
    """

    def __init__(self, config: LoaderConfig) -> None:
        self.config = config
        rank, world, distributed = _dist()
        if config.rank is not None:
            rank, world, distributed = config.rank, config.world_size, False
        self.rank, self.world_size = rank, world
        run_id = None
        if distributed:
            # Local ranks must share the streams' local dirs (streaming's shm registry demands it).
            box = [f"{os.getpid()}-{uuid.uuid4().hex[:8]}"]
            torch.distributed.broadcast_object_list(box, src=0)
            run_id = box[0]
        owner = not distributed or int(os.environ.get("LOCAL_RANK", "0")) == 0
        self.source = StreamSource(config, run_id=run_id, owner=owner)
        try:
            self.lengths = self._read_lengths(distributed)
        except BaseException:  # a corrupt shard: leave no stream directory behind
            self.source.close()
            raise
        self.fingerprint = plan_fingerprint(config, self.source.index_digests, rank, world)
        self._state = LoaderState(fingerprint=self.fingerprint)
        self._dataset = _PlannedBatches(self.source, config, self.lengths, rank, world)
        self._persistent: DataLoader | None = None

    def _read_lengths(self, distributed: bool) -> np.ndarray:
        n = len(self.source)
        if not distributed or self.world_size == 1:
            return self.source.lengths().astype(np.int32)
        bounds = np.linspace(0, n, self.world_size + 1).astype(np.int64)
        mine = self.source.lengths(int(bounds[self.rank]), int(bounds[self.rank + 1])).astype(
            np.int32
        )
        parts: list[Any] = [None] * self.world_size
        torch.distributed.all_gather_object(parts, mine)
        return np.concatenate(parts)

    # -- plan and progress ------------------------------------------------------------
    @property
    def epoch(self) -> int:
        return self._state.epoch

    def set_epoch(self, epoch: int) -> None:
        """Make ``epoch`` the current epoch. Setting the current epoch again keeps its
        progress, so ``for e in range(start, n): loader.set_epoch(e); for b in loader``
        stays exact after ``load_state_dict`` (iteration also advances epochs itself)."""
        if int(epoch) != self._state.epoch:
            self._state.epoch, self._state.batches_consumed = int(epoch), 0

    def plan(self) -> EpochPlan:
        """The current epoch's batch plan of this rank."""
        return self._dataset.plan(self._state.epoch)

    @property
    def stats(self) -> LengthStats:
        """Long-sample counts and tokens of the current epoch (all ranks): truncated,
        split, dropped_long, ..., tokens and tokens_used."""
        return self.plan().stats

    def __len__(self) -> int:
        """Batches of this rank in the current epoch (the same on every rank)."""
        return len(self.plan())

    def state_dict(self) -> dict[str, Any]:
        """Progress to save with a checkpoint: the batches already yielded count as consumed."""
        if self._state.batches_consumed >= len(self.plan()):
            return LoaderState(self._state.epoch + 1, 0, self.fingerprint).to_dict()
        return self._state.to_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue exactly after the batches consumed when ``state`` was saved.

        Raises:
            ValueError: the state belongs to another plan (config, shards, rank, world size).
        """
        self._state = LoaderState.from_dict(state, self.fingerprint)

    # -- iteration --------------------------------------------------------------------
    def _dataloader(self) -> DataLoader:
        if self._persistent is not None:
            return self._persistent
        cfg = self.config
        extra = {}
        if cfg.num_workers > 0:
            extra = {
                "prefetch_factor": cfg.prefetch_factor or 2,
                "persistent_workers": cfg.persistent_workers,
            }
        loader = DataLoader(
            self._dataset,
            batch_size=None,
            num_workers=cfg.num_workers,
            pin_memory=cfg.pin_memory,
            **extra,
        )
        if cfg.persistent_workers:
            self._persistent = loader
        return loader

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        if self._state.batches_consumed >= len(self.plan()):
            self.set_epoch(self._state.epoch + 1)
        plan = self.plan()  # computed here so that fresh workers inherit it instead of replanning
        self._dataset.progress[0], self._dataset.progress[1] = (
            plan.epoch,
            self._state.batches_consumed,
        )
        for batch in self._dataloader():
            if isinstance(batch, ValueError):
                raise batch
            self._state.batches_consumed += 1
            yield batch
        if self._state.batches_consumed != len(plan):
            raise AssertionError(
                f"epoch {plan.epoch}: {self._state.batches_consumed} of {len(plan)} batches"
            )
        self.set_epoch(plan.epoch + 1)

    def close(self) -> None:
        """Stop persistent workers and remove this run's stream directories and shm."""
        self._persistent = None
        self.source.close()

    def __enter__(self) -> DataforgeLoader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def build_dataloader(config: LoaderConfig) -> DataforgeLoader:
    """Build the loader for ``config`` (reads all sample lengths once, here)."""
    return DataforgeLoader(config)
