"""How ranks share the model (``distributed``) and the whole-config rules a tp/pp split
imposes (:func:`check_mesh`)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Literal, Protocol

from dataforge.typed_config import ConfigError

if TYPE_CHECKING:
    from trainer.config.model import LoRAConfig, ModelConfig
    from trainer.config.train import EvalConfig, TrainConfig

__all__ = ["DistributedConfig", "MeshChecked", "check_mesh"]


@dataclasses.dataclass(frozen=True)
class DistributedConfig:
    """How ranks share the model (ignored on one process)."""

    strategy: Literal["ddp", "fsdp"] = "ddp"
    """``fsdp`` is FSDP2 (``torch.distributed.fsdp.fully_shard``), one unit per block."""
    fsdp_cpu_offload: bool = False
    """FSDP2: keep sharded parameters, gradients and optimizer state in host memory."""
    fsdp_reshard_after_forward: bool = True
    """FSDP2: free gathered parameters after the forward (less memory, one more all-gather)."""
    timeout_s: int = 1800
    """Process-group timeout (collectives hung longer than this fail the job)."""
    backend: Literal["auto", "nccl", "gloo"] = "auto"
    """Process-group backend; ``auto``: NCCL on GPUs, gloo on CPU."""
    dp: int | None = None
    """Data-parallel ranks (DDP or FSDP2 over them; FSDP2 when tp or pp is above 1); None:
    world size / (tp x pp)."""
    tp: int = 1
    """Tensor-parallel ranks (DTensor): q/k/v and gate/up split by columns, attention
    output and down projections by rows; must divide ``model.n_heads`` and
    ``model.n_kv_heads``. Keep it within a node."""
    pp: int = 1
    """Pipeline ranks (``torch.distributed.pipelining``), ``pp_stages_per_rank`` stages
    each, cut by layer count: the embedding on the first stage, the final norm and output
    layer on the last; each step's ``train.grad_accum_steps`` micro-batches flow through
    them."""
    sequence_parallel: bool = False
    """With tp: split the residual stream (norms, the blocks' inputs and outputs) along
    the sequence across the tp ranks instead of repeating it (less activation memory)."""
    pp_schedule: Literal["1f1b", "gpipe", "interleaved_1f1b"] = "1f1b"
    """Pipeline schedule: one-forward-one-backward (less activation memory), GPipe, or
    interleaved 1F1B (``pp_stages_per_rank`` model chunks per rank, a smaller bubble)."""
    pp_stages_per_rank: int | None = None
    """Pipeline stages (model chunks) each rank holds; rank r holds stages r, r + pp, ...
    of ``pp x pp_stages_per_rank`` stages cut by layer count. Above 1 only with
    ``interleaved_1f1b``; None: 2 with ``interleaved_1f1b``, else 1."""

    def __post_init__(self) -> None:
        if self.timeout_s < 1:
            raise ValueError(f"timeout_s must be >= 1, got {self.timeout_s}")
        for name in ("dp", "tp", "pp", "pp_stages_per_rank"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"distributed.{name}={value}; valid: an integer >= 1")

    def mesh_shape(self, world_size: int) -> tuple[int, int, int]:
        """(pp, dp, tp) for ``world_size`` ranks, outermost first (tp ranks are
        neighbours, so a node holds whole tp groups).

        Raises:
            ConfigError: the ranks do not split into ``dp x tp x pp``.
        """
        split = self.tp * self.pp
        if world_size % split:
            raise ConfigError(
                f"distributed.tp x distributed.pp = {self.tp} x {self.pp} does not divide the "
                f"world size {world_size}; valid: tp x pp a divisor of the number of ranks"
            )
        dp = world_size // split
        if self.dp is not None and self.dp != dp:
            raise ConfigError(
                f"distributed.dp={self.dp} but {world_size} ranks / (tp {self.tp} x pp "
                f"{self.pp}) = {dp}; valid: {dp}, or null to derive it"
            )
        return self.pp, dp, self.tp

    @property
    def stages_per_rank(self) -> int:
        """``pp_stages_per_rank`` with its default resolved."""
        if self.pp_stages_per_rank is not None:
            return self.pp_stages_per_rank
        return 2 if self.pp_schedule == "interleaved_1f1b" else 1

    @property
    def model_parallel(self) -> bool:
        """Tensor or pipeline parallelism is on (the model is split, not only the batch)."""
        return self.tp > 1 or self.pp > 1


class MeshChecked(Protocol):
    """The sections of a trainer config the mesh rules read (``TrainerConfig`` has them;
    naming them here keeps this module below the package that builds the whole config)."""

    distributed: DistributedConfig
    model: ModelConfig
    train: TrainConfig
    lora: LoRAConfig
    eval: EvalConfig


def check_mesh(config: MeshChecked) -> None:
    """The model shapes and features a ``distributed.tp``/``pp`` split cannot serve."""
    dist, model = config.distributed, config.model
    tp, pp = dist.tp, dist.pp
    if model.n_heads % tp or model.kv_heads % tp:
        divisors = [d for d in range(1, model.kv_heads + 1) if not model.kv_heads % d]
        raise ValueError(
            f"distributed.tp={tp} does not divide model.n_heads {model.n_heads} and "
            f"model.n_kv_heads {model.kv_heads}; valid: {', '.join(map(str, divisors))}"
        )
    if dist.sequence_parallel and tp == 1:
        raise ValueError("distributed.sequence_parallel needs distributed.tp > 1; valid: false")
    if pp > model.n_layers:
        raise ValueError(
            f"distributed.pp={pp} > model.n_layers {model.n_layers}; valid: 1 to {model.n_layers}"
        )
    if pp > 1:
        _check_pipeline(config)
    if not dist.model_parallel:
        return
    refused = {
        "train.precision fp16 (no sharded GradScaler)": config.train.precision == "fp16",
        "lora (adapters are not split)": tp > 1 and config.lora.enabled,
        "model.tie_embeddings (first and last stage would share a tensor)": (
            pp > 1 and model.tie_embeddings
        ),
        "eval.streams (held-out passes do not run through the pipeline)": (
            pp > 1 and config.eval.enabled
        ),
        "train.compile": config.train.compile,
    }
    for what, hit in refused.items():
        if hit:
            raise ValueError(f"distributed.tp={tp}/pp={pp} cannot be used with {what}; use 1")


def _check_pipeline(config: MeshChecked) -> None:
    """The stage counts and micro-batch counts a pipeline schedule cannot run."""
    dist, n_layers, accum = config.distributed, config.model.n_layers, config.train.grad_accum_steps
    pp, per_rank, schedule = dist.pp, dist.stages_per_rank, dist.pp_schedule
    if schedule != "interleaved_1f1b" and per_rank != 1:
        raise ValueError(
            f"distributed.pp_stages_per_rank={per_rank} needs distributed.pp_schedule "
            f"interleaved_1f1b, got {schedule}; valid with {schedule}: null or 1"
        )
    if pp * per_rank > n_layers:
        raise ValueError(
            f"distributed.pp x pp_stages_per_rank = {pp} x {per_rank} stages > model.n_layers "
            f"{n_layers}; valid: at most {n_layers} stages"
        )
    if schedule == "1f1b" and accum < pp:
        raise ValueError(
            f"distributed.pp_schedule 1f1b needs train.grad_accum_steps >= distributed.pp "
            f"{pp}, got {accum}; raise it or use gpipe"
        )
    if schedule == "interleaved_1f1b" and accum % pp:
        raise ValueError(
            f"distributed.pp_schedule interleaved_1f1b needs train.grad_accum_steps a multiple "
            f"of distributed.pp {pp}, got {accum}; valid: {pp}, {2 * pp}, {3 * pp}, ..."
        )
