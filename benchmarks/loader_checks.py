"""What the loader's shard checks cost, measured in one process on one synthetic dataset.

* start-up (``build_dataloader``: every shard checked, inflated into the cache and its
  ``num_tokens`` read) with the index's hashes verified vs ``verify_hashes=False``;
* one epoch of samples read with ``pread`` (the loader's reads, which turn a shard cut
  while open into an error) vs slices of a memory map of the same shard (SIGBUS then).

    .venv/bin/python benchmarks/loader_checks.py [--samples 200000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import mmap
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dataforge.io.mds import MDSShardWriter  # noqa: E402
from dataforge.loader import LoaderConfig, build_dataloader  # noqa: E402

COLUMNS = {"id": "str", "text": "str", "source": "str", "lang": "str", "meta": "json",
           "tokens": "ndarray:uint16", "num_tokens": "int"}  # fmt: skip


def write(root: Path, samples: int, compression: str | None) -> int:
    writer = MDSShardWriter(root, COLUMNS, compression=compression, hashes=["xxh64"],
                            size_limit=1 << 26)  # fmt: skip
    rng = np.random.default_rng(0)
    for i in range(samples):
        tokens = rng.integers(1, 30000, 64 + i % 192).astype(np.uint16)
        writer.write({"id": f"s/{i}", "text": "text " * (len(tokens) // 2), "source": "s",
                      "lang": "en", "meta": {}, "tokens": tokens, "num_tokens": len(tokens)})  # fmt: skip
    writer.finish()
    return sum(p.stat().st_size for p in root.iterdir())


def startup(root: Path, cache: Path, verify: bool) -> float:
    t0 = time.perf_counter()
    config = LoaderConfig(streams=[{"path": str(root)}], cache_dir=str(cache), verify_hashes=verify)
    build_dataloader(config).close()
    return time.perf_counter() - t0


def read_all(path: Path, use_pread: bool) -> float:
    data = np.fromfile(path, np.uint8)
    n = int(data[:4].view(np.uint32)[0])
    offsets = data[4 : 4 * (n + 2)].view(np.uint32).astype(np.int64)
    t0 = time.perf_counter()
    with open(path, "rb") as f:
        if use_pread:
            fd = f.fileno()
            for i in range(n):
                os.pread(fd, int(offsets[i + 1] - offsets[i]), int(offsets[i]))
        else:
            view = np.frombuffer(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ), np.uint8)
            for i in range(n):
                bytes(view[offsets[i] : offsets[i + 1]])
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root, raw_root = Path(tmp) / "zstd", Path(tmp) / "raw"
        size = write(root, args.samples, "zstd")
        write(raw_root, args.samples, None)
        times: dict[bool, list[float]] = {True: [], False: []}
        for _ in range(args.rounds):  # alternated, so drift hits both alike
            for verify in (True, False):
                times[verify].append(startup(root, Path(tmp) / "cache", verify))
        on, off = np.median(times[True]), np.median(times[False])
        print(f"dataset: {args.samples} samples, {size / 1e6:.1f} MB zstd")
        print(f"start-up, hashes verified {on:.2f} s, not verified {off:.2f} s: {on / off:.3f}x")
        shard = raw_root / "shard.00000.mds"
        reads = {p: np.median([read_all(shard, p) for _ in range(args.rounds)]) for p in (1, 0)}
        n = int(np.fromfile(shard, np.uint32, 1)[0])
        extra = (reads[1] - reads[0]) / n * 1e6
        print(
            f"reading the {n} samples of {shard.name}: pread {reads[1]:.3f} s, mmap slices "
            f"{reads[0]:.3f} s: {reads[1] / reads[0]:.2f}x ({extra:.1f} us more a sample)"
        )


if __name__ == "__main__":
    main()
