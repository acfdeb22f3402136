"""``dataforge lm train``: train a KenLM reference model with its model card.

Also runnable without the top-level CLI: ``python -m dataforge.lm.cli train ...``.
"""

from __future__ import annotations

import argparse
import sys

from dataforge.lm.tokens import DEFAULT_SEGMENTATION, SEGMENTATIONS

__all__ = ["add_subcommand", "main"]


def add_subcommand(subparsers: argparse._SubParsersAction) -> None:
    """Register ``lm`` (with ``lm train``) on the top-level parser's subparsers."""
    lm = subparsers.add_parser("lm", help="KenLM perplexity models")
    lm_sub = lm.add_subparsers(dest="lm_command", metavar="{train}")
    lm_sub.required = True
    train = lm_sub.add_parser(
        "train",
        help="train a KenLM model on normalized, tokenized text",
        description="CCNet normalization -> tokenization (--segmentation) -> lmplz -> "
        "build_binary, plus a JSON model card at OUT.json.",
    )
    train.add_argument(
        "--input",
        required=True,
        action="append",
        metavar="GLOB",
        help="JSON lines (.gz/.zst), parquet or txt files; repeatable",
    )
    train.add_argument("--lang", required=True, help="language code recorded in the card")
    train.add_argument(
        "--tokenizer", metavar="PATH", help="tokenizer directory (all segmentations but chars)"
    )
    train.add_argument(
        "--segmentation",
        choices=SEGMENTATIONS,
        default=DEFAULT_SEGMENTATION,
        help="sentencepiece: the tokenizer's spm.model alone, no word segmentation (CCNet, "
        "fast to score); tokenizer: the full project tokenizer, jieba + BPE; chars: one "
        "token per character, no tokenizer (CJK; fastest) "
        f"(default {DEFAULT_SEGMENTATION}; recorded in the card, scoring follows it)",
    )
    train.add_argument("--order", type=int, default=5, help="n-gram order (default 5)")
    train.add_argument(
        "--out", required=True, metavar="MODEL", help="binary model path, e.g. models/zh.bin"
    )
    train.add_argument(
        "--prune",
        type=int,
        nargs="+",
        default=[],
        metavar="N",
        help="lmplz --prune count thresholds per order, e.g. 0 0 1",
    )
    train.add_argument(
        "--memory", default="1G", help="lmplz -S memory bound: 1G, 500M, 20%% (default 1G)"
    )
    train.add_argument(
        "--holdout-percent",
        type=float,
        default=0.0,
        help="percent of documents (by id hash) held out and evaluated, not trained on",
    )
    train.add_argument("--text-key", default="text", help="field holding the text (default text)")
    train.add_argument(
        "--id-key", default="id", help="field holding a stable id; '' derives file:line"
    )
    train.add_argument("--binary-type", choices=("probing", "trie"), default="probing")
    train.add_argument(
        "--discount-fallback", action="store_true", help="lmplz --discount_fallback (small corpora)"
    )
    train.add_argument("--kenlm-bin", default=None, help="directory with lmplz/build_binary")
    train.set_defaults(func=_train)


def _train(args: argparse.Namespace) -> int:
    from dataforge.lm.train import train_lm

    try:
        card = train_lm(
            args.input,
            args.out,
            lang=args.lang,
            tokenizer=args.tokenizer,
            segmentation=args.segmentation,
            order=args.order,
            prune=args.prune,
            memory=args.memory,
            holdout_percent=args.holdout_percent,
            text_key=args.text_key,
            id_key=args.id_key or None,
            binary_type=args.binary_type,
            discount_fallback=args.discount_fallback,
            kenlm_bin=args.kenlm_bin,
        )
    except (ValueError, FileNotFoundError) as exc:
        print(f"dataforge lm train: {exc}", file=sys.stderr)
        return 2
    except RuntimeError as exc:
        print(f"dataforge lm train: {exc}", file=sys.stderr)
        return 1
    heldout = card.extra.get("heldout_ppl")
    print(
        f"wrote {args.out} (+ {args.out}.json): order {card.order}, "
        f"{card.segmentation} segmentation, {card.documents} docs, "
        f"{card.lines} lines, {card.tokens} tokens"
        + (
            f"; held-out ppl median {heldout['p50']} over {heldout['documents']} docs"
            if heldout
            else ""
        )
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dataforge.lm.cli")
    add_subcommand(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["lm", *(argv if argv is not None else sys.argv[1:])])
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
