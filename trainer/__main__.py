"""``python -m trainer STAGE CONFIG.yaml`` (what torchrun launches)."""

from __future__ import annotations

import argparse
import sys

from trainer.cli import add_arguments, run_command


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m trainer", description="Train with the dataforge trainer."
    )
    add_arguments(parser)
    return run_command(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
