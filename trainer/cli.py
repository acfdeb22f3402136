"""``dataforge train STAGE CONFIG.yaml`` and ``python -m trainer ...``; the stages are
:data:`trainer.objectives.STAGES`."""

from __future__ import annotations

import argparse
import sys

from trainer.config import ConfigError
from trainer.objectives import STAGES

__all__ = ["add_arguments", "add_subcommand", "run_command"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """One subcommand per registered stage, each taking CONFIG.yaml and resume flags, and
    ``export``."""
    stages = parser.add_subparsers(
        dest="stage", metavar="{" + ",".join([*STAGES, "export"]) + "}", required=True
    )
    for stage, spec in STAGES.items():
        sub = stages.add_parser(stage, help=spec.help, description=spec.help)
        sub.add_argument("config", help="trainer YAML (see trainer/configs/)")
        mode = sub.add_mutually_exclusive_group()
        mode.add_argument(
            "--resume",
            choices=["auto"],
            default=None,
            help="continue from the latest checkpoint in checkpoint.dir if there is one (default)",
        )
        mode.add_argument(
            "--from-scratch",
            action="store_true",
            help="ignore existing checkpoints (they are moved to checkpoint.dir/superseded-*)",
        )
        sub.add_argument(
            "--set",
            dest="overrides",
            action="append",
            default=[],
            metavar="KEY.PATH=VALUE",
            help="override a config value (YAML), e.g. --set train.max_steps=100",
        )

    export = stages.add_parser(
        "export",
        help="write a checkpoint's weights as a transformers model directory",
        description="Write the weights of CKPT (a <checkpoint.dir>/step_N directory) as a "
        "directory AutoModelForCausalLM.from_pretrained loads, with the run's tokenizer.",
    )
    export.add_argument("checkpoint", help="checkpoint directory (<checkpoint.dir>/step_N)")
    export.add_argument(
        "-o",
        "--out",
        default=None,
        help="output directory (default: <checkpoint.dir>/export-step_N)",
    )


def run_command(args: argparse.Namespace) -> int:
    """Run a parsed ``train`` command; returns the exit code (0 ok, 1 failed, 2 config,
    75 stopped by a signal with a checkpoint written: run it again to resume)."""
    if args.stage == "export":
        return _export(args)
    from trainer.config import load_config
    from trainer.control.stopping import EXIT_REQUEUE, Interrupted
    from trainer.loop import TrainingError, train

    try:
        config = load_config(args.config, args.overrides)
        resume = "scratch" if args.from_scratch else "auto"
        if STAGES[args.stage].loop == "ppo":  # its own loop: rollouts, then updates
            from trainer.ppo import train_ppo

            train_ppo(config, resume=resume)
        else:
            train(config, args.stage, resume=resume)
    except Interrupted:  # the loop printed the line (rank 0)
        return EXIT_REQUEUE
    except KeyboardInterrupt:  # outside the steps, or a second Ctrl-C
        print("interrupted: nothing saved after the last checkpoint", file=sys.stderr)
        return 130
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except TrainingError as exc:
        print(f"training failed: {exc}", file=sys.stderr)
        return 1
    return 0


def _export(args: argparse.Namespace) -> int:
    from pathlib import Path

    from trainer.checkpoint.export import export_checkpoint

    checkpoint = Path(args.checkpoint)
    out = Path(args.out) if args.out else checkpoint.parent / f"export-{checkpoint.name}"
    try:
        export_checkpoint(checkpoint, out)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"exported {checkpoint} -> {out}")
    return 0


def add_subcommand(subparsers: argparse._SubParsersAction) -> None:
    """Register ``dataforge train``."""
    parser = subparsers.add_parser(
        "train",
        help=f"train a model: {', '.join([*STAGES][:-1])} or {[*STAGES][-1]}",
        description="Train a decoder-only transformer on dataforge loader output. "
        "Runs on one process, or under torchrun/SLURM (see trainer/launch/README.md).",
    )
    add_arguments(parser)
    parser.set_defaults(func=run_command)
