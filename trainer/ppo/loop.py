"""``dataforge train ppo``: :func:`train_ppo`, the RLHF stage's loop.

The policy and the value model train; the reference (the policy's starting weights) and
the reward model are frozen. A step is one rollout of ``ppo.rollout_batch_size`` prompts
and its updates (:func:`trainer.ppo.step.ppo_step`). Checkpoints (:mod:`trainer.checkpoint.checkpointer`:
both trained models, the optimizer, the schedule, RNG, the prompt position and the KL
coefficient) and the export of the policy (:mod:`trainer.checkpoint.export`) are those of the other
stages, as are ``metrics.jsonl`` and the console. One process: the rollout is sampled on
one device.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import time
from pathlib import Path
from typing import Any

import torch

from trainer.checkpoint.checkpointer import Checkpointer, check_checkpoint_dir
from trainer.checkpoint.export import check_export_dir, export_weights
from trainer.config import ConfigError, TrainerConfig
from trainer.control.optim import build_optimizer, lr_factor
from trainer.control.stopping import Interrupted, StopRequest
from trainer.model.pretrained import load_exported, resolve_model
from trainer.model.transformer import Transformer
from trainer.parallel.distributed import init_distributed
from trainer.ppo.losses import AdaptiveKLController
from trainer.ppo.prompts import build_prompt_source
from trainer.ppo.rollout import PolicyAndValue
from trainer.ppo.step import PPORun, ppo_step
from trainer.telemetry.console import Console
from trainer.telemetry.metrics import MetricsWriter, memory_stats

__all__ = ["PPOResult", "check_ppo_config", "train_ppo"]

STAGE = "ppo"


@dataclasses.dataclass
class PPOResult:
    steps: int
    records: list[dict[str, Any]]
    """Metrics of every step of this invocation, in order."""
    checkpoint: Path | None
    export_dir: Path | None


def check_ppo_config(config: TrainerConfig) -> None:
    """What the ppo stage needs beyond a valid config, checked before any work.

    Raises:
        ConfigError: a missing policy or reward model, or an unsupported option.
    """
    ppo = config.ppo
    if not config.init_from:
        raise ConfigError("ppo needs init_from: the SFT export the policy and reference start from")
    if not ppo.reward_model:
        raise ConfigError("ppo.reward_model: required (the export of dataforge train reward)")
    for key, path in (("init_from", config.init_from), ("ppo.reward_model", ppo.reward_model)):
        if not (Path(path) / "config.json").is_file():
            raise ConfigError(f"{key} {path}: not an export directory (no config.json)")
    if ppo.prompts is not None and not Path(ppo.prompts).is_file():
        raise ConfigError(f"ppo.prompts {ppo.prompts}: no such file")
    if config.train.precision == "fp16" or config.lora.enabled:
        raise ConfigError("ppo supports train.precision bf16 or fp32 and no lora (lora.r: 0)")
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise ConfigError("ppo runs on one process (its rollout is sampled on one device)")


def _stop_ids(config: TrainerConfig) -> tuple[int, ...]:
    """``ppo.stop_token_ids``, else the ``eos_token_id`` of the policy's generation config."""
    if config.ppo.stop_token_ids is not None:
        return config.ppo.stop_token_ids
    path = Path(config.init_from) / "generation_config.json"
    try:
        eos = json.loads(path.read_text(encoding="utf-8")).get("eos_token_id")
    except (OSError, ValueError):
        eos = None
    ids = eos if isinstance(eos, list) else [eos] if isinstance(eos, int) else []
    if not ids or not all(isinstance(i, int) for i in ids):
        raise ConfigError(f"ppo.stop_token_ids: not set and {path} names no eos_token_id")
    return tuple(ids)


def _with_head(model: Transformer, weights: dict[str, torch.Tensor] | None = None) -> Transformer:
    """``model`` with a scalar head (zero, or from ``weights``); its LM head frozen."""
    model.add_score_head()
    if weights is not None:
        model.load_state_dict(weights)
    if not model.config.tie_embeddings:  # no LM loss reaches it
        model.lm_head.requires_grad_(False)
    return model


