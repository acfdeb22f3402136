"""Distributed sharding of an epoch's batch plan.

Every rank computes the same global plan, so no communication is needed: the plan is made
divisible by the world size by splitting batches (a part of a batch never exceeds the
budget: fewer rows, no longer padded length), then rank ``r`` takes batches
``r, r + W, r + 2W, ...``. Each sample is therefore in exactly one batch of exactly one
rank, and all ranks get the same number of batches (DDP needs that, or it hangs).
"""

from __future__ import annotations

__all__ = ["equalize", "rank_share"]

Batch = list[list[int]]


def _split(batch: Batch) -> tuple[Batch, Batch] | None:
    if len(batch) >= 2:
        half = len(batch) // 2
        return batch[:half], batch[half:]
    if len(batch[0]) >= 2:  # one packed row: split its documents into two rows
        half = len(batch[0]) // 2
        return [batch[0][:half]], [batch[0][half:]]
    return None


def equalize(batches: list[Batch], world_size: int) -> list[Batch]:
    """Split the largest batches until the batch count is a multiple of ``world_size``.

    Raises:
        ValueError: too few samples to give every rank a batch of its own.
    """
    batches = list(batches)
    while len(batches) % world_size:
        sizes = [sum(len(row) for row in b) for b in batches]
        order = sorted(range(len(batches)), key=lambda i: -sizes[i])
        for i in order:
            parts = _split(batches[i])
            if parts is not None:
                batches[i : i + 1] = list(parts)
                break
        else:
            raise ValueError(
                f"cannot give {world_size} ranks the same number of batches: the epoch has "
                f"{len(batches)} single-sample batches; add data or lower the world size"
            )
    return batches


def rank_share(batches: list[Batch], rank: int, world_size: int) -> list[Batch]:
    """The batches of ``rank`` (every ``world_size``-th, starting at ``rank``)."""
    if len(batches) % world_size:
        raise AssertionError("equalize() the plan first")
    return batches[rank::world_size]
