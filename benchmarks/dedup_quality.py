"""Near-duplicate quality on real text: ours (exact / MinHash / SimHash) vs datasketch, rensa
and the ``simhash`` package, on a labeled set built from the demo corpus.

Set: base documents from data/demo (news_zh articles, reviews_zh reviews >= 80 chars,
docs_en and pkgdesc_en cut into ~1500-char chunks at blank lines). Natural near-duplicates
among the bases are removed first (any base whose true char-3-gram Jaccard with an earlier
base is >= 0.3, candidates from a 256-permutation LSH at 0.2). Then half the bases get ONE
variant each, the edit kinds in rotation: exact copy, whitespace/punctuation changes,
char (zh) / word (en) insert-delete-substitute edits at 3/10/20%, a few swapped sentences,
boilerplate prefix, boilerplate suffix, truncation to 80%. True clusters are {base,
variant}; the other bases are unique.

Scores: pairwise precision/recall/F1 over all pairs that share a predicted cluster; unique
texts wrongly removed (a unique base that lost its cluster to another document); recall
per edit kind (the base and its variant end in the same cluster).

    .venv/bin/python benchmarks/dedup_quality.py [--bases 1600] [--sweep]
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import random
import re
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dataforge.ops.base import OpContext  # noqa: E402
from dataforge.ops.dedup import Dedup  # noqa: E402
from dataforge.records import BASE_SCHEMA  # noqa: E402
from dataforge.runtime.barriers import BarrierContext  # noqa: E402
from dataforge.runtime.barriers import dedup as planner  # noqa: E402

KINDS = (
    "exact",
    "ws_punct",
    "edit3",
    "edit10",
    "edit20",
    "shuffle",
    "prefix",
    "suffix",
    "trunc80",
)
BOILERPLATE = {
    "zh": [
        "本文来源：人民网－人民日报　责任编辑：王小明　版权所有，未经授权不得转载。",
        "（欢迎关注本报微信公众号，获取更多新闻资讯。转载请注明出处。）",
    ],
    "en": [
        "This page was generated automatically from the project documentation. "
        "All rights reserved.",
        "Subscribe to our newsletter for updates. Copyright 2024 Example Corp. Terms apply.",
    ],
}
PUNCT_ZH = str.maketrans(
    {"，": ",", "。": ".", "！": "!", "？": "?", "：": ":", "；": ";", "（": "(", "）": ")"}
)


# -- base documents ----------------------------------------------------------------------


def _jsonl(path: Path) -> list[dict]:
    if path.suffix == ".zst":
        import zstandard

        with path.open("rb") as fh:
            text = io.TextIOWrapper(
                zstandard.ZstdDecompressor().stream_reader(fh), encoding="utf-8"
            )
            return [json.loads(line) for line in text.read().splitlines() if line.strip()]
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _chunks(text: str, size: int = 1500) -> list[str]:
    out, cur = [], ""
    for para in re.split(r"\n\s*\n", text):
        cur = f"{cur}\n\n{para}" if cur else para
        if len(cur) >= size:
            out.append(cur)
            cur = ""
    return out


def load_bases(demo: Path, per_group: int, seed: int) -> list[tuple[str, str, str]]:
    """(id, text, lang) base documents from the demo corpus, per_group of each group."""
    rng = random.Random(seed)
    groups: dict[str, list[tuple[str, str, str]]] = defaultdict(list)
    for path in sorted((demo / "news_zh").glob("*.jsonl*")):
        groups["news_zh"] += [
            (r["id"], r["text"], "zh") for r in _jsonl(path) if len(r["text"]) >= 200
        ]
    for path in sorted((demo / "reviews_zh").glob("*.jsonl*")):
        groups["reviews_zh"] += [
            (r["id"], r["text"], "zh") for r in _jsonl(path) if len(r["text"]) >= 80
        ]
    for path in sorted((demo / "docs_en").glob("*.jsonl*")):
        for r in _jsonl(path):
            groups["docs_en"] += [
                (f"{r['id']}#{i}", c, "en") for i, c in enumerate(_chunks(r["text"]))
            ]
    for path in sorted((demo / "pkgdesc_en").glob("*.parquet")):
        for r in pq.read_table(path, columns=["id", "text"]).to_pylist():
            groups["docs_en"] += [
                (f"{r['id']}#{i}", c, "en") for i, c in enumerate(_chunks(r["text"]))
            ]
    bases = []
    for name in sorted(groups):
        items = groups[name]
        rng.shuffle(items)
        bases += items[:per_group]
    return bases


def _char_ngrams(text: str, n: int = 3) -> set[str]:
    text = re.sub(r"\s+", " ", text.lower())
    return {text[i : i + n] for i in range(max(len(text) - n + 1, 1))}


def remove_natural_duplicates(bases: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """Drop bases with true char-3-gram Jaccard >= 0.3 to an earlier kept base."""
    from datasketch import MinHash, MinHashLSH

    lsh = MinHashLSH(threshold=0.2, num_perm=256)
    kept, grams = [], {}
    for doc_id, text, lang in bases:
        g = _char_ngrams(text)
        m = MinHash(num_perm=256)
        m.update_batch([s.encode() for s in g])
        if any(len(g & grams[o]) / len(g | grams[o]) >= 0.3 for o in lsh.query(m)):
            continue
        lsh.insert(doc_id, m)
        grams[doc_id] = g
        kept.append((doc_id, text, lang))
    return kept


# -- variants ----------------------------------------------------------------------------


def _sentences(text: str, lang: str) -> list[str]:
    pattern = r"(?<=[。！？])" if lang == "zh" else r"(?<=[.!?])\s+"
    return [s for s in re.split(pattern, text) if s.strip()]


def _edit(text: str, lang: str, rate: float, rng: random.Random) -> str:
    units = list(text) if lang == "zh" else text.split()
    pool = units[:]
    for _ in range(max(1, round(rate * len(units)))):
        op = rng.choice("ids")
        pos = rng.randrange(len(units) + (op == "i"))
        if op == "i":
            units.insert(pos, rng.choice(pool))
        elif op == "d" and len(units) > 1:
            del units[pos]
        elif op == "s":
            units[pos] = rng.choice(pool)
    return "".join(units) if lang == "zh" else " ".join(units)


def _ws_punct(text: str, lang: str, rng: random.Random) -> str:
    """Full-width -> ASCII punctuation (zh), half of the ASCII punctuation dropped,
    whitespace runs changed (newline <-> space, doubled, tabs), spaces after punctuation."""
    if lang == "zh":
        text = text.translate(PUNCT_ZH)
    out = []
    for ch in text:
        r = rng.random()
        if ch in ",.;:!?" and r < 0.5:
            continue
        if ch.isspace():
            ch = rng.choice([" ", "  ", "\n", "\t", " \n"])
        elif ch in ",.;:!?()" and r > 0.8:
            ch += " "
        out.append(ch)
    return "".join(out)


def make_variant(text: str, lang: str, kind: str, rng: random.Random) -> str | None:
    if kind == "exact":
        return text
    if kind == "ws_punct":
        return _ws_punct(text, lang, rng)
    if kind.startswith("edit"):
        return _edit(text, lang, int(kind[4:]) / 100, rng)
    if kind == "shuffle":
        sents = _sentences(text, lang)
        if len(sents) < 4:
            return None
        for _ in range(2):
            i, j = rng.sample(range(len(sents)), 2)
            sents[i], sents[j] = sents[j], sents[i]
        return ("" if lang == "zh" else " ").join(sents)
    if kind in ("prefix", "suffix"):
        plate = rng.choice(BOILERPLATE[lang])
        return f"{plate}\n{text}" if kind == "prefix" else f"{text}\n{plate}"
    if kind == "trunc80":
        return text[: int(len(text) * 0.8)]
    raise ValueError(kind)


def build_set(bases: list[tuple[str, str, str]], seed: int) -> list[dict]:
    """Records: every base, plus one variant for every other base (kinds in rotation)."""
    rng = random.Random(seed)
    records, k = [], 0
    for i, (doc_id, text, lang) in enumerate(bases):
        records.append({"id": doc_id, "text": text, "lang": lang, "group": doc_id, "kind": "base"})
        if i % 2:
            continue
        kind = KINDS[k % len(KINDS)]
        variant = make_variant(text, lang, kind, rng)
        if variant is None:
            continue
        k += 1
        records.append(
            {
                "id": f"~{doc_id}~{kind}",
                "text": variant,
                "lang": lang,
                "group": doc_id,
                "kind": kind,
            }
        )
    return records


# -- scoring -----------------------------------------------------------------------------


def score(records: list[dict], cluster_of: dict[str, str], dropped: set[str]) -> dict:
    """Pairwise P/R/F1, unique texts wrongly removed, recall per kind."""
    pred: dict[str, list[int]] = defaultdict(list)
    for i, r in enumerate(records):
        pred[cluster_of.get(r["id"], r["id"])].append(i)
    truth_size = defaultdict(int)
    for r in records:
        truth_size[r["group"]] += 1
    tp = fp = 0
    for members in pred.values():
        for a in range(len(members)):
            for b in range(a + 1, len(members)):
                same = records[members[a]]["group"] == records[members[b]]["group"]
                tp += same
                fp += not same
    true_pairs = sum(n * (n - 1) // 2 for n in truth_size.values())
    precision = tp / (tp + fp) if tp + fp else 1.0
    recall = tp / true_pairs if true_pairs else 1.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    uniques = [r for r in records if truth_size[r["group"]] == 1]
    wrongly = sum(r["id"] in dropped for r in uniques)
    per_kind: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for r in records:
        if r["kind"] != "base":
            same = cluster_of.get(r["id"], r["id"]) == cluster_of.get(r["group"], r["group"])
            per_kind[r["kind"]][0] += same
            per_kind[r["kind"]][1] += 1
    return {
        "precision": precision,
        "recall": recall,
        "f1": f1,
        "unique_removed": wrongly,
        "uniques": len(uniques),
        "per_kind": {k: v[0] / v[1] for k, v in per_kind.items()},
    }


def _clusters_from_pairs(ids: list[str], pairs: list[tuple[str, str]]) -> tuple[dict, set]:
    parent = {i: i for i in ids}

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in pairs:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    cluster = {i: find(i) for i in ids}
    return cluster, {i for i in ids if cluster[i] != i}


# -- methods -----------------------------------------------------------------------------


def records_table(records: list[dict]) -> pa.Table:
    n = len(records)
    return pa.table(
        {
            "id": [r["id"] for r in records],
            "text": [r["text"] for r in records],
            "source": ["zh" if r["lang"] == "zh" else "en" for r in records],
            "lang": [r["lang"] for r in records],
            "meta": ["{}"] * n,
            "drop": pa.nulls(n, pa.string()),
            "_ord": np.arange(n, dtype=np.int64),
        },
        schema=BASE_SCHEMA,
    )


def run_ours(records: list[dict] | pa.Table, batch: int = 1000, **config) -> tuple[dict, set, dict]:
    """prepare -> plan -> apply, in-process (the same code the runtime runs)."""
    op = Dedup(Dedup.Config(**config), OpContext())
    op.setup()
    table = records if isinstance(records, pa.Table) else records_table(records)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        parts = {}
        for start in range(0, table.num_rows, batch):
            task = f"t{start // batch:06d}"
            part = table.slice(start, batch)
            part = part.set_column(6, "_ord", pa.array(np.arange(part.num_rows, dtype=np.int64)))
            parts[task] = tmp / f"{task}.parquet"
            pq.write_table(op.prepare(part), parts[task])
        ctx = BarrierContext(
            parts=parts,
            decision_dir=tmp / "decisions",
            audit_dir=tmp / "dedup",
            num_cpus=1,
            seed=0,
            source_stats={},
            sources={"zh": "zh", "en": "en"},
            ray_available=False,
        )
        summary = planner.plan(op, ctx)
        for task in sorted(parts):
            decision = ctx.decision_dir / f"{task}.parquet"
            if decision.exists():
                op.apply(table.slice(0, 0), pq.read_table(decision))
        audit = pq.read_table(tmp / "dedup" / "clusters.parquet").to_pylist()
    cluster_of = {r["id"]: r["cluster"] for r in audit}
    dropped = {r["id"] for r in audit if not r["kept"]}
    return cluster_of, dropped, summary


def _baseline_tokens(text: str, lang: str, ngram: int = 5, ngram_words: int = 3) -> list[str]:
    """The usual recipe without normalization: char 5-grams (zh), word 3-grams (en)."""
    if lang == "zh":
        return [text[i : i + ngram] for i in range(max(len(text) - ngram + 1, 1))]
    words = text.split()
    n = ngram_words
    return [" ".join(words[i : i + n]) for i in range(max(len(words) - n + 1, 1))]


def run_datasketch(records: list[dict], threshold: float, num_perm: int) -> tuple[dict, set]:
    from datasketch import MinHash, MinHashLSH

    lsh = MinHashLSH(threshold=threshold, num_perm=num_perm)
    pairs = []
    for r in records:
        m = MinHash(num_perm=num_perm)
        m.update_batch([t.encode() for t in _baseline_tokens(r["text"], r["lang"])])
        pairs += [(r["id"], o) for o in lsh.query(m)]
        lsh.insert(r["id"], m)
    return _clusters_from_pairs([r["id"] for r in records], pairs)


def run_rensa(records: list[dict], threshold: float, num_perm: int, bands: int) -> tuple[dict, set]:
    import rensa

    # rensa needs bands dividing num_perm: take the divisor closest to our banding.
    bands = min(
        (b for b in range(1, num_perm + 1) if num_perm % b == 0), key=lambda b: abs(b - bands)
    )
    lsh = rensa.RMinHashLSH(threshold=threshold, num_perm=num_perm, num_bands=bands)
    pairs, ids = [], [r["id"] for r in records]
    for i, r in enumerate(records):
        m = rensa.RMinHash(num_perm=num_perm, seed=42)
        m.update(_baseline_tokens(r["text"], r["lang"]))
        pairs += [(ids[i], ids[o]) for o in lsh.query(m)]
        lsh.insert(i, m)
    return _clusters_from_pairs(ids, pairs)


def run_simhash_pkg(records: list[dict], k: int = 3) -> tuple[dict, set]:
    from simhash import Simhash, SimhashIndex

    index = SimhashIndex([], k=k)
    pairs = []
    for r in records:
        h = Simhash(r["text"])
        pairs += [(r["id"], o) for o in index.get_near_dups(h)]
        index.add(r["id"], h)
    return _clusters_from_pairs([r["id"] for r in records], pairs)


# -- report ------------------------------------------------------------------------------


def _row(name: str, s: dict, seconds: float) -> str:
    kinds = " ".join(f"{s['per_kind'].get(k, float('nan')):.2f}" for k in KINDS)
    return (
        f"{name:<34} P={s['precision']:.4f} R={s['recall']:.4f} F1={s['f1']:.4f} "
        f"uniq_rm={s['unique_removed']}/{s['uniques']}  {kinds}  ({seconds:.1f}s)"
    )


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--demo", default=str(ROOT / "data" / "demo"))
    ap.add_argument("--bases", type=int, default=400, help="base documents per group (3 groups)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--num-perm", type=int, default=128)
    ap.add_argument("--threshold", type=float, default=None, help="default: ours")
    ap.add_argument("--sweep", action="store_true", help="also sweep our settings")
    ap.add_argument("--no-baselines", action="store_true")
    args = ap.parse_args()

    demo = Path(args.demo)
    if not (demo / ".done").exists():
        print(f"{demo} is not built (make demo-data)", file=sys.stderr)
        return 2
    bases = remove_natural_duplicates(load_bases(demo, args.bases, args.seed))
    records = build_set(bases, args.seed)
    defaults = Dedup.Config()
    threshold = args.threshold or defaults.threshold
    n_var = sum(r["kind"] != "base" for r in records)
    print(
        f"set: {len(bases)} bases after natural-dup removal, {n_var} variants, {len(records)} docs"
    )
    print(f"{'method':<34} {'':>56}  " + " ".join(f"{k:>4}"[:4] for k in KINDS))

    results = {}
    t = time.perf_counter()
    cl, dr, summary = run_ours(records, threshold=threshold, num_perm=args.num_perm)
    results["ours minhash"] = score(records, cl, dr)
    print(
        _row(
            f"ours minhash t={threshold} b{summary['bands']}r{summary['rows']}",
            results["ours minhash"],
            time.perf_counter() - t,
        )
    )
    for method in ("simhash", "exact"):
        t = time.perf_counter()
        cl, dr, _ = run_ours(records, method=method)
        results[f"ours {method}"] = score(records, cl, dr)
        print(_row(f"ours {method}", results[f"ours {method}"], time.perf_counter() - t))
    if args.sweep:
        _sweep(records, args.num_perm)
    if args.no_baselines:
        return 0
    bands = summary["bands"]
    for name, fn in (
        ("datasketch MinHashLSH", lambda: run_datasketch(records, threshold, args.num_perm)),
        ("rensa RMinHashLSH", lambda: run_rensa(records, threshold, args.num_perm, bands)),
        ("simhash pkg k=3", lambda: run_simhash_pkg(records, 3)),
    ):
        t = time.perf_counter()
        results[name] = score(records, *fn())
        print(_row(name, results[name], time.perf_counter() - t))
    ours = results["ours minhash"]["f1"]
    print(f"F1 ratio ours/datasketch: {ours / results['datasketch MinHashLSH']['f1']:.3f}")
    print(f"F1 ratio ours/rensa: {ours / results['rensa RMinHashLSH']['f1']:.3f}")
    print(
        f"F1 ratio ours simhash / simhash pkg: "
        f"{results['ours simhash']['f1'] / max(results['simhash pkg k=3']['f1'], 1e-9):.3f}"
    )
    return 0


def _sweep(records: list[dict], num_perm: int) -> None:
    grid = [
        {"threshold": t, "ngram": n, "ngram_words": w}
        for t in (0.4, 0.5, 0.6, 0.7)
        for n, w in ((3, 2), (4, 2), (5, 3))
    ]
    grid += [
        {
            "threshold": 0.5,
            "ngram": 3,
            "ngram_words": 2,
            "strip_punctuation": False,
            "lowercase": False,
            "nfkc": False,
        },
        {"threshold": 0.5, "ngram": 3, "shingle": "jieba", "ngram_words": 2},
        {"threshold": 0.5, "ngram": 3, "shingle": "char"},
        {"threshold": 0.5, "ngram": 3, "ngram_words": 2, "engine": "numpy"},
    ]
    for cfg in grid:
        t = time.perf_counter()
        cl, dr, _ = run_ours(records, num_perm=num_perm, **cfg)
        print(
            _row(
                "  " + ",".join(f"{k}={v}" for k, v in cfg.items()),
                score(records, cl, dr),
                time.perf_counter() - t,
            )
        )
    for k, blocks in ((3, 6), (4, 8), (6, 8), (8, 10)):
        for features in ({"shingle": "char", "ngram": 4}, {"ngram": 3, "ngram_words": 1}, {}):
            t = time.perf_counter()
            cl, dr, _ = run_ours(
                records, method="simhash", max_hamming=k, simhash_blocks=blocks, **features
            )
            name = f"  simhash k={k} B={blocks} {features}"
            print(_row(name, score(records, cl, dr), time.perf_counter() - t))


if __name__ == "__main__":
    sys.exit(main())