def _build_models(config: TrainerConfig, device: torch.device) -> tuple[torch.nn.Module, ...]:
    """(policy + value, frozen reference, frozen reward model).

    Raises:
        ConfigError: the reward export has no score head or another vocabulary.
    """
    torch.manual_seed(config.train.seed)
    _, weights = load_exported(config.init_from)
    weights.pop("score.weight", None)  # a reward model's export as the policy: its LM
    policy = Transformer(config.model)
    policy.load_state_dict(weights)
    reward_config, reward_weights = load_exported(config.ppo.reward_model)
    where = f"ppo.reward_model {config.ppo.reward_model}"
    if "score.weight" not in reward_weights:
        raise ConfigError(f"{where}: no score.weight (not an export of dataforge train reward)")
    if reward_config.vocab_size != config.model.vocab_size:
        raise ConfigError(
            f"{where}: vocabulary {reward_config.vocab_size} != the policy's "
            f"{config.model.vocab_size} (they must share the tokenizer)"
        )
    reward = _with_head(Transformer(reward_config), reward_weights)
    reward.eval().requires_grad_(False)
    if config.ppo.value_init == "reward":
        value = _with_head(Transformer(reward_config), reward_weights)
    else:
        value = _with_head(copy.deepcopy(policy))
    reference = copy.deepcopy(policy).eval().requires_grad_(False)
    joint = PolicyAndValue(policy, value)
    return joint.to(device), reference.to(device), reward.to(device)


def _max_prompt_len(config: TrainerConfig, reward: torch.nn.Module) -> int:
    ppo = config.ppo
    room = min(config.model.max_seq_len, reward.config.max_seq_len) - ppo.max_new_tokens
    limit = ppo.max_prompt_len if ppo.max_prompt_len is not None else room
    if limit < 1 or limit > room:
        raise ConfigError(
            f"ppo.max_prompt_len {limit} + ppo.max_new_tokens {ppo.max_new_tokens} must fit "
            f"the models' max_seq_len {room + ppo.max_new_tokens}"
        )
    return limit


def _setup(config: TrainerConfig, device: torch.device) -> PPORun:
    joint, reference, reward = _build_models(config, device)
    optimizer = build_optimizer(joint, config.optim, device)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lr_factor(config.optim, config.train.max_steps)
    )
    kl = AdaptiveKLController(config.ppo.kl_coef, config.ppo.target_kl, config.ppo.kl_horizon)
    sampling = torch.Generator(device).manual_seed(config.train.seed)
    shuffling = torch.Generator().manual_seed(config.train.seed + 1)
    stop_ids = _stop_ids(config)
    return PPORun(
        config, joint, reference, reward, optimizer, scheduler, kl, stop_ids, sampling, shuffling
    )


def train_ppo(
    config: TrainerConfig, resume: str = "auto", prompts: Any = None, stop_after: int | None = None
) -> PPOResult:
    """Train ``config``'s policy with PPO for ``train.max_steps`` rollouts.

    Args:
        resume: ``auto`` continues from the latest checkpoint if any; ``scratch`` moves
            existing checkpoints aside and starts anew.
        prompts: a prompt source to use instead of ``ppo.prompts``/``data.loader``.
        stop_after: return after this many steps of this call (simulates a kill).

    Raises:
        ConfigError: an invalid config, models or prompts (before any step).
    """
    if resume not in ("auto", "scratch"):
        raise ConfigError(f"resume {resume!r}; valid: auto, scratch")
    check_ppo_config(config)
    config = resolve_model(config)
    check_checkpoint_dir(Path(config.checkpoint.dir))
    export_dir = Path(config.checkpoint.export_dir or Path(config.checkpoint.dir) / "export")
    check_export_dir(export_dir)
    env = init_distributed(config)
    run = _setup(config, env.device)
    if prompts is None:
        prompts = build_prompt_source(config, _max_prompt_len(config, run.reward))
    try:
        return _train(run, env, prompts, resume, stop_after, export_dir)
    finally:
        if hasattr(prompts, "close"):
            prompts.close()


