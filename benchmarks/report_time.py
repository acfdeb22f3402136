"""Time to draw ``report.html`` for a finished run, in fresh processes (imports count, as
after ``dataforge run``): the report as it is, against the same report with matplotlib's
own mathtext log-axis labels (the baseline: ``page._plain_log_labels`` switched off).

The two kinds alternate for ``--rounds``; medians and their ratio are printed. Needs a
finished run directory, e.g. ``out/demo`` after ``make demo``.

    .venv/bin/python benchmarks/report_time.py [--run out/demo] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = """
import sys, time
sys.path.insert(0, sys.argv[1])
start = time.perf_counter()
import dataforge.report.page as page
if sys.argv[3] == "mathtext":
    page._plain_log_labels = lambda figure: None
from dataforge.report import write_report
write_report(sys.argv[2])
print(time.perf_counter() - start)
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", type=Path, default=ROOT / "out" / "demo")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    if not (args.run / "manifest.json").is_file():
        raise SystemExit(f"{args.run}: no manifest.json (run `make demo` first)")
    times: dict[str, list[float]] = {"plain": [], "mathtext": []}
    for _ in range(args.rounds):
        for kind, values in times.items():
            proc = subprocess.run(
                [sys.executable, "-c", CHILD, str(ROOT), str(args.run), kind],
                capture_output=True,
                text=True,
                check=True,
            )
            values.append(float(proc.stdout.strip().splitlines()[-1]))
    plain, mathtext = (statistics.median(v) for v in times.values())
    for kind, values in times.items():
        print(
            f"{kind:<9} median {statistics.median(values):.3f} s  ({', '.join(f'{v:.2f}' for v in values)})"
        )
    print(f"report with plain-text log labels / with mathtext labels: {plain / mathtext:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
