"""``dataforge ablate``: every variant's data, one model per variant and seed at equal
tokens, every model scored on every evaluation set, the results and a verdict.

Layout of the output folder (all of it written by the ablation)::

    DIR/.dataforge-ablation     marks the folder as an ablation's own
    DIR/eval/SET/               a raw evaluation set tokenized (pipeline.yaml, data/)
    DIR/variants/NAME/data/     the variant's pipeline output
    DIR/variants/NAME/seed_S/   checkpoints/, run/ (metrics.jsonl), export/, scores.json
    DIR/ablation.json           results and verdict
    DIR/report.html             loss curves, table, verdict
"""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path
from typing import Any

from dataforge.rundir.lock import LocalRunLock, RunLockedError, acquire_run_lock
from dataforge.typed_config import ConfigError
from trainer.ablate.config import AblationConfig
from trainer.ablate.scoring import bootstrap_difference, bootstrap_interval, perplexity
from trainer.ablate.steps import (
    Log,
    check_variants,
    eval_points,
    losses_of,
    run_eval_pipeline,
    run_variant_pipeline,
    score_run,
    train_run,
    trainer_config,
)

__all__ = ["MARKER", "prepare_output", "run_ablation", "verdict"]

MARKER = ".dataforge-ablation"


def prepare_output(out: Path, name: str) -> LocalRunLock:
    """Create ``out`` or accept it as this ablation's earlier output (which resumes), and
    take its run lock (release it when the ablation ends).

    Raises:
        ConfigError: ``out`` is a file, a non-empty folder the ablation did not make, or
            another live ablation is writing it.
    """
    marker = out / MARKER
    if out.exists() and not out.is_dir():
        raise ConfigError(f"-o {out}: exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not marker.is_file():
        raise ConfigError(
            f"-o {out}: a non-empty folder that no ablation wrote; give a new or empty folder"
        )
    if marker.is_file():
        owner = json.loads(marker.read_text(encoding="utf-8")).get("name")
        if owner != name:
            raise ConfigError(
                f"-o {out}: holds ablation {owner!r}, not {name!r}; give another folder"
            )
    out.mkdir(parents=True, exist_ok=True)
    marker.write_text(json.dumps({"name": name}), encoding="utf-8")
    try:
        return acquire_run_lock(out)
    except RunLockedError as exc:
        raise ConfigError(f"-o {exc}") from None


def _write_json(path: Path, value: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(value, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _check_recipe(run_root: Path, recipe_json: str) -> None:
    """A seed folder trains one recipe: a changed budget or recipe would resume checkpoints
    of another schedule, so it is refused."""
    path = run_root / "recipe.json"
    if path.is_file() and path.read_text(encoding="utf-8") != recipe_json:
        raise ConfigError(
            f"{run_root}: trained with another recipe or budget; give a new -o folder "
            "(or remove that variant's seed folder)"
        )
    run_root.mkdir(parents=True, exist_ok=True)
    path.write_text(recipe_json, encoding="utf-8")


def _variant_result(config: AblationConfig, name: str, data: dict, runs: list[dict]) -> dict:
    first = runs[0]
    result = {"name": name, **data, "tokens_trained": first["tokens_trained"]}
    result["seeds"] = [r["seed"] for r in runs]
    result["tokens_trained_by_seed"] = [r["tokens_trained"] for r in runs]
    result["epochs"] = round(first["tokens_trained"] / max(data["tokens_kept"], 1), 3)
    result["train_wall_s"] = round(sum(r["train_wall_s"] for r in runs), 3)
    result["train_cpu_s"] = round(sum(r["train_cpu_s"] for r in runs), 3)
    result["eval"], result["curves"] = {}, {}
    for set_name in first["curve"]:
        finals = [losses_of(r["curve"][set_name][-1]) for r in runs]
        per_seed = [f.loss for f in finals]
        loss = statistics.fmean(per_seed)
        result["eval"][set_name] = {
            "loss": loss,
            "perplexity": perplexity(loss),
            "ci": bootstrap_interval(finals, config.train.bootstrap),
            "loss_by_seed": per_seed,
            "spread": statistics.pstdev(per_seed) if len(per_seed) > 1 else 0.0,
            "batches": len(finals[0].sums),
        }
        points = zip(*(r["curve"][set_name] for r in runs), strict=True)
        result["curves"][set_name] = [
            {
                "step": group[0]["step"],
                "tokens": group[0]["tokens"],
                "loss": statistics.fmean(losses_of(g).loss for g in group),
            }
            for group in points
        ]
    return result


def verdict(config: AblationConfig, variants: list[dict], runs: dict[str, list[dict]]) -> dict:
    """Per evaluation set: the best variant (lowest mean loss), the runner-up, and whether
    the paired bootstrap interval of their difference excludes zero."""
    out: dict[str, Any] = {}
    for set_name in variants[0]["eval"]:
        ranked = sorted(variants, key=lambda v: v["eval"][set_name]["loss"])
        best = ranked[0]
        entry: dict[str, Any] = {"best": best["name"], "loss": best["eval"][set_name]["loss"]}
        if len(ranked) > 1:
            second = ranked[1]
            finals = {
                v["name"]: [losses_of(r["curve"][set_name][-1]) for r in runs[v["name"]]]
                for v in (best, second)
            }
            lo, hi = bootstrap_difference(
                finals[best["name"]], finals[second["name"]], config.train.bootstrap
            )
            entry |= {
                "runner_up": second["name"],
                "difference": best["eval"][set_name]["loss"] - second["eval"][set_name]["loss"],
                "difference_ci": [lo, hi],
                "beyond_interval": hi < 0.0,
            }
        out[set_name] = entry
    return out


def _summary_line(set_name: str, entry: dict) -> str:
    if "runner_up" not in entry:
        return f"{set_name}: {entry['best']} (only variant), loss {entry['loss']:.4f}"
    lo, hi = entry["difference_ci"]
    sure = "beyond the interval" if entry["beyond_interval"] else "within the interval"
    return (
        f"{set_name}: {entry['best']} best, {-entry['difference']:.4f} nats below "
        f"{entry['runner_up']} (95% CI of the difference [{lo:.4f}, {hi:.4f}], {sure})"
    )


def run_ablation(config: AblationConfig, out: Path, log: Log) -> dict[str, Any]:
    """Run the whole ablation into ``out`` (resuming what is done); its results."""
    out = out.absolute()  # paths written into the evaluation sets' pipeline files
    check_variants(config)
    with prepare_output(out, config.name):  # one ablation at a time writes ``out``
        runs, data, sets = _train_and_score(config, out, log)
        return _write_results(config, out, runs, data, sets)


def _train_and_score(
    config: AblationConfig, out: Path, log: Log
) -> tuple[dict[str, list[dict]], dict[str, dict], dict[str, Any]]:
    """Every variant's data, model and scores (each step resumes what is done)."""
    sets = {s.name: run_eval_pipeline(config, s, out / "eval" / s.name, log) for s in config.eval}
    data = {
        v.name: run_variant_pipeline(config, v, out / "variants" / v.name / "data", log)
        for v in config.variants
    }
    runs: dict[str, list[dict]] = {}
    for variant in config.variants:
        mds = str(out / "variants" / variant.name / "data" / "mds")
        runs[variant.name] = []
        for seed in config.seeds:
            run_root = out / "variants" / variant.name / f"seed_{seed}"
            trainer = trainer_config(config, mds, run_root, seed)
            _check_recipe(run_root, trainer.to_json())
            timing = train_run(trainer, log)
            points = eval_points(trainer.train.max_steps, config.train.eval_points)
            scored = score_run(trainer, points, sets, config.train.eval_batches)
            runs[variant.name].append({"seed": seed, **timing, **scored})
            if data[variant.name]["tokens_kept"] < scored["tokens_trained"]:
                log(
                    f"{variant.name} seed {seed}: {scored['tokens_trained']} tokens trained "
                    f"over {data[variant.name]['tokens_kept']} kept: the data was repeated"
                )
    return runs, data, sets


def _write_results(
    config: AblationConfig,
    out: Path,
    runs: dict[str, list[dict]],
    data: dict[str, dict],
    sets: dict[str, Any],
) -> dict[str, Any]:
    variants = [_variant_result(config, n, data[n], runs[n]) for n in data]
    result = {
        "name": config.name,
        "tokens_budget": config.train.tokens,
        "seeds": list(config.seeds),
        "eval_sets": sets,
        "variants": variants,
        "verdict": verdict(config, variants, runs),
    }
    result["summary"] = [_summary_line(k, v) for k, v in result["verdict"].items()]
    _write_json(out / "ablation.json", result)
    from trainer.ablate.report import write_report

    write_report(result, out / "report.html")
    return result
