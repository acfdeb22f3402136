"""Process group, device mesh, and how the model is split: single, DDP, FSDP2, tensor
parallel.

Rank and world size come from the environment ``torchrun`` sets (``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``, ``MASTER_ADDR``/``MASTER_PORT``); without them the run is one process.
With ``distributed.tp`` or ``pp`` above 1 the ranks form one device mesh
(``init_device_mesh``, dims ``pp``, ``dp``, ``tp``, outermost first): tensor parallelism
(DTensor ``parallelize_module``) on ``tp``, pipeline stages (:mod:`trainer.parallel.pipeline`) on
``pp``, FSDP2 on ``dp`` (a mesh with dp above 1 needs ``strategy: fsdp``). Every rank of
a ``dp`` group reads the same batches.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import os
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from trainer.config import ConfigError, TrainerConfig
from trainer.parallel.tensor_parallel import apply_tensor_parallel, blocks_of

__all__ = [
    "DistEnv",
    "all_reduce_sum",
    "clip_grad_norm",
    "grad_sync",
    "init_distributed",
    "parallelize",
]

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


@dataclasses.dataclass(frozen=True)
class DistEnv:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    owns_group: bool = False
    """True when :func:`init_distributed` created the process group (and so ends it)."""
    mesh: Any = None
    """The ``(pp, dp, tp)`` DeviceMesh when tp or pp is above 1; None otherwise."""
    dp_rank: int = -1
    """This rank's data-parallel index (which share of the batches it reads); -1: rank."""
    dp: int = 0
    """Data-parallel ranks; 0: the world size."""
    tp_rank: int = 0
    tp: int = 1
    pp_rank: int = 0
    pp: int = 1

    def __post_init__(self) -> None:
        if self.dp_rank < 0:
            object.__setattr__(self, "dp_rank", self.rank)
        if self.dp == 0:
            object.__setattr__(self, "dp", self.world_size)

    @property
    def counts_batches(self) -> bool:
        """This rank's batch sums (targets, tokens, FLOPs) stand for its dp group (the
        group's other ranks hold the same batches)."""
        return self.tp_rank == 0 and self.pp_rank == 0

    @property
    def counts_losses(self) -> bool:
        """This rank's loss sums stand for its dp group (tp rank 0 of the last stage)."""
        return self.tp_rank == 0 and self.pp_rank == self.pp - 1

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
    pp, dp, tp = config.distributed.mesh_shape(world)  # before any process group starts
    if config.distributed.model_parallel and dp > 1 and config.distributed.strategy == "ddp":
        # DDP holds no DTensor weights, and its reducer breaks under the pipeline
        # schedules' split backward passes.
        raise ConfigError(
            f"distributed.strategy ddp cannot run with tp={tp}/pp={pp} over dp={dp} ranks; "
            "valid with tp or pp > 1: fsdp"
        )
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
    if not config.distributed.model_parallel:
        return DistEnv(rank, world, local, device, owns_group)
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh(device.type, (pp, dp, tp), mesh_dim_names=("pp", "dp", "tp"))
    coords = dict(pp_rank=rank // (dp * tp), dp_rank=rank // tp % dp, tp_rank=rank % tp)
    return DistEnv(rank, world, local, device, owns_group, mesh, dp=dp, tp=tp, pp=pp, **coords)


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
    if env.mesh is not None:
        if env.tp > 1:
            apply_tensor_parallel(model, env.mesh["tp"], config.distributed.sequence_parallel)
        if env.dp == 1:
            return model
    if config.distributed.strategy == "ddp":  # never on a mesh with dp > 1 (refused)
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
        mesh=env.mesh["dp"] if env.mesh is not None else None,
    )
    for block in blocks_of(model):
        fully_shard(block, **kwargs)
    fully_shard(model, **kwargs)
    return model


@torch.no_grad()
def clip_grad_norm(model: nn.Module, max_norm: float, env: DistEnv) -> float:
    """Clip the global gradient norm to ``max_norm``; returns the norm before clipping.

    Without a mesh this is ``torch.nn.utils.clip_grad_norm_``. With one, gradients are
    DTensors (sharded over tp and FSDP's dp) or whole tensors (the same on every rank of
    their group): each contributes its full norm, and pipeline stages add theirs up.
    """
    params = [p for p in model.parameters() if p.grad is not None]
    if env.mesh is None:
        return float(torch.nn.utils.clip_grad_norm_(params, max_norm))
    from torch.distributed.tensor import DTensor

    squares = torch.zeros((), dtype=torch.float64, device=env.device)
    for param in params:
        norm = torch.linalg.vector_norm(param.grad.float())
        if isinstance(norm, DTensor):
            norm = norm.full_tensor()
        squares += norm.double() ** 2
    if env.pp > 1:
        dist.all_reduce(squares, group=env.mesh["pp"].get_group())
    total = float(squares.sqrt())
    coef = max_norm / (total + 1e-6)
    if coef < 1.0:
        for param in params:
            param.grad.mul_(coef)
    return total


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
