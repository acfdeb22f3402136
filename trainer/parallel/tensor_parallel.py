"""Megatron-style tensor parallelism with DTensor (``parallelize_module``) on a tp mesh.

q/k/v and gate/up are split by output columns (each rank holds ``n_heads / tp`` query and
``kv_heads / tp`` key/value heads; the attention reads its head counts from those widths),
the attention output and down projections by input rows with their outputs all-reduced.
The output layer is split by vocabulary and its logits gathered, so every tp rank computes
the objective's plain loss on full logits (a gathered loss, not a vocabulary-parallel one).

With ``sequence_parallel`` the residual stream between blocks is split along the sequence
instead of repeated on every rank: norms run on each rank's positions
(``SequenceParallel``), the attention and MLP inputs are all-gathered, and the row-split
projections reduce-scatter instead of all-reduce (Korthikanti et al. 2022), saving
activation memory. Without it norms and the embedding are whole on every rank.
"""

from __future__ import annotations

from typing import Any

from torch import nn

__all__ = ["apply_tensor_parallel", "blocks_of"]


def blocks_of(model: nn.Module) -> list[nn.Module]:
    """The transformer blocks of a whole model (a list) or of a pipeline stage (a dict
    keyed by layer index)."""
    blocks = model.blocks
    return list(blocks.values()) if isinstance(blocks, nn.ModuleDict) else list(blocks)


def _block_plan(block: nn.Module, sequence_parallel: bool) -> dict[str, Any]:
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
    )

    plan: dict[str, Any] = {f"attn.{name}": ColwiseParallel() for name in "qkv"}
    plan["mlp.up"] = ColwiseParallel()
    if block.mlp.gate is not None:
        plan["mlp.gate"] = ColwiseParallel()
    if not sequence_parallel:
        return plan | {"attn.proj": RowwiseParallel(), "mlp.down": RowwiseParallel()}
    gather = {"desired_input_layouts": (Replicate(), None, None), "use_local_output": True}
    return plan | {
        "attn_norm": SequenceParallel(),
        "attn": PrepareModuleInput(input_layouts=(Shard(1), None, None), **gather),
        "attn.proj": RowwiseParallel(output_layouts=Shard(1)),
        "mlp_norm": SequenceParallel(),
        "mlp": PrepareModuleInput(
            input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),), use_local_output=True
        ),
        "mlp.down": RowwiseParallel(output_layouts=Shard(1)),
    }


def apply_tensor_parallel(model: nn.Module, tp_mesh: Any, sequence_parallel: bool) -> None:
    """Split ``model`` (a Transformer or a pipeline stage) over ``tp_mesh`` in place (see
    the module docstring)."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        PrepareModuleOutput,
        SequenceParallel,
        parallelize_module,
    )

    tp = tp_mesh.size()
    for block in blocks_of(model):
        parallelize_module(block, tp_mesh, _block_plan(block, sequence_parallel))
        block.attn.n_heads //= tp
        block.attn.kv_heads //= tp
    head, embed = getattr(model, "lm_head", None), getattr(model, "embed", None)
    tied = head is not None and embed is not None and head.weight is embed.weight
    seq = Shard(1) if sequence_parallel else Replicate()
    plan: dict[str, Any] = {}
    if sequence_parallel:
        if embed is not None:  # the embedding stays whole; each rank keeps its positions
            plan["embed"] = PrepareModuleOutput(
                output_layouts=Replicate(), desired_output_layouts=Shard(1)
            )
        if getattr(model, "norm", None) is not None:
            plan["norm"] = SequenceParallel()
        # layers that stay whole (a reward model's score head, a tied output layer) get
        # the whole sequence
        whole = ["score"] if getattr(model, "score", None) is not None else []
        whole += ["lm_head"] if tied else []
        for name in whole:
            plan[name] = PrepareModuleInput(
                input_layouts=(Shard(1),),
                desired_input_layouts=(Replicate(),),
                use_local_output=True,
            )
    if head is not None and not tied:
        plan["lm_head"] = ColwiseParallel(input_layouts=seq, output_layouts=Replicate())
    if plan:
        parallelize_module(model, tp_mesh, plan)
