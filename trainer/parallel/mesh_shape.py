"""``python -m trainer.parallel.mesh_shape CONFIG [--set KEY=VALUE ...]``: print the config's device
mesh as ``dp tp pp`` (``dp`` is ``auto`` when the config derives it from the world size).

The launchers (``trainer/launch/torchrun.sh``, ``slurm.sbatch``) read it to start
``dp x tp x pp`` ranks; other trainer arguments are ignored. Exits 2 with one line on a
bad config.
"""

from __future__ import annotations

import argparse
import sys

from trainer.config import ConfigError, load_config

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m trainer.parallel.mesh_shape", description=__doc__
    )
    parser.add_argument("config")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args, _ = parser.parse_known_args(argv)
    try:
        dist = load_config(args.config, args.overrides).distributed
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{dist.dp or 'auto'} {dist.tp} {dist.pp}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
