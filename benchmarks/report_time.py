"""Time to write ``report.html`` for a finished run, in fresh processes (imports count, as
after ``dataforge run``): the report package as it is (SVG drawn by
``dataforge.report.svg``) against the same package at a git revision (default 21ddf1b, the
last one that drew with matplotlib), extracted into a temporary folder.

Each child first imports what ``dataforge run`` has already imported when it writes the
report (numpy, pyarrow with pandas, pyarrow.parquet), so the figure is what the report
adds to a run. The two kinds alternate for ``--rounds``; medians and their ratio are
printed. Needs a finished run directory (e.g. ``out/demo`` after ``make demo``), git and,
for the baseline, matplotlib (mosaicml-streaming installs it).

    .venv/bin/python benchmarks/report_time.py [--run out/demo] [--rounds 5] [--rev 21ddf1b]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = """
import sys, time
import numpy, pyarrow, pyarrow.compute, pyarrow.parquet, pandas
sys.path.insert(0, sys.argv[1])
start = time.perf_counter()
from dataforge.report import write_report
write_report(sys.argv[2], sys.argv[3])
print(time.perf_counter() - start)
"""


def _baseline_tree(rev: str, dest: Path) -> Path:
    """The repository at ``rev`` with the current tree's other packages: only
    ``dataforge/report`` is taken from ``rev``."""
    shutil.copytree(ROOT / "dataforge", dest / "dataforge",
                    ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    shutil.rmtree(dest / "dataforge" / "report")
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "dataforge/report"],
                             capture_output=True, check=True).stdout  # fmt: skip
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", type=Path, default=ROOT / "out" / "demo")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--rev", default="21ddf1b")
    args = ap.parse_args()
    if not (args.run / "manifest.json").is_file():
        raise SystemExit(f"{args.run}: no manifest.json (run `make demo` first)")
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"svg": ROOT, f"at {args.rev}": _baseline_tree(args.rev, Path(tmp) / "base")}
        times: dict[str, list[float]] = {kind: [] for kind in trees}
        pages: dict[str, int] = {}
        for _ in range(args.rounds):
            for kind, tree in trees.items():
                page = Path(tmp) / f"report-{kind.replace(' ', '_')}.html"
                proc = subprocess.run(
                    [sys.executable, "-c", CHILD, str(tree), str(args.run), str(page)],
                    capture_output=True, text=True, check=True,
                )  # fmt: skip
                times[kind].append(float(proc.stdout.strip().splitlines()[-1]))
                pages[kind] = page.stat().st_size
    for kind, values in times.items():
        print(f"{kind:<12} median {statistics.median(values):.3f} s  "
              f"({', '.join(f'{v:.3f}' for v in values)}), page {pages[kind]:,} bytes")  # fmt: skip
    now, base = (statistics.median(v) for v in times.values())
    print(f"report.html now / at {args.rev}: {now / base:.3f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