def _summary(config: TrainerConfig, run: PPORun) -> str:
    ppo = config.ppo
    params = run.model.policy.num_params() / 1e6
    updates = ppo.ppo_epochs * ppo.rollout_batch_size // ppo.mini_batch_size
    return (
        f"[trainer] ppo: {params:,.1f}M-parameter policy, value model, frozen reference and "
        f"reward model; {ppo.rollout_batch_size} prompts x up to {ppo.max_new_tokens} new "
        f"tokens per step, {updates} updates per step; {config.train.max_steps} steps; "
        f"stop ids {list(run.stop_ids)}"
    )


def _restore(run: PPORun, ckpt: Checkpointer, objects: dict, prompts: Any, resume: str):
    """The loop counters (and the latest checkpoint, if resumed from one)."""
    loop = {"step": 0, "tokens": 0, "kl_coef": run.config.ppo.kl_coef}
    latest = ckpt.latest() if resume == "auto" else None
    if resume == "scratch":
        ckpt.supersede_existing()
    if latest is not None:
        loop |= ckpt.load(latest, STAGE, objects, prompts, run.config.to_json())
    run.kl.coef = loop["kl_coef"]
    if "sampling_rng" in loop:
        run.sampling.set_state(loop["sampling_rng"])
        run.shuffling.set_state(loop["shuffling_rng"])
    return loop, latest


def _account(run: PPORun, loop: dict, out: dict, prompts: Any, times: tuple) -> dict:
    """Advance the loop counters by one step; the step's metrics record."""
    elapsed, t_data, rows = times
    loop["step"] += 1
    loop["tokens"] += int(out.pop("tokens"))
    loop["kl_coef"] = run.kl.coef
    loop["sampling_rng"] = run.sampling.get_state()
    loop["shuffling_rng"] = run.shuffling.get_state()
    return out | {
        "step": loop["step"],
        "applied": 1.0,
        "tokens_seen": loop["tokens"],
        "prompts_dropped": prompts.dropped,
        "step_time_s": elapsed,
        "tokens_per_s": out["response_length"] * rows / elapsed,
        "data_wait_frac": t_data / elapsed,
    }


def _train(
    run: PPORun, env: Any, prompts: Any, resume: str, stop_after: int | None, export_dir: Path
) -> PPOResult:
    config = run.config
    ckpt = Checkpointer(config.checkpoint, env)
    scaler = torch.amp.GradScaler(env.device.type, enabled=False)  # checkpoint layout
    objects = {"model": run.model, "optimizer": run.optimizer, "scheduler": run.scheduler}
    objects["scaler"] = scaler
    loop, latest = _restore(run, ckpt, objects, prompts, resume)
    console = Console(config, STAGE, env.is_main)
    console.start(_summary(config, run), 1, str(env.device), latest, loop["step"])
    metrics = MetricsWriter(config.run_dir, env.is_main, config.train.tensorboard, loop["step"])
    records, saved, start_step = [], None, loop["step"]
    stop = StopRequest().install()
    try:
        while loop["step"] < config.train.max_steps:
            if stop_after is not None and loop["step"] - start_step >= stop_after:
                return PPOResult(loop["step"], records, saved, None)
            t0 = time.perf_counter()
            batch = prompts.take(config.ppo.rollout_batch_size)
            t_data = time.perf_counter() - t0
            out = ppo_step(run, batch)
            times = (time.perf_counter() - t0, t_data, len(batch))
            record = _account(run, loop, out, prompts, times) | memory_stats(env.device)
            metrics.write(record)
            console.step(record)
            records.append(record)
            done = loop["step"] >= config.train.max_steps
            signame = stop.requested(env)
            if signame is not None or loop["step"] % config.checkpoint.interval == 0 or done:
                objects["loop"], objects["config"] = dict(loop), config.to_json()
                saved = ckpt.save(loop["step"], STAGE, objects, prompts)
                console.checkpoint(saved, loop["step"])
            if signame is not None:
                stopped = Interrupted(signame, loop["step"], saved)
                print(f"[trainer] {stopped}", flush=True)
                raise stopped
    finally:
        stop.restore()
        metrics.close()
    info = {"stage": STAGE, "step": loop["step"], "tokens_seen": loop["tokens"]}
    export_weights(
        run.model.policy, config, env, export_dir, info | {"tokenizer": config.tokenizer}
    )
    console.export(export_dir)
    console.finish(loop["step"], loop["tokens"], 0)
    return PPOResult(loop["step"], records, saved, export_dir)
