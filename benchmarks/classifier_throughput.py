"""Scoring throughput: the ``quality_classifier`` op vs a bare fastText predict loop.

A classifier is trained first (``dataforge classifier train``, demo documents against their
corrupted copies, as in ``tests/classifier``). Baseline (what fastText alone costs):
``model.predict(line)`` on each document's input line, the lines normalized and segmented
beforehand (outside the timer), as the perplexity benchmark treats KenLM. Ours: ``QualityClassifier.prepare`` on record batches (CCNet normalization, jieba
segmentation of Chinese, every label's probability, the meta JSON and the tie hash). Both on
one core, same documents; best-of-N CPU seconds of this process. Then the op's time split:
features (normalization + segmentation) against prediction.

    .venv/bin/python benchmarks/classifier_throughput.py [--docs 2000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from classifier.corpus import write_corpus  # noqa: E402

from dataforge.cli import main as classifier_main  # noqa: E402
from dataforge.io.documents import iter_documents  # noqa: E402
from dataforge.ops.base import OpContext  # noqa: E402
from dataforge.ops.quality_classifier import QualityClassifier  # noqa: E402
from dataforge.records import DROP  # noqa: E402

SOURCES = {"en": "data/demo/docs_en/*.jsonl", "zh": "data/demo/news_zh/*.jsonl.zst"}


def texts(pattern: str, limit: int) -> list[str]:
    out: list[str] = []
    for batch in iter_documents(str(ROOT / pattern), source="d"):
        out += batch.column("text").to_pylist()
    return (out * (limit // max(1, len(out)) + 1))[:limit]


def best(fn, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return min(times)


def bench(lang: str, docs: list[str], model_dir: Path, rounds: int, batch_rows: int) -> None:
    config = QualityClassifier.Config(model=str(model_dir), min_score=0.5)
    op = QualityClassifier(config, OpContext())
    op.setup()
    model = op.models["model"]
    ft = model.model
    n = len(docs)
    table = pa.table({
        "id": [f"d{i}" for i in range(n)], "text": docs, "lang": [lang] * n, "meta": ["{}"] * n,
        DROP: pa.nulls(n, pa.string()),
    })  # fmt: skip
    flat = model.features.lines(docs)

    def bare() -> None:
        for line in flat:
            ft.predict(line, k=-1, threshold=-1.0)

    def ours() -> None:
        for offset in range(0, n, batch_rows):
            op.prepare(table.slice(offset, batch_rows))

    lines: list[str] = []

    def features() -> None:
        lines[:] = model.features.lines(docs)

    t_bare, t_ours, t_feat = best(bare, rounds), best(ours, rounds), best(features, rounds)
    t_pred = best(lambda: model.probabilities_of_lines(lines), rounds)
    mb = sum(len(d.encode()) for d in docs) / 1e6
    print(
        f"{lang}: {n} docs, {mb:.1f} MB | bare predict {n / t_bare:8.0f} docs/s | op "
        f"{n / t_ours:8.0f} docs/s ({mb / t_ours:.1f} MB/s) | op / bare time {t_ours / t_bare:.2f}x"
        f" | op: features {t_feat:.2f} s, predict {t_pred:.2f} s, rest {max(0.0, t_ours - t_feat - t_pred):.2f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for lang, pattern in SOURCES.items():
            docs = texts(pattern, args.docs)
            pos, neg = write_corpus(docs[:1500], lang, Path(tmp) / lang)
            model_dir = Path(tmp) / lang / "model"
            argv = ["train", "--positive", pos, "--negative", neg, "--out", str(model_dir)]
            with open("/dev/null", "w") as quiet:
                stdout, sys.stdout = sys.stdout, quiet
                try:
                    assert classifier_main(["classifier", *argv, "--lang", lang]) == 0
                finally:
                    sys.stdout = stdout
            bench(lang, docs, model_dir, args.rounds, args.batch)


if __name__ == "__main__":
    main()
