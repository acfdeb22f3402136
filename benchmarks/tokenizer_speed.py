"""Tokenizer encode throughput per core: our ``encode_batch`` vs the raw calls, per engine.

Two baselines, in this process, on the same documents and batches of the same model:

* raw calls: exactly the engine calls ``encode_batch`` makes, timed alone on the same
  inputs, prepared outside the timer: one segmenter call on the batch's CJK documents
  and one ``sp.encode`` on the marked chunks. ours/raw is the cost of our wrapper (the
  glue in Python/numpy); target >= 0.87. Two output forms: ``encode_batch`` (lists of
  ints, vs ``sp.encode`` returning lists) and ``encode_batch_flat`` (the op's path: numpy
  ids + offsets, vs ``sp.encode(out_type="numpy")``).
* naive: the segmenter on every document (``jieba.lcut`` / ``rjieba.cut``) plus one
  ``sp.encode`` on the unmarked documents: the least any jieba + sentencepiece pipeline
  pays even without applying the boundaries (markers make sentencepiece work more).

Ours segments, marks the boundaries, encodes, drops the markers and returns per-document
id lists. Times are CPU seconds of this process (one thread), best of ``--repeats``, so
MB/s is per core.

Also prints how often the engines agree (jieba word spans reproduced by rjieba, and
documents whose token ids are identical), and our Chinese throughput with the default
engine over raw ``jieba.lcut`` + ``sp.encode`` (the issue's target: >= 5x).

    .venv/bin/python benchmarks/tokenizer_speed.py [--tokenizer tokenizers/demo]
        [--zh-mb 2] [--en-mb 2] [--batch 1000] [--repeats 3] [--quick]

Needs ``make demo-tokenizer`` (which needs ``make demo-data``).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from tokenizer_compression import SOURCES, _clean  # noqa: E402

from dataforge.text.cjk import has_cjk  # noqa: E402
from dataforge.tokenization import DEFAULT_ENGINE, Tokenizer  # noqa: E402
from dataforge.tokenization.corpus import iter_records  # noqa: E402
from dataforge.tokenization.tokenizer import read_tokenizer_json  # noqa: E402


def load_texts(lang: str, max_mb: float) -> list[str]:
    """Cleaned documents of one language, up to ``max_mb`` of UTF-8, from every source."""
    per_source = [list(iter_records([g])) for g in SOURCES[lang]]
    texts, size = [], 0
    for i in range(max(map(len, per_source))):  # interleave the sources
        for records in per_source:
            if i < len(records):
                texts.append(records[i][1])
                size += len(records[i][1].encode())
        if size >= max_mb * 1e6:
            break
    return _clean(texts)


def cpu_seconds(fns: list[Callable[[], object]], repeats: int) -> list[float]:
    """Best CPU time of each function; the functions alternate within every repeat, so a
    change in machine load hits them alike (the machine may be shared)."""
    best = [float("inf")] * len(fns)
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            start = time.process_time()
            fn()
            best[i] = min(best[i], time.process_time() - start)
    return best


def raw_segmenter(engine: str) -> Callable[[str], list[str]]:
    if engine == "jieba":
        import jieba

        jieba.initialize()
        return jieba.lcut
    import rjieba

    return rjieba.cut


def with_engine(path: Path, engine: str) -> Tokenizer:
    meta = read_tokenizer_json(path)
    meta = {**meta, "segmenter": {**meta["segmenter"], "engine": engine}}
    return Tokenizer((path / "spm.model").read_bytes(), meta)


def word_spans(words: list[str]) -> set[tuple[int, int]]:
    spans, start = set(), 0
    for w in words:
        spans.add((start, start + len(w)))
        start += len(w)
    return spans


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tokenizer", default=str(ROOT / "tokenizers" / "demo"))
    parser.add_argument("--zh-mb", type=float, default=2.0)
    parser.add_argument("--en-mb", type=float, default=2.0)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="0.5 MB per language, 3 repeats")
    args = parser.parse_args()
    if args.quick:
        args.zh_mb, args.en_mb, args.repeats = 0.5, 0.5, 3
    path = Path(args.tokenizer)
    try:
        read_tokenizer_json(path)
    except (FileNotFoundError, ValueError) as exc:
        print(f"{exc}\nneeds a trained tokenizer: make demo-tokenizer", file=sys.stderr)
        return 2

    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(path / "spm.model"))
    texts = {"zh": load_texts("zh", args.zh_mb), "en": load_texts("en", args.en_mb)}
    tokenizers = {engine: with_engine(path, engine) for engine in ("rjieba", "jieba")}
    raw_cuts = {engine: raw_segmenter(engine) for engine in tokenizers}
    print(
        f"tokenizer {path} (vocab {sp.get_piece_size()}), batches of {args.batch} docs, "
        f"CPU time best of {args.repeats} (alternating), one thread\n"
    )
    print(
        f"{'lang':<5}{'engine':<8}{'MB':>6}{'ours MB/s':>11}{'raw MB/s':>10}{'ours/raw':>10}"
        f"{'naive MB/s':>12}{'ours/naive':>12}"
    )
    throughput: dict[tuple[str, str, str], float] = {}
    ratios: dict[tuple[str, str], tuple[float, float]] = {}
    for lang, docs in texts.items():
        mb = sum(len(t.encode()) for t in docs) / 1e6
        batches = [docs[i : i + args.batch] for i in range(0, len(docs), args.batch)]
        for engine, tok in tokenizers.items():
            cut = raw_cuts[engine]

            def ours(tok=tok, batches=batches) -> None:
                for b in batches:
                    tok.encode_batch(b)

            def ours_flat(tok=tok, batches=batches) -> None:
                for b in batches:
                    tok.encode_batch_flat(b)

            # what encode_batch hands to the engines, prepared outside the timer
            seg_inputs = ["\n".join(t for t in b if has_cjk(t)) for b in batches]
            sp_inputs = [tok._chunks(b)[0] for b in batches]

            def raw(tok=tok, seg_inputs=seg_inputs, sp_inputs=sp_inputs, out_type=int) -> None:
                for joined, chunks in zip(seg_inputs, sp_inputs, strict=True):
                    if joined:
                        tok._segmenter.cut(joined)
                    sp.encode(chunks, out_type=out_type, num_threads=1)

            def raw_numpy() -> None:
                raw(out_type="numpy")

            def naive(cut=cut, batches=batches) -> None:
                for b in batches:
                    for t in b:
                        cut(t)
                    sp.encode(b, num_threads=1)

            times = cpu_seconds([ours, raw, ours_flat, raw_numpy, naive], args.repeats)
            t_ours, t_raw, t_flat, t_raw_np, t_naive = times
            throughput[(lang, engine, "ours")] = mb / t_ours
            throughput[(lang, engine, "naive")] = mb / t_naive
            ratios[(lang, engine)] = (t_raw / t_ours, t_raw_np / t_flat)
            print(
                f"{lang:<5}{engine:<8}{mb:>6.2f}{mb / t_ours:>11.2f}{mb / t_raw:>10.2f}{t_raw / t_ours:>9.3f}"
                f"{mb / t_flat:>11.2f}{mb / t_raw_np:>10.2f}{t_raw_np / t_flat:>9.3f}"
                f"{mb / t_naive:>12.2f}{t_naive / t_ours:>11.3f}"
            )

    zh = texts["zh"]
    jieba_words = [raw_cuts["jieba"](t) for t in zh]
    rjieba_words = [raw_cuts["rjieba"](t) for t in zh]
    same = sum(
        len(word_spans(a) & word_spans(b)) for a, b in zip(jieba_words, rjieba_words, strict=True)
    )
    total_j = sum(map(len, jieba_words))
    total_r = sum(map(len, rjieba_words))
    ids_j = tokenizers["jieba"].encode_batch(zh)
    ids_r = tokenizers["rjieba"].encode_batch(zh)
    same_docs = sum(a == b for a, b in zip(ids_j, ids_r, strict=True))
    print(
        f"\nagreement on {len(zh)} zh docs: {same / total_j:.4f} of jieba's words are rjieba words "
        f"({same / total_r:.4f} of rjieba's); token ids identical for {same_docs / len(zh):.4f} of docs; "
        f"tokens rjieba/jieba {sum(map(len, ids_r)) / sum(map(len, ids_j)):.4f}"
    )
    default = throughput[("zh", DEFAULT_ENGINE, "ours")]
    print(
        f"zh: ours with the default engine ({DEFAULT_ENGINE}) / naive jieba.lcut + sp.encode = "
        f"{default / throughput[('zh', 'jieba', 'naive')]:.1f}x (target >= 5x)"
    )
    print(
        f"wrapper: worst ours/raw ratio, lists {min(r[0] for r in ratios.values()):.3f}, "
        f"numpy {min(r[1] for r in ratios.values()):.3f} (target >= 0.87)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
