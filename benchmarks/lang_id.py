"""``lang_id`` on the demo corpus: accuracy by length, and throughput against the bare model.

1. **Accuracy** (``keep: [zh, en]``, the setting for this corpus): Chinese news and
   reviews against ``zh``, English docs and package descriptions against ``en``, split at
   50 characters; the English 10-50 set is sentences of three or more words cut from the
   English documents (the demo's short English records are bare module names); plus
   mixed documents spliced from a Chinese and an English piece whose truth is the part
   that carries clearly more (Han characters / 2 against Latin letters / 5, 1.5x apart).
   Targets: >= 99% on >= 50 characters, >= 95% on 10-50.
2. **Throughput**: ``LangId.identify`` (rule, Han share, top-5 scores) against a bare
   per-document ``predict(text, k=1)`` of the same fastText model on the same text (cut
   to ``max_chars``, newlines as spaces), in chunks of 250 docs, each the best of
   ``--repeat`` interleaved runs in this process, timed in process CPU time (both are single-threaded; CPU time is steady on a
   shared machine where wall time is not). Prints docs/s of both and the ratio (target
   >= 0.8x).

Usage: ``.venv/bin/python benchmarks/lang_id.py [--limit 6000] [--repeat 3]``
(needs ``make demo-data``).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import fasttext
import numpy as np
import pyarrow as pa
from lang_id_sets import english_sentences, mixed_documents  # benchmarks/ (the script's dir)

from dataforge.config import InputConfig, ReadConfig
from dataforge.io.readers import InputTask, TaskReader
from dataforge.ops.lang_id import LangId, bundled_model_path

DEMO = Path(__file__).resolve().parents[1] / "data" / "demo"
_CHUNK = 250


def demo_texts(source: str, limit: int) -> list[str]:
    fmt = "parquet" if source == "pkgdesc_en" else "jsonl"
    texts: list[str] = []
    for path in sorted((DEMO / source).glob("part-*")):
        task = InputTask("000-000000", source, str(path), path.name, path.stat().st_size)
        config = InputConfig(name=source, path=str(path), format=fmt)
        for batch in TaskReader(task, config, ReadConfig()).batches():
            pairs = zip(batch["text"].to_pylist(), batch["drop"].to_pylist(), strict=True)
            texts += [t for t, d in pairs if not d]
        if len(texts) >= limit:
            break
    return texts[:limit]


def accuracy(op: LangId, limit: int) -> None:
    zh = demo_texts("news_zh", limit // 4) + demo_texts("reviews_zh", limit)
    en = demo_texts("docs_en", limit // 4) + demo_texts("pkgdesc_en", limit // 4)
    sets = {
        "zh >= 50": ([t for t in zh if len(t) >= 50], "zh"),
        "zh 10-50": ([t for t in zh if 10 <= len(t) < 50], "zh"),
        "en >= 50": ([t for t in en if len(t) >= 50], "en"),
        "en 10-50": (english_sentences(en)[:limit], "en"),
    }
    for name, (texts, lang) in sets.items():
        langs, _ = op.identify(pa.array(texts))
        codes, counts = np.unique(langs[langs != lang].astype(str), return_counts=True)
        wrong = dict(zip(codes.tolist(), counts.tolist(), strict=True))
        print(
            f"{name:9s} docs {len(texts):6d}  accuracy {np.mean(langs == lang):7.2%}  wrong {wrong}"
        )
    mixed, truth = mixed_documents(sets["zh >= 50"][0], sets["en >= 50"][0], 2000)
    langs, _ = op.identify(pa.array(mixed))
    print(
        f"{'mixed':9s} docs {len(mixed):6d}  accuracy "
        f"{np.mean(langs == np.array(truth, dtype=object)):7.2%}  ({truth.count('zh')} zh-led)"
    )


def throughput(op: LangId, limit: int, repeat: int) -> None:
    texts = demo_texts("news_zh", limit // 4) + demo_texts("reviews_zh", limit // 2)
    texts += demo_texts("docs_en", limit // 4)
    model = fasttext.load_model(str(bundled_model_path()))  # the same model file, bare
    max_chars = op.config.max_chars

    def bare(chunk: list[str]) -> None:
        for t in chunk:
            model.predict(t[:max_chars].replace("\r", " ").replace("\n", " "), k=1)

    total = {"bare": 0.0, "lang_id": 0.0}
    for start in range(0, len(texts), _CHUNK):  # best of `repeat` per chunk, interleaved
        chunk = texts[start : start + _CHUNK]
        array = pa.array(chunk)
        best = {"bare": float("inf"), "lang_id": float("inf")}
        for _ in range(repeat):
            runs = (("bare", bare, chunk), ("lang_id", op.identify, array))
            for name, run, arg in runs:
                started = time.process_time()
                run(arg)
                best[name] = min(best[name], time.process_time() - started)
        for name in total:
            total[name] += best[name]
    n = len(texts)
    print(
        f"throughput on {n} docs: bare predict {n / total['bare']:,.0f} docs/s, lang_id "
        f"{n / total['lang_id']:,.0f} docs/s, ratio {total['bare'] / total['lang_id']:.2f}x "
        "(target >= 0.8x)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--limit", type=int, default=6000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    if not (DEMO / ".done").is_file():
        raise SystemExit(f"demo corpus not built ({DEMO}): run `make demo-data`")
    op = LangId(LangId.Config(keep=("zh", "en")))
    op.setup()
    accuracy(op, args.limit)
    throughput(op, args.limit, args.repeat)


if __name__ == "__main__":
    main()
