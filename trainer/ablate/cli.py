"""``dataforge ablate ABLATION.yaml -o DIR``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

__all__ = ["add_subcommand"]


def _run(args: argparse.Namespace) -> int:
    from dataforge.typed_config import ConfigError
    from trainer.ablate.config import load_ablation
    from trainer.ablate.run import run_ablation
    from trainer.ablate.steps import PipelineFailed
    from trainer.loop import TrainingError

    def log(message: str) -> None:
        print(f"[ablate] {message}", file=sys.stderr, flush=True)

    try:
        config = load_ablation(args.ablation, args.set)
        result = run_ablation(config, Path(args.out), log)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (PipelineFailed, TrainingError) as exc:
        print(f"ablation failed: {exc}", file=sys.stderr)
        return 1
    for line in result["summary"]:
        print(line)
    print(f"wrote {Path(args.out) / 'ablation.json'} and {Path(args.out) / 'report.html'}")
    return 0


def add_subcommand(subparsers: argparse._SubParsersAction) -> None:
    """Register ``dataforge ablate``."""
    parser = subparsers.add_parser(
        "ablate",
        help="train small models on recipe variants at equal tokens and compare them",
        description="Run each variant's pipeline, train the same model on each for the same "
        "number of tokens, score every model on every evaluation set, and write "
        "DIR/ablation.json and DIR/report.html. A rerun into DIR resumes.",
    )
    parser.add_argument("ablation", help="ablation YAML (variants, train, eval, seeds)")
    parser.add_argument("-o", "--out", required=True, help="output folder (made by the ablation)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE",
                        help="override a value of the ablation file (YAML)")  # fmt: skip
    parser.set_defaults(func=_run)
