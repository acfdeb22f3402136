"""One large JSONL file through read+clean+quality+write: split on Ray vs the single-process loop.

A single uncompressed JSONL file is generated at run time (real text: the demo corpus's
news and docs records, each line made unique by its number) under ``--tmp``. The baseline
reads it as one task in this process (``LocalExecutor``, ``read.split_bytes: null``); the
Ray run splits it into tasks of ``--split-mb`` (default: the file / 8, at most 128 MiB, the
default ``read.split_bytes``) on embedded local Ray with ``--cpus`` CPUs (``--cpus``
actors, as ``dataforge run`` does). Both write MDS;
their counts must agree. Prints MB/s of input and the ratio.

    .venv/bin/python benchmarks/split_throughput.py              # 64 MB file
    .venv/bin/python benchmarks/split_throughput.py --gb 2       # the issue's 2 GB figure
"""

from __future__ import annotations

import argparse
import glob
import io
import json
import shutil
import tempfile
import time
from pathlib import Path

import zstandard

from dataforge.config import InputConfig, OutputConfig, PipelineConfig, ReadConfig, StageConfig
from dataforge.ops.base import op_class
from dataforge.runtime.executors.local import LocalExecutor
from dataforge.runtime.pipeline import run_pipeline

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "data" / "demo"


def _demo_texts() -> list[tuple[str, str]]:
    """(lang, text) of the demo corpus's news (zh) and docs (en) records."""
    texts = []
    for path in sorted(glob.glob(str(DEMO / "news_zh" / "*.jsonl.zst"))):
        with open(path, "rb") as f:
            data = zstandard.ZstdDecompressor().stream_reader(f).read()
        texts += [("zh", json.loads(line)["text"]) for line in io.BytesIO(data)]
    for path in sorted(glob.glob(str(DEMO / "docs_en" / "*.jsonl"))):
        with open(path, encoding="utf-8") as f:
            texts += [("en", json.loads(line)["text"]) for line in f]
    if not texts:
        raise SystemExit(f"no demo corpus under {DEMO}: run `make demo-data` first")
    return texts


def write_corpus(path: Path, size: int) -> int:
    """Write about ``size`` bytes of JSONL; returns the number of records."""
    texts = _demo_texts()
    n = 0
    written = 0
    with open(path, "wb") as f:
        while written < size:
            lang, text = texts[n % len(texts)]
            line = json.dumps({"text": f"{text}\n({n})", "lang": lang}, ensure_ascii=False)
            written += f.write(line.encode() + b"\n")
            n += 1
    return n


def bench_config(path: Path, split_bytes: int | None) -> PipelineConfig:
    stages = tuple(
        StageConfig(op=name, params=op_class(name).Config()) for name in ("clean", "quality_filter")
    )
    return PipelineConfig(
        name="split_bench",
        seed=1,
        inputs=(InputConfig(name="big", path=str(path), lang="zh"),),
        output=OutputConfig(path="out"),
        stages=stages,
        read=ReadConfig(split_bytes=split_bytes),
        base_dir=str(path.parent),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=64, help="file size in MB (default 64)")
    parser.add_argument("--gb", type=float, help="file size in GB (overrides --mb)")
    parser.add_argument("--split-mb", type=float, help="split size in MiB (default: file / 8)")
    parser.add_argument("--cpus", type=int, default=2)
    parser.add_argument("--tmp", default="/tmp", help="where the file and outputs go")
    args = parser.parse_args()
    size = int(args.gb * 1e9) if args.gb else int(args.mb * 1e6)
    split = int(args.split_mb * (1 << 20)) if args.split_mb else min(128 << 20, size // 8)
    work = Path(tempfile.mkdtemp(prefix="df-split-bench-", dir=args.tmp))
    quiet = lambda m: None  # noqa: E731
    try:
        path = work / "big.jsonl"
        records = write_corpus(path, size)
        mb = path.stat().st_size / 1e6

        t0 = time.perf_counter()
        base = run_pipeline(bench_config(path, None), work / "local", LocalExecutor(), log=quiet)
        local_s = time.perf_counter() - t0

        import ray

        from dataforge.runtime.executors.ray import RayExecutor

        t0 = time.perf_counter()
        ray.init(address="local", num_cpus=args.cpus, include_dashboard=False, log_to_driver=False)
        init_s = time.perf_counter() - t0
        config = bench_config(path, split)
        t0 = time.perf_counter()
        dist = run_pipeline(config, work / "ray", RayExecutor(config), log=quiet)
        ray_s = time.perf_counter() - t0
        ray.shutdown()
        assert dist["counts"] == base["counts"], "Ray and single-process runs must agree"
        print(
            f"input: one {mb:.0f} MB JSONL file, {records} records; Ray run: "
            f"{len(dist['inputs'])} splits of <= {split / (1 << 20):.1f} MiB"
        )
        print(f"single-process loop (1 task): {local_s:7.1f} s  {mb / local_s:6.2f} MB/s")
        print(
            f"dataforge run (Ray)         : {ray_s:7.1f} s  {mb / ray_s:6.2f} MB/s  "
            f"(+{init_s:.1f} s ray.init, {args.cpus} CPUs)"
        )
        print(
            f"ratio Ray / single-process: {local_s / ray_s:.2f}x "
            f"(including ray.init: {local_s / (ray_s + init_s):.2f}x)"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
