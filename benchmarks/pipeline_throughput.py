"""Throughput of read+clean+quality+write: `dataforge run` on Ray vs a single-process loop.

Both run the same pipeline (the demo inputs with the ``clean`` and ``quality_filter``
stages, MDS output) in the same process: the baseline executes every task in this process
one after the other (``LocalExecutor``: the same reader, ops and sink code); the Ray run
uses embedded local Ray with ``--cpus`` CPUs (``--cpus`` actors, as ``dataforge run`` does). Prints MB/s of input text (UTF-8, decompressed) and the ratio.

    .venv/bin/python benchmarks/pipeline_throughput.py [--cpus 2] [--repeat 1]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from dataforge.config import load_pipeline
from dataforge.io.readers import plan_input_tasks
from dataforge.runtime.executors.local import LocalExecutor
from dataforge.runtime.pipeline import run_pipeline

ROOT = Path(__file__).resolve().parents[1]
_WORK: str | None = None  # set when run as a script


def _scaled(config, copies: int):
    """The same pipeline over ``copies`` copies of every input file (real copies: the
    planner reads each real file once, so symlinks would not add work); ids are derived
    from file and line (the bench pipeline sets no id_key), so they stay unique."""
    import dataclasses
    import glob

    root = Path(tempfile.mkdtemp(prefix="df-bench-in-", dir=_WORK))
    inputs = []
    for source in config.inputs:
        for path in sorted(glob.glob(str(config.resolve(source.path)))):
            for k in range(copies):
                dest = root / source.name / f"copy{k}" / Path(path).name
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, dest)
        suffix = "".join(Path(source.path).suffixes)
        inputs.append(
            dataclasses.replace(source, path=str(root / source.name / "copy*" / f"*{suffix}"))
        )
    return dataclasses.replace(config, inputs=tuple(inputs))


def _input_text_mb(config) -> float:
    """UTF-8 megabytes of document text in the inputs (decompressed), read once untimed."""
    from dataforge.io.readers import TaskReader

    sources = {s.name: s for s in config.inputs}
    total = 0
    for task in plan_input_tasks(config):
        for batch in TaskReader(task, sources[task.source], config.read).batches():
            total += sum(len(t.encode("utf-8")) for t in batch.column("text").to_pylist())
    return total / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pipeline", default=str(ROOT / "pipelines" / "bench_clean_quality.yaml"))
    parser.add_argument("--cpus", type=int, default=2)
    parser.add_argument(
        "--scale",
        type=int,
        default=1,
        help="read every input file this many times (as separate files)",
    )
    args = parser.parse_args()
    config = load_pipeline(args.pipeline)
    if args.scale > 1:
        config = _scaled(config, args.scale)
    total_bytes = sum(t.bytes for t in plan_input_tasks(config))
    work = Path(tempfile.mkdtemp(prefix="df-bench-", dir=_WORK))
    quiet = lambda m: None  # noqa: E731

    t0 = time.perf_counter()
    base = run_pipeline(config, work / "local", LocalExecutor(), log=quiet)
    local_s = time.perf_counter() - t0
    text_mb = _input_text_mb(config)

    import ray

    from dataforge.runtime.executors.ray import RayExecutor

    t0 = time.perf_counter()
    ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False)
    init_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    dist = run_pipeline(config, work / "ray", RayExecutor(config), log=quiet)
    ray_s = time.perf_counter() - t0
    ray.shutdown()
    assert dist["counts"] == base["counts"], "Ray and single-process runs must agree"
    kept = base["counts"]["total"]["kept"]
    print(
        f"input: {text_mb:.1f} MB of text ({total_bytes / 1e6:.1f} MB on disk) in {len(base['inputs'])} files; kept {kept} of "
        f"{base['counts']['total']['input']} records"
    )
    print(f"single-process loop : {local_s:7.1f} s  {text_mb / local_s:6.2f} MB/s")
    print(
        f"dataforge run (Ray) : {ray_s:7.1f} s  {text_mb / ray_s:6.2f} MB/s  "
        f"(+{init_s:.1f} s ray.init, {args.cpus} CPUs)"
    )
    print(
        f"ratio Ray / single-process: {local_s / ray_s:.2f}x "
        f"(including ray.init: {local_s / (ray_s + init_s):.2f}x)"
    )


if __name__ == "__main__":
    _WORK = tempfile.mkdtemp(prefix="df-pipeline-bench-")  # inputs and outputs, removed at exit
    try:
        main()
    finally:
        shutil.rmtree(_WORK, ignore_errors=True)
