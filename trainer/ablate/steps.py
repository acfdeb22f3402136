"""The ablation's work, step by step: run each variant's pipeline, tokenize the raw
evaluation sets, train one model per variant and seed, score its checkpoints.

Pipelines run as ``dataforge run`` processes, exactly as a user runs them (their own Ray,
their own resume rules); models train through the trainer's ``train``. Each step resumes:
a pipeline re-run into its folder resumes or finds itself done, training resumes from its
latest checkpoint, and a checkpoint's scores are kept once computed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from dataforge.config import load_pipeline
from dataforge.typed_config import ConfigError
from trainer.ablate.config import AblationConfig, EvalSet, Variant
from trainer.ablate.scoring import BatchLosses, score_checkpoint
from trainer.config import TrainerConfig, config_from_mapping

__all__ = [
    "PipelineFailed",
    "check_variants",
    "eval_pipeline_spec",
    "eval_points",
    "losses_of",
    "mds_tokens",
    "recipe_probe",
    "run_eval_pipeline",
    "run_variant_pipeline",
    "score_run",
    "steps_for_budget",
    "timing_ledger",
    "train_run",
    "trainer_config",
    "variant_overrides",
    "write_pipeline_file",
]

Log = Callable[[str], None]


class PipelineFailed(RuntimeError):
    """A variant's or an evaluation set's ``dataforge run`` exited non-zero."""


def _cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@contextlib.contextmanager
def timing_ledger(path: Path, step: str) -> Iterator[dict[str, float]]:
    """Wall and CPU seconds of one step, summed over every attempt in ``path`` (JSON).

    A resumed ablation reports the time the work took across its attempts, not only the
    last attempt's (which finds most work done). An attempt that raises (Ctrl-C, SIGTERM,
    a failure) is counted too; one killed with SIGKILL is not. The dict it yields holds the
    totals (``STEP_wall_s``, ``STEP_cpu_s``) once the block has ended.
    """
    t0, cpu0 = time.perf_counter(), _cpu_seconds()
    totals: dict[str, float] = {}
    try:
        yield totals
    finally:
        old = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
        for unit, spent in (("wall", time.perf_counter() - t0), ("cpu", _cpu_seconds() - cpu0)):
            key = f"{step}_{unit}_s"
            totals[key] = round(float(old.get(key, 0.0)) + spent, 3)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        tmp.write_text(json.dumps({**old, **totals}), encoding="utf-8")
        os.replace(tmp, path)


def _tokenize_stage(pipeline: str, overrides: list[str]) -> tuple[Any, dict[str, Any]]:
    config = load_pipeline(pipeline, overrides)
    stages = [s for s in config.stages if s.op == "tokenize"]
    if not stages:
        raise ConfigError(
            f"{pipeline}: the pipeline has no tokenize stage; an ablation trains on tokens"
        )
    if config.output.format != "mds":
        raise ConfigError(
            f"{pipeline}: output.format is {config.output.format!r}; an ablation needs mds"
        )
    return config, dataclasses.asdict(stages[-1].params)


def variant_overrides(config: AblationConfig, variant: Variant) -> list[str]:
    """The ``--set`` items a variant's pipeline runs with (its own, then shared inputs)."""
    sets = list(variant.set)
    if config.inputs:
        sets.append("inputs=" + json.dumps(config.shared_inputs(), ensure_ascii=False))
    return sets


def _same_place(path: str) -> str:
    return path.rstrip("/") if "://" in path else os.path.realpath(path)


def check_variants(config: AblationConfig) -> None:
    """Every variant's pipeline loads and tokenizes with the ablation's tokenizer into MDS.

    Raises:
        ConfigError: naming the variant's pipeline and what is wrong.
    """
    tokenizer = config.resolve(config.tokenizer)
    for variant in config.variants:
        pipeline = config.pipeline_of(variant)
        loaded, params = _tokenize_stage(pipeline, variant_overrides(config, variant))
        used = loaded.locate(params["tokenizer"])
        if _same_place(used) != _same_place(tokenizer):
            raise ConfigError(
                f"variants.{variant.name}: {pipeline} tokenizes with {used}, not the "
                f"ablation's tokenizer {tokenizer}; models must share one vocabulary"
            )


def _dataforge_run(pipeline: str, out: Path, overrides: list[str], log: Log) -> dict[str, Any]:
    command = [sys.executable, "-m", "dataforge.cli", "run", pipeline, "-o", str(out)]
    for item in overrides:
        command += ["--set", item]
    log(f"dataforge run {pipeline} -o {out}")
    done = subprocess.run(command, stdin=subprocess.DEVNULL, env=os.environ.copy())
    if done.returncode != 0:
        raise PipelineFailed(f"dataforge run {pipeline} -o {out} exited {done.returncode}")
    return json.loads((out / "manifest.json").read_text(encoding="utf-8"))


