"""The same recipe on dataforge and on datatrove 0.10.1, and dataforge's Ray run against its
in-process executor, on the demo corpus re-sharded into 16 files.

Recipe: clean -> quality filter -> MinHash dedup at about 0.7 Jaccard -> jsonl.

- dataforge, ``dataforge run`` on embedded Ray (``ray.num_cpus`` = ``--cpus``; with
  ``--local`` also ``--executor local``), and the same
  pipeline through the in-process executor (``LocalExecutor``: one process, tasks one
  after the other), which then writes ``report.html`` as ``dataforge run`` does;
- datatrove 0.10.1 (installed once into its own virtualenv, ``build/peers-venv``):
  ``FTFYFormatter`` -> ``GopherRepetitionFilter`` -> ``GopherQualityFilter`` ->
  ``FineWebQualityFilter`` (line punctuation; Gopher's word-length bounds off and
  dataforge's en + zh stopword lists, else every Chinese document fails) ->
  ``MinhashDedupSignature`` (14 buckets x 8
  hashes, the ~0.7 threshold of its default config), then buckets, clusters and
  ``MinhashDedupFilter`` -> ``JsonlWriter``, on ``LocalPipelineExecutor`` with ``--cpus``
  workers. Its word tokenizer is given, not downloaded: rjieba (the segmenter dataforge
  uses) for text with Han characters, whitespace otherwise (datatrove's defaults need
  spaCy models and NLTK data, which are downloads).

Every run is a fresh subprocess (interpreter start-up and imports count), the three
interleaved ``--rounds`` times; the medians of wall time and the ratios are printed, with
the machine's load average. Not part of ``make test``.

    .venv/bin/python benchmarks/peers.py [--rounds 3] [--cpus 2]
    .venv/bin/python benchmarks/peers.py --copies 20 --rounds 1 --local  # 330 MB
    .venv/bin/python benchmarks/peers.py --copies 6 --no-peer   # ~100 MB, Ray vs in-process
    .venv/bin/python benchmarks/peers.py --copies 6 --no-peer --local  # and executor: local
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "build"
VENV = BUILD / "peers-venv"
WORK = BUILD / "peers"
DATATROVE = "datatrove[processing]==0.10.1"  # processing: regex, xxhash, ftfy, tokenizers
JSONL = "orjson"  # what its JsonlReader needs (the "io" extra would add datasets, warcio)
sys.path.insert(0, str(ROOT / "benchmarks"))
from recipe_corpus import demo_files, pipeline_yaml, write_jsonl  # noqa: E402

IN_PROCESS = """\
import sys
from pathlib import Path
from dataforge.config import load_pipeline
from dataforge.lazy import skip_pandas_probe
from dataforge.runtime.executors.local import LocalExecutor
from dataforge.runtime.pipeline import run_pipeline
skip_pandas_probe()  # as `dataforge run` does
run_pipeline(load_pipeline(Path(sys.argv[1])), Path(sys.argv[2]), LocalExecutor(),
             overwrite=True, log=lambda m: None)
from dataforge.report import write_report  # as `dataforge run` does after a run
write_report(Path(sys.argv[2]))
"""

DATATROVE_RECIPE = """\
import json, re, sys
import rjieba
from datatrove.executor import LocalPipelineExecutor
from datatrove.pipeline.dedup import MinhashDedupSignature
from datatrove.pipeline.dedup.minhash import (
    MinhashConfig, MinhashDedupBuckets, MinhashDedupCluster, MinhashDedupFilter)
from datatrove.pipeline.filters import (
    FineWebQualityFilter, GopherQualityFilter, GopherRepetitionFilter)
from datatrove.pipeline.formatters import FTFYFormatter
from datatrove.pipeline.readers import JsonlReader
from datatrove.pipeline.writers import JsonlWriter
from datatrove.utils.word_tokenizers import WordTokenizer

HAN = re.compile(r"[\\u4e00-\\u9fff]")
NON_WORD = re.compile(r"^[\\s\\W_]*$")


class RjiebaOrWhitespace(WordTokenizer):
    def word_tokenize(self, text):
        if HAN.search(text):
            return [t for t in rjieba.cut(text) if not NON_WORD.match(t)]
        return text.split()

    def sent_tokenize(self, text):
        return [s for s in re.split(r"(?<=[.!?。！？])\\s*", text) if s]

    def span_tokenize(self, text):
        return [(m.start(), m.end()) for m in re.finditer(r"\\S+", text)]


