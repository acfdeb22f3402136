"""How the whole recipe grows with the input, on each executor.

Recipe: clean -> quality_filter -> MinHash dedup -> tokenize (the demo tokenizer) -> MDS.
Input: distinct documents built from the demo corpus (``data/demo``): document k is a copy
of a demo document (each used in turn, in a random order per round) in which every word
(Chinese: every Han character) is replaced, with probability :data:`SUBSTITUTE`, by one
drawn from the language's own words. Lengths, scripts, lines and word frequencies stay the
demo corpus's; two copies of one document share about 1/16 of their 2-gram shingles
(Jaccard ~0.03, far below dedup's threshold), so no document of the corpus is a duplicate
of another, whatever its size, and the work of every stage grows with the size, not just
the bytes read. Files of ~16 MB (at least 8 per language).

``--corpus dup-heavy`` is shaped like a crawl instead: a share :data:`NEAR_COPY_SHARE` of
the documents are near-copies (each word replaced with probability :data:`NEAR_COPY_EDIT`)
of earlier documents of the corpus, the original drawn by a Zipf law of exponent
:data:`ZIPF_EXPONENT` over the originals' ranks, so cluster sizes are heavy-tailed: the
first original gets the largest cluster (about a tenth of all copies), most get none.

Each (size, executor) is one fresh ``dataforge run --executor X`` subprocess; the script
polls ``/proc`` every 0.2 s for the run's process tree and prints wall seconds, CPU
seconds of the whole tree (user + system, the last reading of each process), the peak RSS
(``VmHWM``) of the driver and of the largest worker (Ray: its actors, named ``ray::``;
local: the driver's children) with the largest worker's private bytes (``RssAnon``,
sampled: ``VmHWM`` also counts the object store's shared pages an actor touched), and
per executor the exponent of wall time against size
fitted by least squares on the logs, with the Ray/local wall ratio per size. Linux only;
not part of ``make test``.

    .venv/bin/python benchmarks/scale.py                       # 256, 512, 1024, 2048 MB
    .venv/bin/python benchmarks/scale.py --sizes-mb 16 32 --cpus 2
    .venv/bin/python benchmarks/scale.py --corpus dup-heavy --sizes-mb 256 512 1024 2048 4096
    .venv/bin/python benchmarks/scale.py --corpus dup-heavy --memory-per-worker 1.5GB

``--dedup-alone`` measures the MinHash stage by itself (verification on): per size and
executor, the same input through no stage and through ``dedup`` alone (jsonl out); the
difference of their CPU seconds is dedup's, printed as input MB per CPU second (MB/s per
core) beside the whole run's.

    .venv/bin/python benchmarks/scale.py --corpus dup-heavy --dedup-alone --sizes-mb 256
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "build" / "scale"
FILE_BYTES = 16 << 20
sys.path.insert(0, str(ROOT / "benchmarks"))
from recipe_corpus import demo_documents, pipeline_yaml, write_jsonl  # noqa: E402

SUBSTITUTE = 0.5
"""Share of the words of a copy replaced: two copies share a 2-gram with chance 0.5^4."""
_TOKEN = re.compile(r"[\u4e00-\u9fff]|[^\W\d_\u4e00-\u9fff]+|[\W\d_]+")
"""A Han character, a run of other letters (a word), or a run of anything else."""
_BATCH = 4096
NEAR_COPY_SHARE = 0.3
NEAR_COPY_EDIT = 0.05
ZIPF_EXPONENT = 1.1
_ORIGINALS = 50_000
"""Originals a copy may be drawn from: the first documents of each language (the Zipf tail
beyond them is folded back onto them)."""


def demo_texts(data: Path) -> dict[str, list[str]]:
    """The demo corpus's texts per language."""
    return {
        lang: [t for _, t in docs if len(t) >= 8] for lang, docs in demo_documents(data).items()
    }