def mds_tokens(root: Path) -> int:
    """Tokens in an MDS folder: the ``num_tokens`` column of every shard, read through the
    checked index (paths inside the folder, sizes as declared)."""
    import numpy as np

    from dataforge.io.mds import int_column, shard_bytes, shard_layout
    from dataforge.io.mds_index import read_index

    total = 0
    for shard in read_index(root)["shards"]:
        data = np.frombuffer(shard_bytes(root, shard), np.uint8)
        total += int(int_column(data, shard_layout(shard), "num_tokens").sum())
    return total


def _kept(manifest: dict[str, Any], out: Path) -> tuple[int, int]:
    """Records written (kept + repeated copies) and their tokens."""
    total = manifest["counts"]["total"]
    return int(total["kept"] + total["repeated"]), mds_tokens(out / "mds")


def run_variant_pipeline(config: AblationConfig, variant: Variant, out: Path, log: Log) -> dict:
    """Run (or resume) a variant's pipeline into ``out``; its records and tokens kept, and
    the seconds its runs took (over every attempt: ``pipeline_timing.json`` beside ``out``)."""
    with timing_ledger(out.parent / "pipeline_timing.json", "pipeline") as spent:
        manifest = _dataforge_run(
            config.pipeline_of(variant), out, variant_overrides(config, variant), log
        )
    records, tokens = _kept(manifest, out)
    return {"records_kept": records, "tokens_kept": tokens, **spent}


def eval_pipeline_spec(config: AblationConfig, eval_set: EvalSet, root: Path) -> dict[str, Any]:
    """The pipeline that tokenizes a raw evaluation set into ``root/data``: its inputs
    through its ``stages`` and the first variant's tokenize stage (so that the ids are the
    ones the models train on)."""
    variant = config.variants[0]
    loaded, params = _tokenize_stage(
        config.pipeline_of(variant), variant_overrides(config, variant)
    )
    params = {**params, "tokenizer": loaded.locate(params["tokenizer"])}
    return {
        "name": f"eval_{eval_set.name}",
        "seed": 0,
        "inputs": [
            {"name": f"eval_{i}", **entry, "path": config.resolve(entry["path"])}
            if "name" not in entry
            else {**entry, "path": config.resolve(entry["path"])}
            for i, entry in enumerate(eval_set.inputs)
        ],
        "stages": [*eval_set.stages, {"op": "tokenize", **params}],
        "output": {"path": str(root / "data"), "format": "mds"},
    }


def write_pipeline_file(path: Path, spec: dict[str, Any]) -> None:
    """``spec`` as a pipeline file (JSON is YAML), rewritten only when it changed."""
    text = json.dumps(spec, ensure_ascii=False, indent=1)
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)


def run_eval_pipeline(config: AblationConfig, eval_set: EvalSet, root: Path, log: Log) -> str:
    """The MDS folder of an evaluation set: given, or its raw inputs tokenized here
    (:func:`eval_pipeline_spec`)."""
    if eval_set.mds is not None:
        return config.resolve(eval_set.mds)
    pipeline = root / "pipeline.yaml"
    write_pipeline_file(pipeline, eval_pipeline_spec(config, eval_set, root))
    _dataforge_run(str(pipeline), root / "data", [], log)
    return str(root / "data" / "mds")


def _check_packing(loader: dict[str, Any]) -> None:
    if loader.get("packing") is not True:
        raise ConfigError(
            "train.recipe.data.loader.packing must be true in an ablation: packed batches "
            "waste no tokens on padding, so a step trains nearly the same tokens on every variant"
        )