def main():
    corpus, work, workers = sys.argv[1], sys.argv[2], int(sys.argv[3])
    stop_words = json.load(open(sys.argv[4]))  # dataforge's en + zh lists
    tok = RjiebaOrWhitespace("mixed")
    config = MinhashConfig()  # 14 buckets x 8 hashes: ~0.72 Jaccard threshold
    files = 16
    stage1 = LocalPipelineExecutor(pipeline=[
        JsonlReader(corpus, glob_pattern="*/*.jsonl", id_key="id"),
        FTFYFormatter(),
        GopherRepetitionFilter(language=tok),
        # Gopher's word-length bounds would drop all Chinese (words of 1-2 characters).
        GopherQualityFilter(language=tok, min_avg_word_length=None, max_avg_word_length=None,
                            stop_words=stop_words),
        FineWebQualityFilter(language=tok),
        JsonlWriter(f"{work}/filtered", output_filename="${rank}.jsonl", compression=None),
        MinhashDedupSignature(output_folder=f"{work}/signatures", config=config, language=tok),
    ], tasks=files, workers=workers, logging_dir=f"{work}/logs/1")
    stage2 = LocalPipelineExecutor(pipeline=[
        MinhashDedupBuckets(input_folder=f"{work}/signatures", output_folder=f"{work}/buckets",
                            config=config),
    ], tasks=config.num_buckets, workers=workers, depends=stage1, logging_dir=f"{work}/logs/2")
    stage3 = LocalPipelineExecutor(pipeline=[
        MinhashDedupCluster(input_folder=f"{work}/buckets", output_folder=f"{work}/remove_ids",
                            config=config),
    ], tasks=1, depends=stage2, logging_dir=f"{work}/logs/3")
    stage4 = LocalPipelineExecutor(pipeline=[
        JsonlReader(f"{work}/filtered", glob_pattern="*.jsonl"),
        MinhashDedupFilter(input_folder=f"{work}/remove_ids"),
        JsonlWriter(f"{work}/output", compression=None),
    ], tasks=files, workers=workers, depends=stage3, logging_dir=f"{work}/logs/4")
    stage4.run()


if __name__ == "__main__":  # its executor spawns worker processes
    main()
