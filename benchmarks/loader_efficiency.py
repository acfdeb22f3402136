"""Loader efficiency on the demo shards: padding efficiency and throughput vs baselines.

Shards: ``--mds DIR`` (e.g. ``out/demo/mds`` from ``dataforge run pipelines/demo.yaml``), or
by default the demo corpus (data/demo) tokenized here with the demo tokenizer
(tokenizers/demo) into ``build/loader_bench/<sources>-<docs>/mds`` in the pipeline's column
layout (cached; ``--docs`` per source caps the size).

Padding efficiency = real tokens / batch tokens (rows x padded length), one epoch, every
sample truncated to ``--max-seq-len``:

* fixed:       ``max_tokens // max_seq_len`` samples per batch in random order, pad to longest
* group_by_length: HF Trainer's LengthGroupedSampler (megabatches of 50 batches sorted by
  length, longest batch first), same batch size, pad to longest
* ours bucketed: dynamic batches from the bounded shuffle buffer within ``--max-tokens``
* ours packed: ``packing=True``

Throughput (real tokens/s, one epoch, same shards, same process): the loader vs a plain
``streaming.StreamingDataset`` + ``torch DataLoader`` with pad-to-longest collation, at
0 and 2 workers; ratios printed.

    .venv/bin/python benchmarks/loader_efficiency.py [--quick] [--mds DIR] [--sources docs_en]
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dataforge.loader import LoaderConfig, build_dataloader  # noqa: E402

SOURCES = ("news_zh", "reviews_zh", "docs_en", "pkgdesc_en")


def _read_texts(source: str, limit: int) -> list[tuple[str, str]]:
    """(id, text) of up to ``limit`` demo records of ``source``."""
    import pyarrow.parquet as pq
    import zstandard

    out: list[tuple[str, str]] = []
    for path in sorted((ROOT / "data/demo" / source).iterdir()):
        if path.suffix == ".parquet":
            rows = pq.read_table(path, columns=["id", "text"]).to_pylist()
        else:
            if path.name.endswith(".zst"):
                raw = zstandard.ZstdDecompressor().stream_reader(path.open("rb"))
                lines = io.TextIOWrapper(raw, encoding="utf-8")
            elif path.name.endswith(".gz"):
                lines = io.TextIOWrapper(gzip.open(path), encoding="utf-8")
            else:
                lines = path.open(encoding="utf-8")
            rows = [json.loads(line) for line in lines if line.strip()]
        out += [(str(r["id"]), r["text"]) for r in rows]
        if len(out) >= limit:
            break
    return out[:limit]


def build_shards(sources: list[str], docs: int) -> Path:
    """Tokenize demo records with the demo tokenizer into MDS (cached by sources and size)."""
    from streaming import MDSWriter

    from dataforge.tokenization import Tokenizer

    out = ROOT / "build/loader_bench" / f"{'+'.join(sources)}-{docs}" / "mds"
    if (out / "index.json").exists():
        return out
    tok = Tokenizer.load(ROOT / "tokenizers/demo")
    dtype = "uint16" if tok.vocab_size < 65536 else "int32"
    columns = {"id": "str", "text": "str", "source": "str", "lang": "str", "meta": "json",
               "tokens": f"ndarray:{dtype}", "num_tokens": "int"}  # fmt: skip
    tmp = out.with_name("mds.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    with MDSWriter(out=str(tmp), columns=columns, compression="zstd", size_limit=1 << 24) as writer:
        for source in sources:
            records = _read_texts(source, docs)
            lang = "zh" if source.endswith("_zh") else "en"
            for start in range(0, len(records), 512):
                chunk = records[start : start + 512]
                values, offsets = tok.encode_batch_flat([t for _, t in chunk], add_eos=True)
                for (rid, text), a, b in zip(chunk, offsets[:-1], offsets[1:], strict=True):
                    tokens = values[a:b].astype(dtype)
                    writer.write({"id": rid, "text": text, "source": source, "lang": lang, "meta": {},
                                  "tokens": tokens, "num_tokens": int(b - a)})  # fmt: skip
    tmp.rename(out)
    return out


def read_lengths(mds: Path) -> np.ndarray:
    with build_dataloader(LoaderConfig(streams=[str(mds)], cache_dir=tempfile.mkdtemp())) as loader:
        return loader.lengths.astype(np.int64)


def _padding(
    lengths: np.ndarray, order: np.ndarray, batch: int, max_tokens: int
) -> tuple[float, float]:
    """(padding efficiency, budget fill) of fixed-size batches over ``order``."""
    real = padded = batches = 0
    for start in range(0, len(order), batch):
        chunk = lengths[order[start : start + batch]]
        real, padded, batches = real + chunk.sum(), padded + len(chunk) * chunk.max(), batches + 1
    return real / padded, padded / (batches * max_tokens)


def fixed_efficiency(
    lengths: np.ndarray, batch: int, rng: np.random.Generator, max_tokens: int
) -> tuple[float, float]:
    return _padding(lengths, rng.permutation(len(lengths)), batch, max_tokens)


def group_by_length_efficiency(
    lengths: np.ndarray, batch: int, rng: np.random.Generator, max_tokens: int
) -> tuple[float, float]:
    """transformers.trainer_pt_utils.get_length_grouped_indices (mega_batch_mult=50)."""
    indices = rng.permutation(len(lengths))
    mega = 50 * batch
    groups = [
        sorted(indices[i : i + mega], key=lambda j: -lengths[j])
        for i in range(0, len(indices), mega)
    ]
    return _padding(lengths, np.concatenate(groups), batch, max_tokens)


def loader_pass(config: LoaderConfig) -> tuple[float, int, float, float]:
    """One epoch through the loader: (padding efficiency, real tokens, seconds, budget fill
    = batch tokens / (batches x max_tokens))."""
    with build_dataloader(config) as loader:
        start = time.perf_counter()
        real = total = batches = 0
        for batch in loader:
            real += int(batch["attention_mask"].sum())
            total += batch["input_ids"].numel()
            batches += 1
        seconds = time.perf_counter() - start
    return real / total, real, seconds, total / (batches * config.max_tokens)


def _pad_collate(samples: list[dict], max_len: int) -> dict[str, torch.Tensor]:
    seqs = [torch.from_numpy(s["tokens"][:max_len].astype(np.int64)) for s in samples]
    input_ids = torch.nn.utils.rnn.pad_sequence(seqs, batch_first=True, padding_value=0)
    attention_mask = torch.nn.utils.rnn.pad_sequence(
        [torch.ones_like(s) for s in seqs], batch_first=True
    )
    labels = input_ids.masked_fill(attention_mask == 0, -100)
    return {"input_ids": input_ids, "labels": labels, "attention_mask": attention_mask}


def baseline_pass(mds: Path, batch: int, max_len: int, workers: int) -> tuple[int, float]:
    """Plain StreamingDataset + DataLoader pad-to-longest: (real tokens, seconds)."""
    from functools import partial

    from streaming import Stream, StreamingDataset

    local = Path(tempfile.mkdtemp()) / "mds"
    local.symlink_to(mds.resolve(), target_is_directory=True)  # a fresh local dir: no shm clash
    dataset = StreamingDataset(
        streams=[Stream(local=str(local))], shuffle=True, shuffle_seed=1, batch_size=batch
    )
    loader = torch.utils.data.DataLoader(
        dataset,
        batch_size=batch,
        num_workers=workers,
        collate_fn=partial(_pad_collate, max_len=max_len),
    )
    start = time.perf_counter()
    real = sum(int(b["attention_mask"].sum()) for b in loader)
    seconds = time.perf_counter() - start
    del loader, dataset
    return real, seconds


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mds", type=Path, help="MDS directory (default: build from data/demo)")
    parser.add_argument("--sources", default=",".join(SOURCES), help="demo sources to tokenize")
    parser.add_argument("--docs", type=int, default=40000, help="records per source to tokenize")
    parser.add_argument("--max-tokens", type=int, default=16384)
    parser.add_argument("--max-seq-len", type=int, default=2048)
    parser.add_argument("--shuffle-buffer", type=int, default=32768)
    parser.add_argument(
        "--quick", action="store_true", help="2000 records per source, no 2-worker runs"
    )
    args = parser.parse_args()
    docs = 2000 if args.quick else args.docs
    mds = args.mds or build_shards(args.sources.split(","), docs)
    lengths = read_lengths(mds)
    clipped = np.minimum(lengths, args.max_seq_len)
    batch = args.max_tokens // args.max_seq_len
    rng = np.random.default_rng(0)
    print(f"shards: {mds}  samples: {len(lengths)}  tokens: {int(lengths.sum())}  "
          f"mean/median/max length: {lengths.mean():.0f}/{np.median(lengths):.0f}/{lengths.max()}")  # fmt: skip
    print(f"budget: max_tokens={args.max_tokens} max_seq_len={args.max_seq_len} fixed batch={batch} "
          f"shuffle_buffer={args.shuffle_buffer}")  # fmt: skip

    cache = tempfile.mkdtemp()
    # long_samples truncate: the baselines clip long samples too, so all sides see the same tokens
    base = dict(streams=[str(mds)], max_tokens=args.max_tokens, max_seq_len=args.max_seq_len,
                shuffle_buffer=args.shuffle_buffer, seed=1, cache_dir=cache,
                long_samples="truncate")  # fmt: skip
    fixed, fixed_fill = fixed_efficiency(clipped, batch, rng, args.max_tokens)
    grouped, grouped_fill = group_by_length_efficiency(clipped, batch, rng, args.max_tokens)
    ours, real0, secs0, fill = loader_pass(LoaderConfig(**base))
    packed, _, _, packed_fill = loader_pass(LoaderConfig(**base, packing=True))
    print("\npadding efficiency (real tokens / batch tokens)")
    print(f"  fixed batch, pad to longest   {fixed:.4f}   (fills {fixed_fill:.3f} of max_tokens)")
    print(
        f"  HF group_by_length            {grouped:.4f}   (fills {grouped_fill:.3f} of max_tokens)"
    )
    print(
        f"  ours, bucketed                {ours:.4f}   ({ours / fixed:.2f}x fixed, {ours / grouped:.3f}x group_by_length)"
    )
    print(f"  ours, packed                  {packed:.4f}")
    print(
        f"  (ours: batches fill {fill:.3f} of max_tokens on average bucketed, {packed_fill:.3f} packed)"
    )

    print("\nthroughput (real tokens/s, one epoch)")
    for workers in (0,) if args.quick else (0, 2):
        if workers:
            _, real0, secs0, _ = loader_pass(LoaderConfig(**base, num_workers=workers))
        real_b, secs_b = baseline_pass(mds, batch, args.max_seq_len, workers)
        ours_tps, base_tps = real0 / secs0, real_b / secs_b
        print(f"  workers={workers}: ours {ours_tps / 1e6:.2f}M  baseline {base_tps / 1e6:.2f}M  "
              f"ratio {ours_tps / base_tps:.2f}x")  # fmt: skip
    shutil.rmtree(cache, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