class _Encoded:
    """One language's documents as token ids, with the pools replacements come from."""

    def __init__(self, texts: list[str]) -> None:
        ids: dict[str, int] = {}
        self.docs = []
        for text in texts:
            doc = [ids.setdefault(t, len(ids)) for t in _TOKEN.findall(text)]
            self.docs.append(np.array(doc, np.int32))
        self.tokens = list(ids)
        # kind 1: a Han character, 2: a word, 0: the rest (kept as it is)
        self.kind = np.array(
            [1 if "\u4e00" <= t[0] <= "\u9fff" else 2 if t[0].isalpha() else 0
             for t in self.tokens], np.int8)  # fmt: skip
        every = np.concatenate(self.docs)
        self.pools = {k: every[self.kind[every] == k] for k in (1, 2)}


def build_corpus(
    by_lang: dict[str, list[str]], corpus: Path, total: int, seed: int = 0, dup_share: float = 0.0
) -> int:
    """``total`` bytes of new documents, split between the languages as the demo corpus
    is, in files of about :data:`FILE_BYTES`. Returns the number of documents."""
    rng = np.random.default_rng(seed)
    sizes = {lang: sum(len(t.encode()) for t in texts) for lang, texts in by_lang.items()}
    shutil.rmtree(corpus, ignore_errors=True)
    docs = 0
    for lang, texts in by_lang.items():
        want = total * sizes[lang] // sum(sizes.values())
        files = max(8, round(want / FILE_BYTES))
        new = _new_documents(rng, _Encoded(texts), lang, docs, want, dup_share)
        written, _ = write_jsonl(corpus / lang, new, files, start=docs)
        docs += written
    return docs


def _new_documents(
    rng: np.random.Generator, enc: _Encoded, lang: str, first: int, want: int, dup_share: float
):
    """``(id, text)`` of new documents until their jsonl lines hold ``want`` bytes; with
    ``dup_share`` > 0, that share of them near-copies of earlier ones (Zipf-drawn)."""
    written, k, order = 0, first, np.zeros(0, np.int64)
    originals: list[np.ndarray] = []
    while written < want:
        while len(order) < _BATCH:
            order = np.concatenate([order, rng.permutation(len(enc.docs))])
        batch, order = order[:_BATCH], order[_BATCH:]
        docs = _edited(rng, enc, [enc.docs[b] for b in batch], SUBSTITUTE)
        if dup_share > 0:
            docs = _with_near_copies(rng, enc, docs, originals, dup_share)
        for doc_ids in docs:
            doc = (f"{lang}-{k}", "".join([enc.tokens[i] for i in doc_ids.tolist()]))
            line = json.dumps({"id": doc[0], "text": doc[1]}, ensure_ascii=False)
            written += len(line.encode()) + 1
            k += 1
            yield doc
            if written >= want:
                return


def _edited(
    rng: np.random.Generator, enc: _Encoded, docs: list[np.ndarray], share: float
) -> list[np.ndarray]:
    """The documents with each word (Han character) replaced, with probability ``share``,
    by one drawn from the language's own words."""
    ids = np.concatenate(docs)
    bounds = np.cumsum([0] + [len(d) for d in docs])
    kinds = enc.kind[ids]
    swap = rng.random(len(ids)) < share
    for kind, pool in enc.pools.items():
        sel = swap & (kinds == kind)
        ids[sel] = pool[rng.integers(0, len(pool), int(sel.sum()))]
    return [ids[lo:hi] for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)]


def _with_near_copies(
    rng: np.random.Generator,
    enc: _Encoded,
    docs: list[np.ndarray],
    originals: list[np.ndarray],
    share: float,
) -> list[np.ndarray]:
    """``docs`` with a ``share`` of them replaced by near-copies of ``originals`` (the
    earlier distinct documents, which this extends), each original drawn by Zipf rank."""
    copy = rng.random(len(docs)) < share
    out = list(docs)
    picks = [i for i in range(len(docs)) if copy[i]]
    if originals and picks:
        ranks = (rng.zipf(ZIPF_EXPONENT, len(picks)) - 1) % len(originals)
        edited = _edited(rng, enc, [originals[r].copy() for r in ranks], NEAR_COPY_EDIT)
        for i, doc in zip(picks, edited, strict=True):
            out[i] = doc
    for i in range(len(docs)):
        if not (copy[i] and originals) and len(originals) < _ORIGINALS:
            originals.append(docs[i])
    return out