"""


def ensure_venv() -> Path:
    """The datatrove virtualenv (created once; ``.installed`` marks a complete install)."""
    python = VENV / "bin" / "python"
    if (VENV / ".installed").exists():
        return python
    shutil.rmtree(VENV, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    rjieba = f"rjieba=={importlib.metadata.version('rjieba')}"  # the segmenter dataforge uses
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", DATATROVE, JSONL, rjieba], check=True
    )
    (VENV / ".installed").write_text(f"{DATATROVE} {rjieba}\n")
    return python


def _spliced(texts: list[str], i: int, k: int) -> str:
    """Copy ``k`` of document ``i``: itself for k = 0, else its first half joined to the
    second half of another document of the same file (real text, new documents: no
    more near-duplicates than the corpus has, so dedup's work grows with the size)."""
    if k == 0:
        return texts[i]
    other = texts[(i + 7919 * k) % len(texts)]
    return texts[i][: len(texts[i]) // 2] + other[len(other) // 2 :]


def reshard(data: Path, corpus: Path, copies: int = 1) -> tuple[int, float]:
    """The demo corpus as 16 jsonl files of about equal size (per language: zh, en);
    ``copies`` > 1 adds ``copies - 1`` spliced copies of every document (:func:`_spliced`)
    for a larger corpus of the same text."""
    by_lang: dict[str, list[tuple[str, str]]] = {"zh": [], "en": []}
    for name, lang, path, texts in demo_files(data):
        by_lang[lang] += [
            (f"{name}/{path.name}/{i}" + (f"#{k}" if k else ""), _spliced(texts, i, k))
            for k in range(copies)
            for i in range(len(texts))
        ]
    sizes = {lang: sum(len(t.encode()) for _, t in docs) for lang, docs in by_lang.items()}
    for lang, docs in by_lang.items():
        files = max(1, round(16 * sizes[lang] / sum(sizes.values())))
        write_jsonl(corpus / lang, docs, files)
    return sum(map(len, by_lang.values())), sum(sizes.values()) / 1e6


def _kept(manifest: Path) -> int:
    return json.loads(manifest.read_text())["counts"]["total"]["kept"]


def timed(cmd: list[str], env: dict[str, str] | None = None) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{proc.stderr[-3000:]}")
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=ROOT / "data" / "demo")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cpus", type=int, default=2)
    parser.add_argument(
        "--copies",
        type=int,
        default=1,
        help="repeat the corpus (1: 16 MB; 6: 94 MB; 20: 330 MB; 60: 989 MB)",
    )
    parser.add_argument("--no-peer", action="store_true", help="only Ray vs in-process")
    parser.add_argument(
        "--local", action="store_true", help="also `dataforge run --executor local`"
    )
    parser.add_argument("--work", type=Path, default=WORK, help=f"scratch folder ({WORK})")
    args = parser.parse_args()
    work = args.work

    python = ensure_venv()
    corpus, out = work / "corpus16", work / "out"
    docs, mbytes = reshard(args.data, corpus, args.copies)
    pipeline = work / "peers.yaml"
    pipeline.write_text(pipeline_yaml("peers", corpus, out / "ray", args.cpus, threshold=0.7))
    (work / "in_process.py").write_text(IN_PROCESS)
    (work / "datatrove_recipe.py").write_text(DATATROVE_RECIPE)
    from dataforge.text.stats import load_stopwords

    stop_words = work / "stop_words.json"
    stop_words.write_text(json.dumps([*load_stopwords("en"), *load_stopwords("zh")]))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    runs = {
        "dataforge on Ray": [sys.executable, "-m", "dataforge.cli", "run", str(pipeline),
                             "--overwrite"],
        "dataforge in-process": [sys.executable, str(work / "in_process.py"), str(pipeline),
                                 str(out / "local")],
        "datatrove": [str(python), str(work / "datatrove_recipe.py"), str(corpus),
                      str(out / "datatrove"), str(args.cpus), str(stop_words)],
    }  # fmt: skip
    if args.no_peer:
        del runs["datatrove"]
    if args.local:
        runs["dataforge, executor local"] = [*runs["dataforge on Ray"], "--executor", "local"]
    envs = {name: env for name in runs}
    print(f"{docs} docs, {mbytes:.1f} MB of text in 16 files; {args.cpus} CPUs")
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    kept_by_run: dict[str, set[int]] = {}  # per run, what each round kept
    loads = []
    for round_ in range(args.rounds):
        for name, cmd in runs.items():
            if name == "datatrove":
                shutil.rmtree(out / "datatrove", ignore_errors=True)
            loads.append(os.getloadavg()[0])
            seconds[name].append(timed(cmd, envs[name]))
            if name != "datatrove":  # the local executor writes the Ray run's output path
                manifest = out / ("local" if name == "dataforge in-process" else "ray")
                kept_by_run.setdefault(name, set()).add(_kept(manifest / "manifest.json"))
            print(f"  round {round_ + 1}: {name:<22} {seconds[name][-1]:6.1f} s", flush=True)
    median = {name: statistics.median(values) for name, values in seconds.items()}
    print(f"load average (1 min) during the runs: {min(loads):.1f} .. {max(loads):.1f}")
    for name, value in median.items():
        print(f"{name:<22} median {value:6.1f} s  ({', '.join(f'{s:.1f}' for s in seconds[name])})")
    kept = min(kept_by_run["dataforge on Ray"])
    same = all(found == {kept} for found in kept_by_run.values())
    assert same, f"every dataforge run and round keeps the same records: {kept_by_run}"
    ray, local = median["dataforge on Ray"], median["dataforge in-process"]
    if "datatrove" in median:
        peer = median["datatrove"]
        peer_kept = sum(1 for f in (out / "datatrove" / "output").glob("*.jsonl") for _ in open(f))
        print(f"kept: dataforge {kept}, datatrove {peer_kept} (the rules differ; each side does")
        print("  its recipe's full work on every document: filters, signatures, index, output)")
        print(f"datatrove / dataforge on Ray:        {peer / ray:.2f}x  (goal >= 5x)")
        print(f"datatrove / dataforge in-process:    {peer / local:.2f}x")
    print(f"dataforge Ray run / in-process wall: {ray / local:.2f}x  (goal <= 1.0x at 25 MB, ")
    print("  <= 0.6x at 100 MB)")
    if "dataforge, executor local" in median:
        pool = median["dataforge, executor local"]
        print(f"dataforge Ray run / executor local:  {ray / pool:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
