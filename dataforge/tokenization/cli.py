"""``dataforge tokenizer train``: train a Jieba + BPE tokenizer from a spec or flags."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

__all__ = ["add_subcommand"]


def add_subcommand(subparsers: argparse._SubParsersAction) -> None:
    """Register ``dataforge tokenizer ...``."""
    parser = subparsers.add_parser(
        "tokenizer",
        help="train Jieba + BPE tokenizers",
        description="Train Jieba + BPE (sentencepiece) tokenizers.",
    )
    sub = parser.add_subparsers(dest="tokenizer_command", required=True)
    train = sub.add_parser(
        "train",
        help="train a tokenizer from a spec (tokenizers/<name>.yaml) or from flags",
        description="Train from SPEC (tokenizers/<name>.yaml; output tokenizers/<name>/ unless "
        "--out), or from --input/--vocab-size/--out. Flags given with a SPEC override it.",
    )
    train.add_argument("spec", nargs="?", help="tokenizer spec YAML")
    train.add_argument(
        "--input",
        action="append",
        dest="inputs",
        metavar="GLOB_OR_OUT_DIR",
        help="input file glob or `dataforge run` output dir (repeatable)",
    )
    train.add_argument("--out", help="output tokenizer directory")
    train.add_argument("--vocab-size", type=int)
    train.add_argument("--max-chars", type=int, help="character budget of the training sample")
    train.add_argument("--engine", choices=("jieba", "rjieba"), help="Chinese segmenter")
    train.add_argument("--user-dict", help="jieba user dictionary (word [freq] [tag] per line)")
    train.add_argument("--character-coverage", type=float)
    train.add_argument("--seed", type=int, help="salt of the id hash that picks the sample")
    train.add_argument("--threads", type=int, dest="num_threads", help="training threads")
    train.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an existing tokenizer directory (never a folder this command did not write)",
    )
    train.add_argument("--verbose", action="store_true", help="show sentencepiece's training log")
    train.set_defaults(func=_train)


_OVERRIDES = (
    "inputs",
    "vocab_size",
    "max_chars",
    "engine",
    "user_dict",
    "character_coverage",
    "seed",
    "num_threads",
)


def _train(args: argparse.Namespace) -> int:
    from dataforge.io.owned_output import OutputPathError
    from dataforge.tokenization.train import TokenizerSpec, load_spec, train_tokenizer
    from dataforge.typed_config import ConfigError

    overrides = {k: getattr(args, k) for k in _OVERRIDES if getattr(args, k) is not None}
    try:
        if args.spec:
            spec, out = load_spec(args.spec)
            fields = {**spec.__dict__, **overrides}
        else:
            if not args.inputs or not args.out:
                print(
                    "dataforge tokenizer train: give a SPEC, or --input and --out", file=sys.stderr
                )
                return 2
            fields, out = {"name": Path(args.out).name, **overrides}, Path(args.out)
        fields["inputs"] = tuple(fields["inputs"])
        spec = TokenizerSpec(**fields)
    except (ConfigError, ValueError, TypeError) as exc:
        print(f"dataforge tokenizer train: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else out
    start = time.monotonic()
    try:
        tok = train_tokenizer(spec, out, overwrite=args.overwrite, quiet=not args.verbose)
    except (FileExistsError, OutputPathError) as exc:
        print(f"dataforge tokenizer train: {exc}", file=sys.stderr)
        return 2
    except (FileNotFoundError, ValueError) as exc:
        print(f"dataforge tokenizer train: failed: {exc}", file=sys.stderr)
        return 1
    data = tok.meta["training_data"]
    print(
        json.dumps(
            {
                "out": str(out),
                "vocab_size": tok.vocab_size,
                "engine": spec.engine,
                "records_used": data["records_used"],
                "chars_used": data["chars_used"],
                "training_data_sha256": data["sha256"],
                "spm_model_sha256": tok.fingerprint,
                "seconds": round(time.monotonic() - start, 1),
            },
            indent=2,
        )
    )
    return 0
