"""Time of DDP's gradient all-reduce per optimizer step: ``nccl_all_reduce_time``.

A DDP communication hook wraps PyTorch's reference ``allreduce_hook`` (same division by
the world size, then the same all-reduce, so gradients and losses are unchanged) and times
each gradient bucket from the hook call to the completion of its future; the step's value is
the sum over buckets, in seconds. Buckets overlap the backward pass and each other, so the
sum can exceed the wall time the collective adds to a step; it is this rank's (rank 0's in
the exports) own time, waiting for slower ranks included.

The name is the seed's: it is used for gloo on CPU too. On CUDA the bucket ends are CUDA
events read after the step (the future of an NCCL all-reduce completes when the kernel is
enqueued, not when it ends). Only DDP is timed: FSDP2's reduce-scatter and a single process
have no value (the metric is absent, not 0), and nothing is registered for them.
"""

# No ``from __future__ import annotations``: DDP checks the hook's annotations as objects.
import time

import torch
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

__all__ = ["AllReduceTimer", "time_gradient_all_reduce"]


class AllReduceTimer:
    """The comm-hook state: bucket times collected since the last :meth:`take`."""

    def __init__(self, cuda: bool, group: torch.distributed.ProcessGroup | None) -> None:
        self.cuda = cuda
        self.group = group
        self.seconds = 0.0
        self.events: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []

    def hook(self, bucket: torch.distributed.GradBucket) -> torch.futures.Future[torch.Tensor]:
        if self.cuda:
            start = torch.cuda.Event(enable_timing=True)
            start.record()
        else:
            t0 = time.perf_counter()

        def done(fut: torch.futures.Future[torch.Tensor]) -> torch.Tensor:
            if self.cuda:  # runs on a stream that waits for the all-reduce
                end = torch.cuda.Event(enable_timing=True)
                end.record()
                self.events.append((start, end))
            else:
                self.seconds += time.perf_counter() - t0
            return fut.value()

        return allreduce_hook(self.group, bucket).then(done)

    def take(self) -> float:
        """Seconds of all-reduce since the last call (waits for pending CUDA events)."""
        seconds = self.seconds + sum(s.elapsed_time(e) for s, e in self._synced()) / 1e3
        self.seconds, self.events = 0.0, []
        return seconds

    def _synced(self) -> list[tuple[torch.cuda.Event, torch.cuda.Event]]:
        for _, end in self.events:
            end.synchronize()
        return self.events


def _hook(
    timer: AllReduceTimer, bucket: torch.distributed.GradBucket
) -> torch.futures.Future[torch.Tensor]:
    return timer.hook(bucket)


def time_gradient_all_reduce(model: nn.Module) -> AllReduceTimer | None:
    """Register the timing hook on a DDP model; None (nothing registered) otherwise."""
    if not isinstance(model, nn.parallel.DistributedDataParallel):
        return None
    timer = AllReduceTimer(next(model.parameters()).is_cuda, model.process_group)
    model.register_comm_hook(timer, _hook)
    return timer
