"""MinHash dedup throughput per core: ours (signatures + index + verification + clustering)
vs datasketch (MinHash + MinHashLSH + union-find) and a bare rensa loop, on the same
documents from the demo corpus, all in this one process (so docs/s is per core).

    .venv/bin/python benchmarks/dedup_speed.py [--docs 4000]
    .venv/bin/python benchmarks/dedup_speed.py --scale 1000000 [--shards 2]   # end to end

The per-core run: real documents with one in five a near-copy of another (every kind of
``benchmarks/dedup_sets.py``), so that the candidate verification of ours does real work.

``--scale N`` generates N documents from the demo corpus (80%: 4-10 random real sentences
joined; 20%: copies of an earlier generated document with 0-10% of the characters
substituted, so about 0.8 of the documents should be kept), runs
``prepare`` per 10k-document batch in this process, writes the prepared parts (with the
text column: verification reads the candidates' texts back), then runs the planner on Ray
index actors, and
prints time per phase, the peak memory of the driver and of every index actor, and the
kept fraction.
"""

from __future__ import annotations

import argparse
import random
import re
import resource
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from dedup_quality import (  # noqa: E402
    _baseline_tokens,
    _clusters_from_pairs,
    records_table,
    run_ours,
)
from dedup_sets import KINDS, load_bases, make_variant  # noqa: E402

from dataforge.ops.barrier import BarrierContext  # noqa: E402
from dataforge.ops.base import OpContext  # noqa: E402
from dataforge.ops.dedup import Dedup  # noqa: E402
from dataforge.ops.dedup.config import MinHashConfig  # noqa: E402
from dataforge.runtime.shards import shard_workers  # noqa: E402


def _timed(fn, repeat: int = 2) -> float:
    """Best CPU seconds (all threads of this process) of ``repeat`` runs: a per-core
    measure that other processes on a shared machine do not inflate."""
    best = float("inf")
    for _ in range(repeat):
        t = time.process_time()
        fn()
        best = min(best, time.process_time() - t)
    return best


def bench_datasketch(records, threshold, num_perm):
    from datasketch import MinHash, MinHashLSH

    lsh = MinHashLSH(threshold=threshold, num_perm=num_perm)
    pairs = []
    for r in records:
        m = MinHash(num_perm=num_perm)
        m.update_batch([t.encode() for t in _baseline_tokens(r["text"], r["lang"])])
        pairs += [(r["id"], o) for o in lsh.query(m)]
        lsh.insert(r["id"], m)
    return _clusters_from_pairs([r["id"] for r in records], pairs)


def bench_rensa(records, num_perm, with_lsh: bool, bands: int = 16):
    import rensa

    lsh = rensa.RMinHashLSH(threshold=0.5, num_perm=num_perm, num_bands=bands) if with_lsh else None
    for i, r in enumerate(records):
        m = rensa.RMinHash(num_perm=num_perm, seed=42)
        m.update(_baseline_tokens(r["text"], r["lang"]))
        if lsh is not None:
            lsh.query(m)
            lsh.insert(i, m)
        else:
            m.digest()


