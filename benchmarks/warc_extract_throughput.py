"""WARC reading + main-text extraction: dataforge (``format: warc`` + ``extract``) against
datatrove 0.10.1 (``WarcReader`` + ``Trafilatura``) on the same files.

Inputs: demo-corpus articles (news_zh) and documentation pages (docs_en) in the page
templates of ``tests/web/webkit.py`` (navigation, cookie banner, sidebar, footer), written
as ``--files`` gzip-per-record WARC files, each page after its request record. Both
sides use trafilatura with ``favor_precision`` and no deduplication, and write JSON lines;
dataforge also runs with ``engine: resiliparse``.
datatrove runs on ``LocalPipelineExecutor`` with one task per file and ``--cpus`` workers,
dataforge with ``dataforge run`` (``ray.num_cpus`` = ``--cpus``). Every run is a fresh
subprocess (start-up counts), the two interleaved ``--rounds`` times; the medians and
their ratio are printed. datatrove is installed once into its own virtualenv (``--venv``);
``--no-datatrove`` leaves it out. ``--baseline DIR`` also times the dataforge checkout in
``DIR`` (both engines) in the same rounds and prints this checkout's time over its.

    .venv/bin/python benchmarks/warc_extract_throughput.py [--pages 1200] [--rounds 3]
        [--no-datatrove] [--baseline ../main]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "web"))
# lxml_html_clean: trafilatura's fallback extractors import it; newer lxml left it out
PEERS = (
    "datatrove==0.10.1",
    "warcio==1.8.1",
    "trafilatura==2.3.1",
    "lxml_html_clean",
    "faust-cchardet",  # WarcReader: charset detection
    "python-magic",  # WarcReader: content sniffing
    "orjson",  # JsonlWriter
)

PIPELINE = """\
name: warc_bench
seed: 1
inputs:
  - {{name: crawl, path: "{corpus}/*.warc.gz", format: warc, lang: zh, encoding: auto}}
ray: {{num_cpus: {cpus}}}
stages:
  - {{op: extract, engine: {engine}, favor: precision}}
output: {{path: {out}, format: jsonl}}
"""

DATATROVE = """\
import sys
from datatrove.executor import LocalPipelineExecutor
from datatrove.pipeline.extractors import Trafilatura
from datatrove.pipeline.readers import WarcReader
from datatrove.pipeline.writers import JsonlWriter


def main():
    corpus, work, workers, files = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    LocalPipelineExecutor(pipeline=[
        WarcReader(corpus, glob_pattern="*.warc.gz"),
        Trafilatura(favour_precision=True, deduplicate=False, timeout=10.0),
        JsonlWriter(f"{work}/output", output_filename="${rank}.jsonl", compression=None),
    ], tasks=files, workers=workers, logging_dir=f"{work}/logs").run()


if __name__ == "__main__":  # its executor spawns worker processes
    main()
