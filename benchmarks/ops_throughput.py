"""Throughput of the clean and quality_filter ops on the demo corpus, and what they drop.

Prints per source: docs, MB, docs/s and MB/s of ``clean`` and of ``quality_filter``
(batches of ``--batch`` records, one process), the drop share by reason, and the ratio of
the vectorized ``clean`` against a naive per-record Python implementation of the same
rules (:func:`naive_clean`) run in the same process on the same records.

``quality_filter`` is also timed against its previous implementation (statistics of
commit 7a636d5, kept in ``tests/text/stats_v1.py``, every stage on every document):
both run interleaved ``--repeats`` times in CPU seconds of this process, the median ratio
is printed, and the drop reasons must be identical (the script fails otherwise).

With ``--compare-jieba N`` it also segments N Chinese docs (news + reviews) with
``jieba`` and ``rjieba`` and prints their speed ratio and agreement.

Usage: ``.venv/bin/python benchmarks/ops_throughput.py [--limit 2000] [--batch 1000]
[--compare-jieba 500]`` (needs ``make demo-data``).
"""

from __future__ import annotations

import argparse
import collections
import glob
import gzip
import html
import importlib.util
import json
import re
import statistics
import time
import unicodedata
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from dataforge.ops.clean import Clean
from dataforge.ops.quality import QualityFilter, first_failure
from dataforge.records import BASE_SCHEMA
from dataforge.text.stats import load_stopwords

SOURCES = {  # name -> (glob, lang)
    "news_zh": ("news_zh/*.jsonl.zst", "zh"),
    "reviews_zh": ("reviews_zh/*.jsonl.gz", "zh"),
    "docs_en": ("docs_en/*.jsonl", "en"),
    "pkgdesc_en": ("pkgdesc_en/*.parquet", "en"),
}


def read_texts(path: str) -> list[str]:
    if path.endswith(".parquet"):
        return pq.read_table(path, columns=["text"]).column("text").to_pylist()
    if path.endswith(".zst"):
        import zstandard

        raw = zstandard.ZstdDecompressor().decompressobj().decompress(Path(path).read_bytes())
    elif path.endswith(".gz"):
        raw = gzip.decompress(Path(path).read_bytes())
    else:
        raw = Path(path).read_bytes()
    return [json.loads(line)["text"] for line in raw.decode("utf-8").splitlines()]


