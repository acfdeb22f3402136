"""``dataforge classifier train``: a fastText quality classifier from positive and negative
inputs, given as globs or as a YAML file of pipeline ``inputs:`` entries.

Also runnable without the top-level CLI: ``python -m dataforge.classifier.cli train ...``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from dataforge.classifier import LANGS

__all__ = ["add_subcommand", "main"]

_YAML_KEYS = ("positive", "negative")


def add_subcommand(subparsers: argparse._SubParsersAction) -> None:
    """Register ``classifier`` (with ``classifier train``) on the top-level subparsers."""
    top = subparsers.add_parser("classifier", help="fastText quality classifiers")
    sub = top.add_subparsers(dest="classifier_command", metavar="{train}")
    sub.required = True
    train = sub.add_parser(
        "train",
        help="train a fastText classifier of high- against low-quality documents",
        description="Reads the inputs with the pipeline's readers, normalizes and segments "
        "them as the quality_classifier op does, trains fastText, and writes model.bin, "
        "card.json (inputs, counts, hyper-parameters, held-out figures) and heldout.jsonl.",
    )
    train.add_argument("config", nargs="?", help="YAML with positive:/negative: inputs entries")
    train.add_argument("--positive", action="append", metavar="GLOB", help="repeatable")
    train.add_argument("--negative", action="append", metavar="GLOB", help="repeatable")
    train.add_argument("--out", metavar="DIR", help="model directory")
    train.add_argument("--lang", choices=LANGS, help="default auto")
    train.add_argument("--seed", type=int, help="default 0")
    train.add_argument("--threads", type=int, help="default 1 (the only deterministic count)")
    train.add_argument("--epoch", type=int, help="default 20")
    train.set_defaults(func=_train)


def _train_config(args: argparse.Namespace):
    """The TrainConfig of the command line (and YAML file), or a ConfigError."""
    from dataforge.classifier.train import TrainConfig
    from dataforge.io.input_config import InputConfig
    from dataforge.typed_config import ConfigError, from_mapping, read_yaml_file

    raw: dict = {}
    base = Path(".")
    if args.config:
        raw = read_yaml_file(args.config, "classifier config")
        if not isinstance(raw, dict):
            raise ConfigError(f"{args.config}: expected a mapping with positive: and negative:")
        base = Path(args.config).resolve().parent
    # inputs given as globs are of the --lang language (an input's default is en)
    lang = args.lang or raw.get("lang")
    glob_lang = {"lang": lang} if lang in ("zh", "en") else {}
    for key in _YAML_KEYS:
        globs = getattr(args, key)
        if globs:
            raw[key] = [{"name": f"{key}{i}", "path": g, **glob_lang} for i, g in enumerate(globs)]
        entries = raw.get(key)
        if not isinstance(entries, list) or not entries:
            raise ConfigError(f"{key}: give --{key} GLOB or a YAML list of inputs entries")
        sources = []
        for i, entry in enumerate(entries):
            source = from_mapping(InputConfig, entry, f"{key}[{i}]")
            path = Path(source.path).expanduser()
            if "://" not in source.path and not path.is_absolute():
                source = dataclasses.replace(source, path=str(base / path))
            sources.append(source)
        raw[key] = tuple(sources)
    for key in ("out", "lang", "seed", "threads", "epoch"):
        if getattr(args, key) is not None:
            raw[key] = getattr(args, key)
    if "out" not in raw:
        raise ConfigError("out: give --out DIR (or out: in the YAML)")
    if args.config and not Path(str(raw["out"])).is_absolute() and not args.out:
        raw["out"] = str(base / str(raw["out"]))
    return from_mapping(TrainConfig, raw, args.config or "classifier train")


def _train(args: argparse.Namespace) -> int:
    from dataforge.classifier.train import train_classifier
    from dataforge.typed_config import ConfigError

    try:
        config = _train_config(args)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        figures = train_classifier(config)
    except (FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps({"out": config.out, "heldout": figures}, indent=2))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dataforge.classifier.cli")
    add_subcommand(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
