"""Process group, device, and how the model is wrapped: single, DDP or FSDP2.

Rank and world size come from the environment ``torchrun`` sets (``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``, ``MASTER_ADDR``/``MASTER_PORT``); without them the run is one process.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import os

import torch
import torch.distributed as dist
from torch import nn

from trainer.config import ConfigError, TrainerConfig

__all__ = ["DistEnv", "all_reduce_sum", "grad_sync", "init_distributed", "parallelize"]

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


@dataclasses.dataclass(frozen=True)
class DistEnv:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    owns_group: bool = False
    """True when :func:`init_distributed` created the process group (and so ends it)."""

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def init_distributed(config: TrainerConfig) -> DistEnv:
    """Pick the device and, under torchrun, join the process group.

    Raises:
        ConfigError: ``train.device: cuda`` without a CUDA device.
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    wanted = config.train.device
    if wanted == "cuda" and not torch.cuda.is_available():
        raise ConfigError("train.device is 'cuda' but torch sees no CUDA device")
    if wanted == "cuda" or (wanted == "auto" and torch.cuda.is_available()):
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
    else:
        device = torch.device("cpu")
    owns_group = world > 1 and not dist.is_initialized()
    if owns_group:
        backend = config.distributed.backend
        if backend == "auto":
            backend = "nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(
            backend,
            timeout=datetime.timedelta(seconds=config.distributed.timeout_s),
            device_id=device if device.type == "cuda" else None,
        )
    return DistEnv(rank, world, local, device, owns_group)


def parallelize(
    model: nn.Module, config: TrainerConfig, env: DistEnv, frozen: bool = False
) -> nn.Module:
    """Apply activation checkpointing, compile and DDP/FSDP2 as configured.

    ``frozen`` models (the DPO reference) get no DDP (there is nothing to synchronise)
    and, under FSDP, are sharded to save memory.
    """
    if config.train.activation_checkpointing and not frozen:
        model.activation_checkpointing = True
    if config.train.compile:
        for block in model.blocks:
            block.compile()
    if not env.distributed:
        return model
    if config.distributed.strategy == "ddp":
        if frozen:
            return model
        ids = [env.device.index] if env.device.type == "cuda" else None
        return nn.parallel.DistributedDataParallel(model, device_ids=ids)
    from torch.distributed.fsdp import (
        CPUOffloadPolicy,
        MixedPrecisionPolicy,
        OffloadPolicy,
        fully_shard,
    )

    dtype = DTYPES[config.train.precision]
    kwargs = dict(
        mp_policy=MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32),
        offload_policy=CPUOffloadPolicy()
        if config.distributed.fsdp_cpu_offload
        else OffloadPolicy(),
        reshard_after_forward=config.distributed.fsdp_reshard_after_forward,
    )
    for block in model.blocks:
        fully_shard(block, **kwargs)
    fully_shard(model, **kwargs)
    return model


def unwrap(model: nn.Module) -> nn.Module:
    """The Transformer under a DDP wrapper (FSDP2 modules are the model itself)."""
    return model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model


def grad_sync(model: nn.Module, sync: bool) -> contextlib.AbstractContextManager:
    """Skip the gradient all-reduce on all but the last micro-batch of a step."""
    if isinstance(model, nn.parallel.DistributedDataParallel):
        return contextlib.nullcontext() if sync else model.no_sync()
    if hasattr(model, "set_requires_gradient_sync"):  # FSDP2
        model.set_requires_gradient_sync(sync)
    return contextlib.nullcontext()


def all_reduce_sum(values: torch.Tensor, env: DistEnv) -> torch.Tensor:
    """Sum a small float64 tensor over ranks (no-op on one process)."""
    if env.distributed:
        dist.all_reduce(values, op=dist.ReduceOp.SUM)
    return values


def barrier(env: DistEnv) -> None:
    if env.distributed:
        dist.barrier()