def load_source(root: Path, name: str, limit: int) -> list[str]:
    pattern, _ = SOURCES[name]
    texts = [t for f in sorted(glob.glob(str(root / pattern))) for t in read_texts(f)]
    step = max(1, len(texts) // limit) if limit else 1
    return texts[::step][:limit] if limit else texts


def make_batch(texts: list[str], source: str, lang: str) -> pa.Table:
    n = len(texts)
    columns = {
        "id": [f"{source}-{i}" for i in range(n)],
        "text": texts,
        "source": [source] * n,
        "lang": [lang] * n,
        "meta": ["{}"] * n,
        "drop": pa.nulls(n, pa.string()),
        "_ord": list(range(n)),
    }
    return pa.table(columns, schema=BASE_SCHEMA)


_NAIVE_TAG = re.compile(r"(?i)</?(?:p|br|div|li|b|i|a|span|img|code|em|strong)(?:\s[^<>]*)?/?>")


def naive_clean(text: str) -> str:
    """The baseline: the main clean rules as a per-record Python loop."""
    text = re.sub(r"\r\n?", "\n", text)
    text = "".join(c for c in text if c in "\n\t" or unicodedata.category(c) not in ("Cc", "Cf"))
    text = unicodedata.normalize("NFKC", text)
    text = html.unescape(_NAIVE_TAG.sub("", text))
    lines = [re.sub(r"(\S) {2,}", r"\1 ", line.rstrip()) for line in text.split("\n")]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def run_batched(op, batch: pa.Table, size: int) -> tuple[pa.Table, float]:
    start = time.perf_counter()
    parts = [op(batch.slice(i, size)) for i in range(0, batch.num_rows, size)]
    return pa.concat_tables(parts), time.perf_counter() - start


def load_previous_stats():
    """The previous statistics module (the baseline), kept as the tests' oracle."""
    path = Path(__file__).resolve().parent.parent / "tests" / "text" / "stats_v1.py"
    spec = importlib.util.spec_from_file_location("stats_v1", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


stats_v1 = load_previous_stats()


def previous_reasons(quality: QualityFilter, batch: pa.Table) -> list[str | None]:
    """The drop reasons of the previous implementation: all measures of every document."""
    text = pc.fill_null(batch.column("text").combine_chunks(), "")
    langs = pc.fill_null(batch.column("lang").combine_chunks(), "")
    reasons = np.full(batch.num_rows, None, dtype=object)
    for lang in pc.unique(langs).to_pylist():
        rows = np.flatnonzero(pc.equal(langs, lang).to_numpy(False))
        t = quality.thresholds_for(lang)
        sizes = set(t.max_top_ngram_chars_fraction or ()) | set(
            t.max_duplicate_ngram_chars_fraction or ()
        )
        stopwords = load_stopwords(t.stopwords) if t.stopwords else None
        m = stats_v1.document_stats(text.take(rows), t.segmenter, stopwords, sizes)
        reasons[rows] = first_failure(m, t)
    return reasons.tolist()


def quality_vs_previous(
    quality: QualityFilter, batches: list[pa.Table], repeats: int
) -> tuple[float, float, float]:
    """Median CPU seconds of the current and previous quality filter over ``batches`` (runs
    interleaved) and the median of the per-repeat ratios; fails on any differing reason."""
    current, previous, ratios = [], [], []
    for _ in range(repeats):
        start = time.process_time()
        new = [quality(b).column("drop").to_pylist() for b in batches]
        current.append(time.process_time() - start)
        start = time.process_time()
        old = [previous_reasons(quality, b) for b in batches]
        previous.append(time.process_time() - start)
        ratios.append(previous[-1] / current[-1])
        if new != old:
            raise SystemExit("quality_filter decisions differ from the previous implementation")
    return statistics.median(current), statistics.median(previous), statistics.median(ratios)


def compare_jieba(texts: list[str]) -> None:
    import jieba
    import rjieba

    jieba.setLogLevel(60)
    jieba.initialize()
    rjieba.cut("预热")
    start = time.perf_counter()
    slow = [jieba.lcut(t) for t in texts]
    t_jieba = time.perf_counter() - start
    start = time.perf_counter()
    fast = [rjieba.cut(t) for t in texts]
    t_rjieba = time.perf_counter() - start
    same_docs = sum(a == b for a, b in zip(slow, fast, strict=True))
    tokens = sum(map(len, slow)), sum(map(len, fast))
    print(
        f"\njieba vs rjieba on {len(texts)} zh docs: rjieba {t_jieba / t_rjieba:.1f}x faster; "
        f"identical segmentation on {same_docs / len(texts):.1%} of docs; "
        f"tokens {tokens[0]} vs {tokens[1]}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=Path("data/demo"))
    parser.add_argument("--limit", type=int, default=2000, help="docs per source (0: all)")
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--compare-jieba", type=int, default=0, metavar="N")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved quality runs")
    args = parser.parse_args()

    clean, quality = Clean(Clean.Config()), QualityFilter(QualityFilter.Config())
    quality.setup()
    print(
        f"{'source':<11} {'docs':>6} {'MB':>6} {'clean docs/s':>12} {'MB/s':>6} "
        f"{'naive MB/s':>10} {'ratio':>6} {'quality docs/s':>14} {'MB/s':>6} {'dropped':>8} "
        f"{'dropped MB':>10}"
    )
    reasons_by_source, quality_batches = {}, []
    for name, (_, lang) in SOURCES.items():
        texts = load_source(args.data, name, args.limit)
        mb = sum(len(t.encode("utf-8")) for t in texts) / 1e6
        cleaned, t_clean = run_batched(clean, make_batch(texts, name, lang), args.batch)
        start = time.perf_counter()
        for t in texts:
            naive_clean(t)
        t_naive = time.perf_counter() - start
        filtered, t_quality = run_batched(quality, cleaned, args.batch)
        quality_batches += [cleaned.slice(i, args.batch) for i in range(0, len(texts), args.batch)]
        reasons = filtered.column("drop").to_pylist()
        drops = collections.Counter(r for r in reasons if r)
        dropped_mb = sum(len(t.encode("utf-8")) for t, r in zip(texts, reasons, strict=True) if r)
        reasons_by_source[name] = (drops, len(texts))
        print(
            f"{name:<11} {len(texts):>6} {mb:>6.2f} {len(texts) / t_clean:>12.0f} "
            f"{mb / t_clean:>6.2f} {mb / t_naive:>10.2f} {t_naive / t_clean:>6.2f} "
            f"{len(texts) / t_quality:>14.0f} {mb / t_quality:>6.2f} "
            f"{sum(drops.values()) / len(texts):>8.1%} {dropped_mb / 1e6 / mb:>10.1%}"
        )
    print("\ndrop share by reason (of the source's docs):")
    for name, (drops, total) in reasons_by_source.items():
        shown = ", ".join(f"{r} {n / total:.1%}" for r, n in drops.most_common())
        print(f"  {name}: {shown or 'none'}")
    now, before, ratio = quality_vs_previous(quality, quality_batches, args.repeats)
    print(
        f"\nquality_filter vs previous implementation (identical reasons, {args.repeats} "
        f"interleaved runs, CPU s): {now:.3f} s vs {before:.3f} s, median ratio {ratio:.2f}x"
    )
    if args.compare_jieba:
        half = args.compare_jieba // 2
        zh = load_source(args.data, "news_zh", half) + load_source(args.data, "reviews_zh", half)
        compare_jieba(zh)


if __name__ == "__main__":
    main()
