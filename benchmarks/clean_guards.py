"""The ``clean`` op with its row guards against the same passes over every row.

``dataforge.text.clean`` rewrites line breaks, control and invisible characters (three
regex passes) and spacing (four passes) only in the rows a single guard regex matches.
Baseline: the same module with the guard switched off (``_on_rows`` applying the passes to
every row, as before the guards), in this process, on the same batches of every demo
source. Both run interleaved ``--repeats`` times; best CPU seconds each, the ratio, and a
check that the outputs are identical (the script fails otherwise).

    .venv/bin/python benchmarks/clean_guards.py [--batch 1000] [--repeats 5]

Needs ``make demo-data``.
"""

from __future__ import annotations

import argparse
import glob
import sys
import time
from pathlib import Path

import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from ops_throughput import SOURCES, read_texts  # noqa: E402

from dataforge.text import clean  # noqa: E402


def _every_row(arr: pa.Array, guard: str, fn):  # the baseline: no guard
    return fn(arr)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=ROOT / "data" / "demo")
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    texts = [
        t
        for pattern, _ in SOURCES.values()
        for f in sorted(glob.glob(str(args.data / pattern)))
        for t in read_texts(f)
    ]
    batches = [
        pa.array(texts[i : i + args.batch], pa.string()) for i in range(0, len(texts), args.batch)
    ]
    mbytes = sum(b.nbytes for b in batches) / 1e6
    config = clean.CleanConfig()
    guarded = clean._on_rows

    def run(on_rows) -> tuple[float, list[pa.Array]]:
        clean._on_rows = on_rows
        try:
            start = time.process_time()
            out = [clean.clean_text(b, config) for b in batches]
            return time.process_time() - start, out
        finally:
            clean._on_rows = guarded

    best = {"guarded": float("inf"), "every row": float("inf")}
    for _ in range(args.repeats):
        outputs = {}
        for name, fn in (("guarded", guarded), ("every row", _every_row)):
            seconds, outputs[name] = run(fn)
            best[name] = min(best[name], seconds)
        pairs = zip(outputs["guarded"], outputs["every row"], strict=True)
        if any(not a.equals(b) for a, b in pairs):
            print("outputs differ: the guards changed what clean does", file=sys.stderr)
            return 1
    print(f"{len(texts)} docs, {mbytes:.1f} MB, batches of {args.batch}; best of {args.repeats}")
    for name, seconds in best.items():
        print(f"  clean, {name:9s}  {seconds:6.3f} CPU s  {mbytes / seconds:6.1f} MB/s")
    print(
        f"guarded / every row time: {best['guarded'] / best['every row']:.2f}x (outputs identical)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
