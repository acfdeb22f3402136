"""Training objectives (one component each), the loss functions they use, and the stage
registry (:mod:`trainer.objectives.stages`).

``build_objective(stage, config)`` gives the objective of a stage; see
:mod:`trainer.objectives.base` for the interface. A new stage is one objective module plus
one :data:`STAGES` entry. The objective classes and losses load on first use, so the
registry alone (the CLI's stage list) loads no torch.
"""

from __future__ import annotations

from dataforge.lazy import lazy_exports
from trainer.objectives.stages import STAGES, Stage, batch_stages, build_objective

__all__ = [
    "DPO",
    "IGNORE_INDEX",
    "SFT",
    "STAGES",
    "CausalLM",
    "DPOStats",
    "Objective",
    "Pretrain",
    "Reward",
    "Stage",
    "batch_stages",
    "build_objective",
    "causal_lm_loss_sum",
    "count_targets",
    "dpo_loss",
    "sequence_logps",
]

_HOMES = {
    "DPO": "trainer.objectives.dpo",
    "IGNORE_INDEX": "trainer.objectives.losses",
    "SFT": "trainer.objectives.causal_lm",
    "CausalLM": "trainer.objectives.causal_lm",
    "DPOStats": "trainer.objectives.losses",
    "Objective": "trainer.objectives.base",
    "Pretrain": "trainer.objectives.causal_lm",
    "Reward": "trainer.objectives.reward",
    "causal_lm_loss_sum": "trainer.objectives.losses",
    "count_targets": "trainer.objectives.losses",
    "dpo_loss": "trainer.objectives.losses",
    "sequence_logps": "trainer.objectives.losses",
}
__getattr__ = lazy_exports(__name__, _HOMES)
