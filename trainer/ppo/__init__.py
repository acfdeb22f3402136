"""RLHF with PPO: ``dataforge train ppo CONFIG`` (:func:`trainer.ppo.loop.train_ppo`).

* :mod:`trainer.ppo.losses`: GAE, whitening, clipped policy and value losses, KL control;
* :mod:`trainer.ppo.rollout`: sampling responses and scoring them with every model;
* :mod:`trainer.ppo.step`: one step (rollout, then PPO epochs of mini-batch updates);
* :mod:`trainer.ppo.prompts`: prompts from MDS shards (SFT/DPO format) or JSONL;
* :mod:`trainer.ppo.loop`: models, checkpoints, metrics and export.
"""

from __future__ import annotations

from trainer.ppo.loop import PPOResult, check_ppo_config, train_ppo

__all__ = ["PPOResult", "check_ppo_config", "train_ppo"]