"""


def ensure_venv(venv: Path, packages: tuple[str, ...] = PEERS) -> Path:
    """A virtualenv with ``packages`` (made once; ``.installed`` lists them)."""
    python = venv / "bin" / "python"
    if (venv / ".installed").exists():
        return python
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", *packages], check=True)
    (venv / ".installed").write_text(" ".join(packages) + "\n")
    return python


def demo_pages(pages: int) -> list:
    """About ``pages`` web pages of demo text (2/3 zh news, 1/3 en docs)."""
    import importlib.util

    from webkit import make_pages

    spec = importlib.util.spec_from_file_location("tests_conftest", ROOT / "tests" / "conftest.py")
    fixtures = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fixtures)
    read_demo_texts = fixtures.read_demo_texts

    zh = [t for t in read_demo_texts("news_zh", pages * 2) if len(t) >= 300][: pages * 2 // 3]
    en = [t for t in read_demo_texts("docs_en", 400) if len(t) >= 300][: pages - len(zh)]
    return make_pages(zh, en)


def build_corpus(corpus: Path, pages: int, files: int) -> int:
    """``files`` WARC files of about ``pages`` pages (2/3 zh news, 1/3 en docs)."""
    from webkit import write_warc

    all_pages = demo_pages(pages)
    corpus.mkdir(parents=True, exist_ok=True)
    for k in range(files):
        write_warc(corpus / f"part-{k:03d}.warc.gz", all_pages[k::files], extras=False)
    return len(all_pages)


def timed(cmd: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=1200)
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cpus", type=int, default=2)
    parser.add_argument("--work", type=Path, default=ROOT / "build" / "warc_bench")
    parser.add_argument("--venv", type=Path, default=ROOT / "build" / "warc-peers-venv")
    parser.add_argument("--no-datatrove", dest="datatrove", action="store_false")
    parser.add_argument("--baseline", type=Path, help="another dataforge checkout to time")
    args = parser.parse_args()
    corpus, out = args.work / "corpus", args.work / "out"
    n = build_corpus(corpus, args.pages, args.files)
    mbytes = sum(f.stat().st_size for f in corpus.glob("*.warc.gz")) / 1e6
    pipelines = {}
    for engine in ("trafilatura", "resiliparse"):
        pipelines[engine] = args.work / f"warc_bench_{engine}.yaml"
        pipelines[engine].write_text(
            PIPELINE.format(corpus=corpus, out=out / engine, cpus=args.cpus, engine=engine)
        )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    dataforge = [sys.executable, "-m", "dataforge.cli", "run"]
    runs = {
        "dataforge": ([*dataforge, str(pipelines["trafilatura"]), "--overwrite"], env),
        "dataforge, resiliparse": ([*dataforge, str(pipelines["resiliparse"]), "--overwrite"], env),
    }
    if args.datatrove:
        (args.work / "datatrove_warc.py").write_text(DATATROVE)
        peer = [str(ensure_venv(args.venv)), str(args.work / "datatrove_warc.py"), str(corpus),
                str(out / "datatrove"), str(args.cpus), str(args.files)]  # fmt: skip
        runs["datatrove"] = (peer, env)
    if args.baseline is not None:
        base_env = {**os.environ, "PYTHONPATH": str(args.baseline.resolve())}
        for name in ("dataforge", "dataforge, resiliparse"):
            runs[f"baseline {name}"] = (runs[name][0], base_env)
    print(f"{n} pages in {args.files} WARC files ({mbytes:.1f} MB gzip); {args.cpus} CPUs")
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    for round_ in range(args.rounds):
        for name, (cmd, run_env) in runs.items():
            if name == "datatrove":  # its writer would add to an earlier round's files
                subprocess.run(["rm", "-rf", str(out / "datatrove")], check=True)
            seconds[name].append(timed(cmd, run_env))
            print(f"  round {round_ + 1}: {name:<31} {seconds[name][-1]:6.1f} s", flush=True)
    median = {name: statistics.median(v) for name, v in seconds.items()}
    outputs = {
        "dataforge": out / "trafilatura",
        "datatrove": out / "datatrove" / "output",
        "dataforge, resiliparse": out / "resiliparse",
    }
    for name, value in median.items():
        folder = outputs[name.removeprefix("baseline ")]
        kept = sum(1 for f in folder.rglob("*.jsonl") for _ in open(f))
        print(f"{name:<31} median {value:6.1f} s  {n / value:7.1f} pages/s  kept {kept}")
    print(f"load average (1 min) at the end: {os.getloadavg()[0]:.1f}")
    for name in ("dataforge", "dataforge, resiliparse"):
        for other, label in (
            ("datatrove", "datatrove / {}"),
            (f"baseline {name}", "{} / baseline"),
        ):
            if other not in seconds:
                continue
            num, den = (other, name) if other == "datatrove" else (name, other)
            paired = [a / b for a, b in zip(seconds[num], seconds[den], strict=True)]
            print(
                f"{label.format(name)}: {median[num] / median[den]:.2f}x (per round: "
                f"{', '.join(f'{r:.2f}' for r in paired)}; median {statistics.median(paired):.2f}x)"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
