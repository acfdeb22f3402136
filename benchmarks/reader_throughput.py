"""JSONL reading: ``TaskReader`` (every record kept or dropped with a reason) against a bare
``json.loads`` loop over the same decompressed lines.

Inputs: the JSONL sources of ``pipelines/demo.yaml`` (zstd, gzip and plain files),
``--copies`` times over. Ours: ``TaskReader.batches()`` of every task (decoding decision,
invalid UTF-8 and surrogate repair, ids, meta, duplicate ids, length limits, Arrow
batches of ``read.batch_rows``). Baseline: the same decompressed byte streams read as
UTF-8 lines, ``json.loads`` per line and ``pa.Table.from_pylist`` of ``{id, text}`` per
batch: what reading costs with no checks at all. Interleaved ``--repeats`` times in this
process, best CPU seconds each, and the ratio.

    .venv/bin/python benchmarks/reader_throughput.py [--repeats 5] [--copies 1]

Needs ``make demo-data``.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import time
from pathlib import Path

import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dataforge.config import load_pipeline  # noqa: E402
from dataforge.io.readers import TaskReader, plan_input_tasks  # noqa: E402
from dataforge.io.tasks import open_task  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pipeline", type=Path, default=ROOT / "pipelines" / "demo.yaml")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--copies", type=int, default=1, help="read every file N times")
    args = parser.parse_args()
    config = load_pipeline(args.pipeline)
    sources = {s.name: s for s in config.inputs if s.format == "jsonl"}
    tasks = [t for t in plan_input_tasks(config) if t.source in sources] * args.copies
    rows = config.read.batch_rows

    def ours() -> int:
        n = 0
        for task in tasks:
            for batch in TaskReader(task, sources[task.source], config.read).batches():
                n += batch.num_rows
        return n

    def bare() -> int:
        n = 0
        for task in tasks:
            with open_task(task) as raw:
                records = [json.loads(line) for line in io.TextIOWrapper(raw, encoding="utf-8")]
            for i in range(0, len(records), rows):
                part = [{"id": r.get("id"), "text": r.get("text")} for r in records[i : i + rows]]
                n += pa.Table.from_pylist(part).num_rows
        return n

    best = {"TaskReader": float("inf"), "bare json loop": float("inf")}
    counts = {}
    for _ in range(args.repeats):
        for name, fn in (("TaskReader", ours), ("bare json loop", bare)):
            start = time.process_time()
            counts[name] = fn()
            best[name] = min(best[name], time.process_time() - start)
    if counts["TaskReader"] != counts["bare json loop"]:
        print(f"record counts differ: {counts}", file=sys.stderr)
        return 1
    mbytes = sum(t.bytes for t in tasks) / 1e6
    print(f"{len(tasks)} tasks, {counts['TaskReader']} records, {mbytes:.1f} MB on disk")
    for name, seconds in best.items():
        print(f"  {name:15s} {seconds:6.3f} CPU s  {counts[name] / seconds:9.0f} records/s")
    ratio = best["TaskReader"] / best["bare json loop"]
    print(f"TaskReader / bare loop time: {ratio:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