def _tree(root: int) -> dict[int, tuple[str, float, int, int | None, int]]:
    """pid -> (command, CPU seconds, peak RSS bytes, parent, private bytes now) of ``root``
    and its descendants. The peak RSS (``VmHWM``) counts the pages of shared memory a
    process touched, such as Ray's object store, whose objects an actor writes and reads
    in place; the private bytes (``RssAnon``) are its own."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    members, frontier = {root}, [root]
    while frontier:
        frontier = [pid for pid, ppid in parents.items() if ppid in frontier and pid not in members]
        members.update(frontier)
    tick = os.sysconf("SC_CLK_TCK")
    found = {}
    for pid in members:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            status = Path(f"/proc/{pid}/status").read_text()
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        cpu = (int(fields[11]) + int(fields[12])) / tick
        kib = {k: int(v.split()[0]) for k, _, v in (line.partition(":") for line in
               status.splitlines()) if k in ("VmHWM", "RssAnon")}  # fmt: skip
        found[pid] = (cmd, cpu, kib.get("VmHWM", 0) << 10, parents.get(pid),
                      kib.get("RssAnon", 0) << 10)  # fmt: skip
    return found


def measure(pipeline: Path, out: Path, executor: str, budget: str | None = None) -> dict:
    """One fresh run: wall, CPU seconds of its process tree, driver and largest worker RSS
    (``budget``: the run's ``ray.memory_per_worker``)."""
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, "-m", "dataforge.cli", "run", str(pipeline), "-o", str(out),
           "--executor", executor, "--progress", "off"]  # fmt: skip
    if budget:
        cmd += ["--set", f"ray.memory_per_worker={budget}"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONHASHSEED": "0"}
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    seen: dict[int, tuple] = {}
    while proc.poll() is None:
        for pid, (cmd_, cpu, hwm, ppid, anon) in _tree(proc.pid).items():
            old = seen.get(pid, (cmd_, 0.0, 0, ppid, 0))  # an exiting process reads as zeros
            seen[pid] = (cmd_ or old[0], max(old[1], cpu), max(old[2], hwm), old[3] or ppid,
                         max(old[4], anon))  # fmt: skip
        time.sleep(0.2)
    wall = time.perf_counter() - start
    stderr = proc.stderr.read().decode(errors="replace")
    if proc.returncode != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{stderr[-3000:]}")
    driver = seen.get(proc.pid, ("", 0.0, 0, None, 0))
    if executor == "ray":
        workers = [  # actors (tasks, index shards), not Ray's own agents
            v for v in seen.values() if v[0].startswith("ray::") and not v[0].endswith("Agent")
        ]
    else:
        workers = [v for pid, v in seen.items() if v[3] == proc.pid]
    runtime = json.loads((out / "manifest.json").read_text())["runtime"]
    return {
        "wall_s": wall,
        "cpu_s": sum(v[1] for v in seen.values()),
        "driver_rss_mb": driver[2] / 2**20,
        "worker_rss_mb": max((v[2] for v in workers), default=0) / 2**20,
        # sampled every 0.2 s: a shorter peak can be missed (VmHWM cannot)
        "worker_private_mb": max((v[4] for v in workers), default=0) / 2**20,
        "tasks_on_driver": runtime["tasks_on_driver"],
    }


def _dedup_alone(work: Path, corpus: Path, size: int, docs: int, args) -> None:
    """The corpus read and written with no stage, then with MinHash dedup alone."""
    recipe = pipeline_yaml("dedup-alone", corpus, work / "out", args.cpus)
    head, _, tail = recipe.partition("stages:")
    tail = tail[tail.index("output:") :]
    variants = {"none": "stages: []\n", "dedup": "stages:\n  - {op: dedup, method: minhash}\n"}
    for executor in args.executors:
        cpu = {}
        for name, stages in variants.items():
            pipeline = work / f"dedup-alone-{name}-{size}mb.yaml"
            pipeline.write_text(head + stages + tail)
            r = measure(pipeline, work / f"out-{name}-{executor}", executor)
            cpu[name] = r["cpu_s"]
            print(f"{size:6d} MB {docs:9d} docs  {executor:<5} {name:<5} wall {r['wall_s']:7.1f} s  "
                  f"CPU {r['cpu_s']:7.1f} s  largest worker RSS {r['worker_rss_mb']:6.0f} MB",
                  flush=True)  # fmt: skip
        mb = size * 2**20 / 1e6
        own = max(cpu["dedup"] - cpu["none"], 1e-9)
        print(f"{size} MB {executor}: dedup alone {mb / own:.2f} MB/s per core "
              f"({own:.1f} CPU s of its own); the run with it {mb / cpu['dedup']:.2f} MB/s per core "
              f"(goal >= 3; Data-Juicer's Ray MinHash ~0.46)", flush=True)  # fmt: skip


def exponent(sizes: list[float], walls: list[float]) -> float:
    """Slope of log(wall) against log(size), least squares."""
    xs, ys = [math.log(s) for s in sizes], [math.log(w) for w in walls]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes-mb", type=int, nargs="+", default=[256, 512, 1024, 2048])
    parser.add_argument("--cpus", type=int, default=2)
    parser.add_argument("--executors", nargs="+", default=["ray", "local"])
    parser.add_argument("--data", type=Path, default=ROOT / "data" / "demo")
    parser.add_argument("--work", type=Path, default=WORK, help=f"scratch folder ({WORK})")
    parser.add_argument("--corpus", choices=["distinct", "dup-heavy"], default="distinct")
    parser.add_argument(
        "--memory-per-worker", help="the runs' ray.memory_per_worker (e.g. 1.5GB); default: unset"
    )
    parser.add_argument("--dedup-alone", action="store_true", help="MinHash dedup's MB/s per core")
    args = parser.parse_args()
    dup_share = NEAR_COPY_SHARE if args.corpus == "dup-heavy" else 0.0
    work = args.work
    by_lang = demo_texts(args.data)
    results: dict[str, dict[int, dict[str, float]]] = {e: {} for e in args.executors}
    print(f"{args.cpus} CPUs; load average {os.getloadavg()[0]:.1f}; memory per worker "
          f"{args.memory_per_worker or 'unset (the run derives it)'}", flush=True)  # fmt: skip
    if dup_share:
        print(f"dup-heavy corpus: {NEAR_COPY_SHARE:.0%} near-copies ({NEAR_COPY_EDIT:.0%} of words "
              f"replaced), originals by Zipf rank, exponent {ZIPF_EXPONENT}", flush=True)  # fmt: skip
    for size in args.sizes_mb:
        corpus = work / f"corpus-{size}mb"
        docs = build_corpus(by_lang, corpus, size << 20, dup_share=dup_share)
        if args.dedup_alone:
            _dedup_alone(work, corpus, size, docs, args)
            shutil.rmtree(corpus)
            continue
        pipeline = work / f"scale-{size}mb.yaml"
        pipeline.write_text(pipeline_yaml("scale", corpus, work / "out", args.cpus, output="mds",
                                          tokenizer=ROOT / "tokenizers" / "demo"))  # fmt: skip
        for executor in args.executors:
            r = measure(pipeline, work / f"out-{executor}", executor, args.memory_per_worker)
            results[executor][size] = r
            print(f"{size:6d} MB {docs:9d} docs  {executor:<5} wall {r['wall_s']:7.1f} s  "
                  f"CPU {r['cpu_s']:7.1f} s  driver RSS {r['driver_rss_mb']:6.0f} MB  "
                  f"largest worker RSS {r['worker_rss_mb']:6.0f} MB "
                  f"(private {r['worker_private_mb']:6.0f} MB)  "
                  f"tasks on driver {r['tasks_on_driver']}", flush=True)  # fmt: skip
        shutil.rmtree(corpus)
    for executor, by_size in results.items():
        if len(by_size) > 1:
            fit = exponent(list(by_size), [r["wall_s"] for r in by_size.values()])
            print(f"{executor}: wall time grows as size^{fit:.2f} "
                  f"({min(by_size)}-{max(by_size)} MB; goal <= 1.05)")  # fmt: skip
    if {"ray", "local"} <= set(results) and not args.dedup_alone:
        for size in args.sizes_mb:
            ratio = results["ray"][size]["wall_s"] / results["local"][size]["wall_s"]
            print(f"{size} MB: Ray / local wall {ratio:.2f}x (goal at 1 GB: <= 1.15x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
