"""A compact PyTorch trainer (pretrain, SFT, DPO, reward, PPO) over the dataforge loader.

Entry points: ``dataforge train STAGE CONFIG.yaml`` (stages:
:data:`trainer.objectives.STAGES`), ``python -m trainer ...`` (also under torchrun), or
:func:`trainer.loop.train` from Python. Names below load lazily,
so that ``dataforge --help`` (which imports ``trainer.cli``) does not import torch.
"""

from __future__ import annotations

import importlib

__all__ = [
    "BatchSource",
    "ListBatchSource",
    "SyntheticBatchSource",
    "TrainResult",
    "TrainerConfig",
    "TrainingError",
    "Transformer",
    "load_config",
    "train",
]

_HOMES = {
    "BatchSource": "trainer.data.sources",
    "ListBatchSource": "trainer.data.sources",
    "SyntheticBatchSource": "trainer.data.sources",
    "TrainResult": "trainer.loop",
    "TrainerConfig": "trainer.config",
    "TrainingError": "trainer.loop",
    "Transformer": "trainer.model.transformer",
    "load_config": "trainer.config",
    "train": "trainer.loop",
}


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module 'trainer' has no attribute {name!r}")
    return getattr(importlib.import_module(_HOMES[name]), name)
