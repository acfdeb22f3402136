"""Pipeline parallelism on the mesh's ``pp`` dimension (``torch.distributed.pipelining``).

The model is cut by layer count (:func:`stage_layers`) into ``pp x pp_stages_per_rank``
stages: stage 0 holds the embedding and its blocks, the last stage its blocks plus the
final norm and output layer; rank r holds stages r, r + pp, ... (one with ``1f1b`` and
``gpipe``, several with ``interleaved_1f1b``). A stage keeps the whole model's parameter
names (``blocks.<i>`` of the layers it holds), and a rank's stages are one module
(:class:`RankStages`) to the optimizer, checkpoints (distributed checkpointing,
:mod:`trainer.checkpoint.checkpointer`) and exports, which so see one model whatever the cut. The
step's ``train.grad_accum_steps`` micro-batches are the pipeline's micro-batches, run by
``Schedule1F1B``, ``ScheduleGPipe`` or ``ScheduleInterleaved1F1B``; the loss of each is
the objective's summed loss times the same global scale the unpipelined step uses, so the
gradients equal those of one process. Positions travel to every stage as a keyword input;
only hidden states pass between stages.

A pipeline stage needs the same shape for every micro-batch of a step, so the step's
micro-batches are padded to its widest and tallest one (padding carries no targets and
sits after every real token, so no loss or gradient changes); a step of another shape gets
its own stage and schedule (built once per shape, shapes are few with a fixed batch plan).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from trainer.config import TrainerConfig
from trainer.model.transformer import (
    Transformer,
    block_inputs,
    positions_from_cu_seqlens,
    run_blocks,
)
from trainer.objectives import Objective
from trainer.objectives.losses import IGNORE_INDEX
from trainer.parallel.distributed import DistEnv, parallelize

__all__ = [
    "Pipeline",
    "RankStages",
    "StageModule",
    "build_pipeline",
    "split_stages",
    "stage_layers",
]

Batch = dict[str, torch.Tensor]


def stage_layers(n_layers: int, stages: int, stage: int) -> range:
    """The blocks of ``stage``: equal runs in order, the first ``n_layers % stages``
    stages one block longer."""
    base, extra = divmod(n_layers, stages)
    start = stage * base + min(stage, extra)
    return range(start, start + base + (1 if stage < extra else 0))


class StageModule(nn.Module):
    """Blocks ``layers`` of a :class:`Transformer` (with its embedding on the first stage
    and its norm and output layer on the last): ids or hidden states -> hidden states or
    logits."""

    def __init__(self, model: Transformer, layers: range, is_first: bool, is_last: bool) -> None:
        super().__init__()
        self.config = model.config
        self.activation_checkpointing = model.activation_checkpointing
        self.embed = model.embed if is_first else None
        self.blocks = nn.ModuleDict({str(i): model.blocks[i] for i in layers})
        self.norm = model.norm if is_last else None
        self.lm_head = model.lm_head if is_last else None
        self.register_buffer("rope", model.rope, persistent=False)
        self.packed = False
        """Rows of this step hold several sequences (set by :class:`Pipeline`)."""

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        dtype = next(self.parameters()).dtype
        rope, layout = block_inputs(
            self.config, self.rope, position_ids, dtype, position_ids, None, self.packed
        )
        if self.embed is not None:
            x = self.embed(x)
        checkpointing = self.activation_checkpointing and self.training
        x = run_blocks(self.blocks.values(), x, rope, layout, checkpointing)
        if self.lm_head is not None:
            x = self.lm_head(self.norm(x))
        return x


def split_stages(model: Transformer, env: DistEnv, per_rank: int) -> list[StageModule]:
    """This rank's stages of ``model`` (stages ``pp_rank + k * pp``); the other stages'
    blocks are dropped."""
    total = env.pp * per_rank
    return [
        StageModule(model, stage_layers(model.config.n_layers, total, i), i == 0, i == total - 1)
        for i in range(env.pp_rank, total, env.pp)
    ]


class RankStages(nn.Module):
    """A rank's stages as one module with the whole model's parameter names (``embed``,
    ``blocks.<i>``, ``norm``, ``lm_head`` where held): what the optimizer, gradient
    clipping, checkpoints and exports see. The schedule runs the stages themselves."""

    def __init__(self, stages: list[StageModule]) -> None:
        super().__init__()
        self.stages = list(stages)  # a plain list: not submodules, so no second name
        self.embed = stages[0].embed
        self.blocks = nn.ModuleDict({k: b for s in stages for k, b in s.blocks.items()})
        self.norm = stages[-1].norm
        self.lm_head = stages[-1].lm_head

    def train(self, mode: bool = True) -> RankStages:
        super().train(mode)
        for stage in self.stages:
            stage.train(mode)
        return self


def build_pipeline(
    model: Transformer, config: TrainerConfig, env: DistEnv, objective: Objective
) -> tuple[nn.Module, Pipeline]:
    """This rank's stages of ``model``, each parallelized (tp, FSDP2 over dp), as the
    module the optimizer and checkpoints use, and the pipeline that runs them."""
    stages = split_stages(model, env, config.distributed.stages_per_rank)
    stages = [parallelize(stage, config, env) for stage in stages]
    held = stages[0] if len(stages) == 1 else RankStages(stages)
    return held, Pipeline(stages, config, env, objective)


def _padded(batch: Batch, rows: int, width: int) -> Batch:
    """``batch`` as (``rows``, ``width``) tensors: ids, labels (-100 on padding) and
    positions (0 on padding: a padded position starts a sequence of its own)."""
    ids, labels = batch["input_ids"], batch["labels"]
    b, t = ids.shape
    position_ids = batch.get("position_ids")
    if batch.get("cu_seqlens") is not None:
        position_ids = positions_from_cu_seqlens(batch["cu_seqlens"], b, t)
    elif position_ids is None:
        position_ids = torch.arange(t, device=ids.device).expand(b, t)

    def pad(x: torch.Tensor, value: int) -> torch.Tensor:
        out = x.new_full((rows, width), value)
        out[:b, :t] = x
        return out

    return {
        "input_ids": pad(ids, 0),
        "labels": pad(labels, IGNORE_INDEX),
        "position_ids": pad(position_ids, 0),
    }


class Pipeline:
    """Runs a training step's micro-batches through this rank's stage (forward and
    backward); :meth:`step` returns the summed loss on the last stage, 0 elsewhere."""

    def __init__(
        self,
        stages: list[nn.Module],
        config: TrainerConfig,
        env: DistEnv,
        objective: Objective,
    ) -> None:
        self.stages, self.config, self.env = stages, config, env
        self.objective = objective
        self.schedules: dict[tuple[int, int], object] = {}
        self.scale = 1.0
        self.sums: list[torch.Tensor] = []

    def _loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        loss_sum = self.objective.pipeline_loss(logits, labels)
        self.sums.append(loss_sum.detach().double())
        return loss_sum * self.scale

    def _schedule(self, shape: tuple[int, int]) -> object:
        if shape not in self.schedules:
            from torch.distributed.pipelining import (
                PipelineStage,
                Schedule1F1B,
                ScheduleGPipe,
                ScheduleInterleaved1F1B,
            )

            env, total = self.env, self.env.pp * len(self.stages)
            group = env.mesh["pp"].get_group()
            stages = [
                PipelineStage(module, env.pp_rank + k * env.pp, total, env.device, group=group)
                for k, module in enumerate(self.stages)
            ]
            kind = self.config.distributed.pp_schedule
            n_micro = self.config.train.grad_accum_steps
            if kind == "interleaved_1f1b":
                schedule: object = ScheduleInterleaved1F1B(
                    stages, n_micro, loss_fn=self._loss, scale_grads=False
                )
            else:
                single = Schedule1F1B if kind == "1f1b" else ScheduleGPipe
                schedule = single(stages[0], n_micro, loss_fn=self._loss, scale_grads=False)
            self.schedules[shape] = schedule
        return self.schedules[shape]

    def step(
        self,
        batches: list[Batch],
        scale: float,
        autocast: Callable[[], object],
    ) -> torch.Tensor:
        """Forward and backward of ``batches`` (on the device), the loss scaled by
        ``scale``; the unscaled summed loss (float64) on the last stage, else 0."""
        rows = max(b["input_ids"].shape[0] for b in batches)
        width = max(b["input_ids"].shape[1] for b in batches)
        micro = [_padded(b, rows, width) for b in batches]
        for stage in self.stages:
            stage.packed = any(b.get("cu_seqlens") is not None for b in batches)
        self.scale, self.sums = scale, []
        first, last = self.env.pp_rank == 0, self.env.pp_rank == self.env.pp - 1
        with autocast():
            self._schedule((rows, width)).step(
                arg_mbs=[(m["input_ids"],) for m in micro] if first else None,
                kwarg_mbs=[{"position_ids": m["position_ids"]} for m in micro],
                target_mbs=[m["labels"] for m in micro] if last else None,
                return_outputs=False,
            )
        total = torch.zeros((), dtype=torch.float64, device=self.env.device)
        if not last:
            return total
        # A new stage's first step also runs the loss once to infer shapes: the step's
        # own losses are the last ones.
        return total + sum(self.sums[-len(micro) :])
