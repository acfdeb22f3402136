"""The web recipe end to end, WARC in: dataforge's ``pipelines/web_zh.yaml`` against
datatrove 0.10.1's FineWeb-style pipeline, on the same WARC files, same machine.

- dataforge: the shipped recipe (extract -> url_filter -> lang_id -> clean -> quality_filter
  -> line_dedup -> MinHash dedup -> pii -> tokenize into MDS), only its inputs and output
  moved, as ``dataforge run`` with ``ray.num_cpus`` = ``--cpus``, on ``--executor`` (``ray``:
  embedded Ray, whose start and stop, about 6 s, weigh on small runs; ``local``: forked
  worker processes);
- datatrove: ``WarcReader`` -> ``Trafilatura`` (favour_precision, as dataforge's extract) ->
  ``FTFYFormatter`` -> ``GopherRepetitionFilter`` -> ``GopherQualityFilter`` ->
  ``FineWebQualityFilter`` -> ``MinhashDedupSignature``, then its buckets, clusters and
  ``MinhashDedupFilter`` -> ``JsonlWriter`` (the stages of ``benchmarks/peers.py``, with
  its rjieba word tokenizer), on ``LocalPipelineExecutor`` with ``--cpus`` workers. It does
  less than dataforge (no language id, line dedup, PII or tokenization: FineWeb's language
  filter needs a model download), so the ratio understates dataforge's lead.

Pages: demo-corpus news (zh) and documentation (en) in the page templates of
``tests/web/webkit.py``; ``--dup-share`` of them are near-copies (a few paragraphs changed,
a new URL) of originals drawn with Zipf weights, so clusters have a crawl's heavy tail.
Every run is a fresh subprocess, the two interleaved ``--rounds`` times; medians and their
ratio are printed. Extraction quality on real pages is ``benchmarks/extract_quality.py``
(its ``trafilatura precision`` row is what datatrove's extractor does). Not part of
``make test``.

    .venv/bin/python benchmarks/web_recipe_peers.py [--pages 1200] [--rounds 3] [--cpus 2] \
        [--executor ray|local]
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.metadata
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests" / "web"))
from peers import DATATROVE, DATATROVE_RECIPE  # noqa: E402
from warc_extract_throughput import PEERS, ensure_venv  # noqa: E402

# datatrove's recipe of peers.py, reading WARC and extracting as FineWeb does.
READ_JSONL = """JsonlReader(corpus, glob_pattern="*/*.jsonl", id_key="id"),"""
READ_WARC = """WarcReader(corpus, glob_pattern="*.warc.gz"),
        Trafilatura(favour_precision=True, deduplicate=False, timeout=10.0),"""
WEB_IMPORTS = """from datatrove.pipeline.extractors import Trafilatura
from datatrove.pipeline.readers import WarcReader
"""


def datatrove_web_recipe(files: int) -> str:
    recipe = DATATROVE_RECIPE.replace(READ_JSONL, READ_WARC).replace(
        "files = 16", f"files = {files}"
    )
    assert READ_WARC in recipe and f"files = {files}" in recipe, "peers.py's recipe changed"
    return WEB_IMPORTS + recipe


def build_corpus(corpus: Path, pages: int, files: int, dup_share: float, seed: int) -> int:
    """``files`` WARC files of ``pages`` pages, ``dup_share`` of them near-copies."""
    from warc_extract_throughput import demo_pages
    from webkit import write_warc

    originals = demo_pages(round(pages * (1 - dup_share)))
    rng = random.Random(seed)
    weights = [1 / (rank + 1) for rank in range(len(originals))]  # Zipf: a heavy tail
    copies = []
    for k, page in enumerate(rng.choices(originals, weights, k=pages - len(originals))):
        paragraphs = list(page.paragraphs)
        for _ in range(max(1, len(paragraphs) // 20)):  # about 5% of the paragraphs
            i = rng.randrange(len(paragraphs))
            paragraphs[i] = rng.choice(originals).paragraphs[0]
        copies.append(dataclasses.replace(page, url=f"{page.url}?copy={k}", paragraphs=paragraphs))
    every = originals + copies
    rng.shuffle(every)
    corpus.mkdir(parents=True, exist_ok=True)
    for k in range(files):
        write_warc(corpus / f"part-{k:03d}.warc.gz", every[k::files], extras=False)
    return len(every)


def recipe_yaml(corpus: Path, out: Path, cpus: int) -> str:
    text = (ROOT / "pipelines" / "web_zh.yaml").read_text(encoding="utf-8")
    text = text.replace("../data/crawl/*.warc.gz", f"{corpus}/*.warc.gz")
    text = text.replace("../tokenizers/demo", str(ROOT / "tokenizers" / "demo"))
    text = text.replace("../out/web_zh", str(out))
    assert str(corpus) in text and str(out) in text, "pipelines/web_zh.yaml changed"
    return text + f"ray: {{num_cpus: {cpus}}}\n"


def timed(cmd: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{done.stderr[-3000:]}")
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=1200)
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--dup-share", type=float, default=0.3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cpus", type=int, default=2)
    parser.add_argument("--executor", choices=("ray", "local"), default="ray")
    parser.add_argument("--work", type=Path, default=ROOT / "build" / "web_recipe_bench")
    parser.add_argument("--venv", type=Path, default=ROOT / "build" / "web-peers-venv")
    args = parser.parse_args()
    rjieba = f"rjieba=={importlib.metadata.version('rjieba')}"
    # datatrove[processing] pins its own trafilatura: its pipeline as its users install it.
    peers = tuple(p for p in PEERS if not p.startswith(("datatrove", "trafilatura")))
    python = ensure_venv(args.venv, (DATATROVE, *peers, rjieba))
    args.work = args.work.resolve()  # the pipeline's paths are read relative to its file
    corpus, out = args.work / "corpus", args.work / "out"
    n = build_corpus(corpus, args.pages, args.files, args.dup_share, seed=1)
    mbytes = sum(f.stat().st_size for f in corpus.glob("*.warc.gz")) / 1e6
    pipeline = args.work / "web_zh.yaml"
    pipeline.write_text(recipe_yaml(corpus, out / "dataforge", args.cpus), encoding="utf-8")
    (args.work / "datatrove_web.py").write_text(datatrove_web_recipe(args.files))
    from dataforge.text.stats import load_stopwords

    stop_words = args.work / "stop_words.json"
    stop_words.write_text(json.dumps([*load_stopwords("en"), *load_stopwords("zh")]))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    runs = {
        "dataforge": [sys.executable, "-m", "dataforge.cli", "run", str(pipeline), "--overwrite",
                      "--executor", args.executor],
        "datatrove": [str(python), str(args.work / "datatrove_web.py"), str(corpus),
                      str(out / "datatrove"), str(args.cpus), str(stop_words)],
    }  # fmt: skip
    print(f"{n} pages ({args.dup_share:.0%} near-copies) in {args.files} WARC files "
          f"({mbytes:.1f} MB gzip); {args.cpus} CPUs; "
          f"dataforge executor {args.executor}")  # fmt: skip
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    for round_ in range(args.rounds):
        for name, cmd in runs.items():
            if name == "datatrove":  # its writer would add to an earlier round's files
                subprocess.run(["rm", "-rf", str(out / "datatrove")], check=True)
            seconds[name].append(timed(cmd, env))
            print(f"  round {round_ + 1}: {name:<10} {seconds[name][-1]:6.1f} s", flush=True)
    median = {name: statistics.median(v) for name, v in seconds.items()}
    manifest = json.loads((out / "dataforge" / "manifest.json").read_text())
    kept = {
        "dataforge": manifest["counts"]["total"]["kept"],
        "datatrove": sum(
            1 for f in (out / "datatrove" / "output").glob("*.jsonl") for _ in open(f)
        ),
    }
    for name, value in median.items():
        print(f"{name:<10} median {value:6.1f} s  {n / value:7.1f} pages/s  kept {kept[name]}")
    print(f"load average (1 min) at the end: {os.getloadavg()[0]:.1f}")
    paired = [p / d for p, d in zip(seconds["datatrove"], seconds["dataforge"], strict=True)]
    print(
        f"datatrove / dataforge: {median['datatrove'] / median['dataforge']:.2f}x (per round: "
        f"{', '.join(f'{r:.2f}' for r in paired)}; goal >= 3x)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