def per_core(args) -> int:
    """The documents: real bases, a quarter of them followed by a near-duplicate (kinds in
    rotation), so that verification has real work (about 1 in 5 documents is a copy)."""
    rng = random.Random(args.seed)
    n_bases = args.docs * 4 // 5
    bases = load_bases(Path(args.demo), n_bases // 4 + 1, args.seed)[:n_bases]
    records = []
    for i, (doc_id, text, lang) in enumerate(bases):
        records.append({"id": doc_id, "text": text, "lang": lang, "group": i, "kind": "base"})
        kind = KINDS[i % len(KINDS)]
        variant = make_variant(text, lang, kind, rng) if i % 4 == 0 else None
        if variant is not None:
            records.append(
                {"id": f"~{doc_id}", "text": variant, "lang": lang, "group": i, "kind": kind}
            )
    n = len(records)
    chars = sum(len(r["text"]) for r in records)
    print(
        f"{n} documents ({n - len(bases)} near-copies), {chars / n:.0f} chars on average, num_perm={args.num_perm}"
    )
    threshold = Dedup.Config().threshold
    timings = {
        "ours (rensa engine)": _timed(
            lambda: run_ours(records, minhash={"num_perm": args.num_perm})
        ),
        "ours (numpy engine)": _timed(
            lambda: run_ours(records, minhash={"num_perm": args.num_perm, "engine": "numpy"})
        ),
        "datasketch MinHash+LSH": _timed(
            lambda: bench_datasketch(records, threshold, args.num_perm)
        ),
        "bare rensa RMinHash loop": _timed(lambda: bench_rensa(records, args.num_perm, False)),
        "bare rensa RMinHash+LSH loop": _timed(lambda: bench_rensa(records, args.num_perm, True)),
    }
    rate = {k: n / v for k, v in timings.items()}
    for name, r in rate.items():
        print(f"{name:<30} {r:>9.0f} docs/s per core  ({timings[name]:.2f} CPU s)")
    ours = rate["ours (rensa engine)"]
    print(f"ratio ours/datasketch: {ours / rate['datasketch MinHash+LSH']:.2f}")
    print(f"ratio ours/bare rensa signatures: {ours / rate['bare rensa RMinHash loop']:.2f}")
    print(f"ratio ours/bare rensa+LSH: {ours / rate['bare rensa RMinHash+LSH loop']:.2f}")
    return 0


# -- end to end at scale -----------------------------------------------------------------


def sentence_pool(bases) -> dict[str, list[str]]:
    """Sentences of the base texts by language (the building blocks of generated docs)."""
    pool: dict[str, list[str]] = {"zh": [], "en": []}
    for _, text, lang in bases:
        pattern = r"(?<=[。！？\n])" if lang == "zh" else r"(?<=[.!?\n])\s+"
        pool[lang] += [s for s in re.split(pattern, text) if len(s.strip()) >= 10]
    return pool


def generate(bases, total: int, batch: int, seed: int):
    """Batches of generated records: 80% new documents of 4-10 random real sentences of
    one language (two such documents share almost nothing), 20% copies of an earlier
    generated document with 0-10% of the characters substituted."""
    rng = random.Random(seed)
    pool = sentence_pool(bases)
    made: list[tuple[str, str]] = []
    for start in range(0, total, batch):
        out = []
        for i in range(start, min(start + batch, total)):
            if made and rng.random() < 0.2:
                text, lang = made[rng.randrange(len(made))]
                chars = list(text)
                for _ in range(int(len(chars) * rng.random() * 0.1)):
                    chars[rng.randrange(len(chars))] = rng.choice(chars)
                text = "".join(chars)
            else:
                lang = "zh" if rng.random() < 0.6 else "en"
                sents = rng.sample(pool[lang], rng.randint(4, 10))
                text = ("" if lang == "zh" else " ").join(sents)
            if len(made) < 200_000:
                made.append((text, lang))
            else:
                made[rng.randrange(len(made))] = (text, lang)
            out.append(
                {"id": f"gen-{i:08d}", "text": text, "lang": lang, "group": i, "kind": "base"}
            )
        yield out


def at_scale(args) -> int:
    import ray

    bases = load_bases(Path(args.demo), 100_000, args.seed)
    op = Dedup(
        Dedup.Config(minhash=MinHashConfig(num_perm=args.num_perm), index_shards=args.shards),
        OpContext(),
    )
    op.setup()
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        tmp = Path(tmp)
        parts, t0, chars = {}, time.perf_counter(), 0
        prep = prep_cpu = 0.0
        for k, recs in enumerate(generate(bases, args.scale, 10_000, args.seed)):
            table = records_table(recs)
            chars += sum(len(r["text"]) for r in recs)
            t, c = time.perf_counter(), time.process_time()
            prepared = op.prepare(table)
            prep += time.perf_counter() - t
            prep_cpu += time.process_time() - c
            parts[f"t{k:05d}"] = tmp / f"t{k:05d}.parquet"
            pq.write_table(prepared, parts[f"t{k:05d}"])
        gen = time.perf_counter() - t0 - prep
        print(
            f"{args.scale} docs, {len(parts)} parts ({chars / args.scale:.0f} chars avg): generated in {gen:.0f}s, "
            f"prepare {prep:.0f}s wall, {prep_cpu:.0f}s CPU = {args.scale / prep_cpu:.0f} docs/s "
            "per core",
            flush=True,
        )
        ray.init(
            address="local", num_cpus=args.shards, include_dashboard=False, log_to_driver=False
        )
        ctx = BarrierContext(
            parts=parts,
            decision_dir=tmp / "decisions",
            audit_dir=tmp / "OUT" / "dedup",
            num_cpus=args.shards,
            seed=0,
            source_stats={},
            sources={},
            shards=shard_workers(True, args.shards),
        )
        t, c = time.perf_counter(), time.process_time()
        summary = op.plan(ctx)
        plan_s, plan_cpu = time.perf_counter() - t, time.process_time() - c
        ray.shutdown()
    driver_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"plan (keys + index + verify + components + decisions) {plan_s:.0f}s wall on "
        f"{args.shards} index actors ({plan_cpu:.0f}s CPU in the driver)"
    )
    print(f"summary: {summary}")
    print(f"kept fraction: {summary['kept'] / summary['docs']:.4f}")
    print(f"peak RSS: driver {driver_mb:.0f} MiB; index actors {summary['shard_peak_rss_mb']} MiB")
    print(
        f"total dedup stage time {prep + plan_s:.0f}s = {args.scale / (prep + plan_s):.0f} docs/s"
    )
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--demo", default=str(ROOT / "data" / "demo"))
    ap.add_argument("--docs", type=int, default=3000)
    ap.add_argument("--num-perm", type=int, default=128)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--scale", type=int, default=0, help="end-to-end run on N generated docs")
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--tmp", default=None, help="directory for the prepared parts")
    args = ap.parse_args()
    if not (Path(args.demo) / ".done").exists():
        print(f"{args.demo} is not built (make demo-data)", file=sys.stderr)
        return 2
    return at_scale(args) if args.scale else per_core(args)


if __name__ == "__main__":
    sys.exit(main())