def steps_for_budget(config: TrainerConfig, tokens: int) -> int:
    """Steps after which training has seen at least ``tokens`` tokens of this variant's
    batches (epoch after epoch, as the trainer reads them): counted, not estimated, since
    packing cuts long documents and a step's real tokens depend on the data."""
    from trainer.data.sources import build_batch_source
    from trainer.loop.step import batch_tokens
    from trainer.objectives import build_objective

    source = build_batch_source(config, build_objective("pretrain", config), 0, 1)
    accum, seen, micro = config.train.grad_accum_steps, 0, 0
    try:
        while seen < tokens:
            empty = True
            for batch in source:
                empty = False
                seen += batch_tokens(batch)
                micro += 1
                if seen >= tokens and micro % accum == 0:
                    break
            if empty:
                raise ConfigError(f"{config.data.loader['streams']}: the data gives no batches")
    finally:
        if hasattr(source, "close"):
            source.close()
    return max(1, -(-micro // accum))


def eval_points(steps: int, points: int) -> list[int]:
    """Evenly spaced steps ending at ``steps``: multiples of one checkpoint interval."""
    interval = max(1, steps // points)
    return sorted({*range(interval, steps + 1, interval), steps})


def recipe_probe(
    config: AblationConfig, mds: str, run_root: Path, seed: int
) -> tuple[dict[str, Any], TrainerConfig]:
    """The recipe as the trainer mapping of one variant and seed (its data ``mds``, its
    folders under ``run_root``), and that mapping checked and resolved against the tokenizer
    and ``init_from`` with one step (the probe that counts the steps of the budget).

    Raises:
        ConfigError: the recipe is not a valid trainer config, or its model cannot be made.
    """
    raw = config.trainer_mapping()
    data = dict(raw.get("data") or {})
    loader = dict(data.get("loader") or {})
    _check_packing(loader)
    raw |= {
        "tokenizer": config.resolve(config.tokenizer),
        "run_dir": str(run_root / "run"),
        "train": {**dict(raw.get("train") or {}), "max_steps": 1, "epochs": None, "seed": seed},
        "data": {**data, "source": "loader", "loader": {**loader, "streams": [{"path": mds}]}},
        "eval": {"streams": []},
    }
    from trainer.model.pretrained import resolve_model

    probe = resolve_model(
        config_from_mapping({**raw, "optim": {"warmup_steps": 0}}, "train.recipe")
    )
    return raw, probe


def trainer_config(config: AblationConfig, mds: str, run_root: Path, seed: int) -> TrainerConfig:
    """The variant's trainer config: the shared recipe on its data, with its own folders,
    the seed, and as many steps as its batches need to reach the token budget."""
    raw, probe = recipe_probe(config, mds, run_root, seed)
    steps = steps_for_budget(probe, config.train.tokens)
    points = eval_points(steps, config.train.eval_points)
    raw["train"]["max_steps"] = steps
    raw["checkpoint"] = {
        **dict(raw.get("checkpoint") or {}),
        "dir": str(run_root / "checkpoints"),
        "interval": points[0],
        "keep_last": len(points) + 1,
        "export_dir": str(run_root / "export"),
    }
    optim = dict(raw.get("optim") or {})
    if optim.get("warmup_steps", 100) > steps:  # the trainer's default warmup is 100 steps
        optim["warmup_steps"] = max(1, steps // 10)
    raw["optim"] = optim
    return config_from_mapping(raw, "train.recipe")


def train_run(config: TrainerConfig, log: Log) -> dict[str, Any]:
    """Train (or resume) one model to the end of its budget; wall and CPU seconds over
    every attempt (``timing.json`` beside the checkpoints)."""
    from trainer.loop import train

    root = Path(config.checkpoint.dir)
    final = root / f"step_{config.train.max_steps:08d}"
    with timing_ledger(root.parent / "timing.json", "train") as spent:
        if not (final / "meta.json").is_file():
            log(f"training {config.train.max_steps} steps -> {config.checkpoint.dir}")
            train(config, "pretrain", resume="auto")
    return spent


def _tokens_seen(checkpoint: Path) -> int:
    import torch

    state = torch.load(checkpoint / "train_state.pt", mmap=True, weights_only=True)
    return int(state["loop"]["tokens"])


def score_run(
    config: TrainerConfig, points: list[int], sets: dict[str, str], max_batches: int | None
) -> dict[str, Any]:
    """Scores of every evaluation point's checkpoint on every set, kept in ``scores.json``
    next to the checkpoints so that a rerun scores only what is new."""
    root = Path(config.checkpoint.dir)
    cache_path = root.parent / "scores.json"
    cache = json.loads(cache_path.read_text(encoding="utf-8")) if cache_path.is_file() else {}
    curve: dict[str, list[dict[str, Any]]] = {name: [] for name in sets}
    for step in points:
        checkpoint = root / f"step_{step:08d}"
        tokens = _tokens_seen(checkpoint)
        for name, mds in sets.items():
            key = f"{name}@{step}@{mds}@{max_batches}"
            if key not in cache:
                cache[key] = score_checkpoint(checkpoint, mds, max_batches).to_plain()
                tmp = cache_path.with_name(cache_path.name + ".tmp")
                tmp.write_text(json.dumps(cache), encoding="utf-8")
                os.replace(tmp, cache_path)
            curve[name].append({"step": step, "tokens": tokens, "batches": cache[key]})
    return {"tokens_trained": _tokens_seen(root / f"step_{points[-1]:08d}"), "curve": curve}


def losses_of(entry: dict[str, Any]) -> BatchLosses:
    return BatchLosses(list(entry["batches"]["sums"]), list(entry["batches"]["weights"]))
