"""Near-duplicate quality that generalizes: defaults chosen on one text domain, measured on
the other, for our MinHash and SimHash against datasketch and rensa at their usual settings.

Sets (``benchmarks/dedup_sets.py``): one per domain, zh (news + product reviews) and en
(standard-library documentation + package descriptions), each with hard negatives (distinct
documents sharing a template) and near-duplicates of every kind (exact, whitespace and
punctuation, 3/10/20% edits, sentence shuffles, boilerplate prefix/suffix, truncation).

Cross-domain check: a small grid of our settings (threshold x own share) is run
on domain A; the setting with the best F1 among those with precision >= 0.99 and at most
0.1% of the true clusters lost is then measured on domain B, and the reverse. The shipped
defaults are reported on both.

Template families (``benchmarks/dedup_template_sets.py``): short-line Chinese reference text
(command manuals, help pages, spec sheets, forum boards), each family one site's template
whose pages are distinct documents, with near-duplicates of every kind, built at several
generator seeds (``--family-seeds``). The template rule (``template_docs``, ``template_run``,
``residue_max_own``, ``min_residue``: :mod:`dataforge.ops.dedup.template`) is chosen on the
tuning families ``*/0`` with the domain sets of every seed (they must stay acceptable there
too) and reported, with the shipped defaults, per held-out family ``*/1`` and seed: P, R,
F1, unique documents lost, recall per kind, for MinHash and SimHash. ``manual/1`` at seed 1
was looked at while ``char_block`` and ``residue_max_own`` were set; seeds 5, 7 and 13 took
part in no choice (``--families-only --family-seeds 5,7,13``).

Scores: pairwise precision / recall / F1 over all pairs that share a predicted cluster;
*lost*: true clusters (unique texts) none of whose documents is kept (e.g. a unique
document dropped as a duplicate of an unrelated one); recall per variant kind (the variant
ends in the cluster of its base).

    .venv/bin/python benchmarks/dedup_quality.py [--bases 300] [--no-sweep] [--no-baselines]
        [--pages 200] [--family-seeds 1,2,3,11] [--families-only]
"""

from __future__ import annotations

import argparse
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
sys.path.insert(0, str(ROOT / "benchmarks"))

from dedup_sets import DOMAINS, KINDS, build_domain_set, load_bases  # noqa: E402
from dedup_template_sets import FAMILIES, HELD_OUT, TUNING, build_families  # noqa: E402

from dataforge.ops.barrier import BarrierContext  # noqa: E402
from dataforge.ops.base import OpContext  # noqa: E402
from dataforge.ops.dedup import Dedup  # noqa: E402
from dataforge.records import BASE_SCHEMA  # noqa: E402
from dataforge.runtime.shards import shard_workers  # noqa: E402
from dataforge.typed_config import from_mapping  # noqa: E402

__all__ = [
    "choose_template",
    "family_report",
    "load_bases",
    "records_table",
    "run_ours",
    "score",
]

GRID = [  # one share of own content for both kinds of text: the one setting carried over
    {"threshold": t, "verify": {"max_own": m, "char_max_own": m}}
    for t in (0.3, 0.4, 0.5)
    for m in (0.02, 0.05, 0.1)
]
TEMPLATE_GRID = [  # verify keys of the template rule; residue_max_own looser, min_residue wider
    {"template_docs": 5, "template_run": 4, "residue_max_own": m, "min_residue": n,
     "residue_min_shared": c}
    for m in (0.1, 0.15, 0.2)
    for n in (10, 15, 20)
    for c in (0.0, 0.2, 0.3)
]  # fmt: skip


def score(records: list[dict], cluster_of: dict[str, str], dropped: set[str]) -> dict:
    """Pairwise P/R/F1, true clusters lost entirely, recall per kind."""
    pred: dict[str, list[int]] = defaultdict(list)
    for i, r in enumerate(records):
        pred[cluster_of.get(r["id"], r["id"])].append(i)
    members: dict[str, list[str]] = defaultdict(list)
    for r in records:
        members[r["group"]].append(r["id"])
    tp = fp = 0
    for idx in pred.values():
        groups = defaultdict(int)
        for i in idx:
            groups[records[i]["group"]] += 1
        same = sum(n * (n - 1) // 2 for n in groups.values())
        tp += same
        fp += len(idx) * (len(idx) - 1) // 2 - same
    true_pairs = sum(len(m) * (len(m) - 1) // 2 for m in members.values())
    precision = tp / (tp + fp) if tp + fp else 1.0
    recall = tp / true_pairs if true_pairs else 1.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    lost = sum(all(i in dropped for i in m) for m in members.values())
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
        "lost": lost,
        "clusters": len(members),
        "per_kind": {k: v[0] / v[1] for k, v in per_kind.items()},
    }


def acceptable(s: dict) -> bool:
    """The issue's bar: precision >= 0.99 and at most 0.1% of the true clusters lost."""
    return s["precision"] >= 0.99 and s["lost"] <= 0.001 * s["clusters"]


def passes(s: dict) -> bool:
    """The held-out bar: acceptable and F1 >= 0.95."""
    return acceptable(s) and s["f1"] >= 0.95


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


# -- methods ---------------------------------------------------------------------------


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
    """prepare -> plan -> apply, in-process (the same code the runtime runs); ``config``:
    the stage's keys as in YAML (``verify={"char_block": 20}``)."""
    op = Dedup(from_mapping(Dedup.Config, config, "dedup"), OpContext())
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
            shards=shard_workers(False, 1),
        )
        summary = op.plan(ctx)
        for task in sorted(parts):
            decision = ctx.decision_dir / f"{task}.parquet"
            if decision.exists():
                op.apply(table.slice(0, 0), pq.read_table(decision))
        audit = pq.read_table(tmp / "dedup" / "clusters.parquet").to_pylist()
    cluster_of = {r["id"]: r["cluster"] for r in audit}
    dropped = {r["id"] for r in audit if not r["kept"]}
    return cluster_of, dropped, summary


def _baseline_tokens(text: str, lang: str, ngram: int = 5) -> list[str]:
    """The usual recipe, no normalization: character 5-grams (both languages)."""
    return [text[i : i + ngram] for i in range(max(len(text) - ngram + 1, 1))]


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


def run_rensa(records: list[dict], threshold: float, num_perm: int, bands: int = 16):
    import rensa

    lsh = rensa.RMinHashLSH(threshold=threshold, num_perm=num_perm, num_bands=bands)
    pairs, ids = [], [r["id"] for r in records]
    for i, r in enumerate(records):
        m = rensa.RMinHash(num_perm=num_perm, seed=42)
        m.update(_baseline_tokens(r["text"], r["lang"]))
        pairs += [(ids[i], ids[o]) for o in lsh.query(m)]
        lsh.insert(i, m)
    return _clusters_from_pairs(ids, pairs)


# -- report ----------------------------------------------------------------------------


def _row(name: str, s: dict, seconds: float) -> str:
    kinds = " ".join(f"{s['per_kind'].get(k, float('nan')):.2f}" for k in KINDS)
    return (
        f"{name:<40} P={s['precision']:.4f} R={s['recall']:.4f} F1={s['f1']:.4f} "
        f"lost={s['lost']}/{s['clusters']}  {kinds}  ({seconds:.1f}s)"
    )


def _ours(records: list[dict], **config) -> tuple[dict, float]:
    t = time.perf_counter()
    cl, dr, _ = run_ours(records, **config)
    return score(records, cl, dr), time.perf_counter() - t


def choose(records: list[dict], domain: str) -> dict:
    """The grid setting with the best F1 among the acceptable ones on this domain."""
    best, best_f1 = GRID[0], -1.0
    for cfg in GRID:
        s, secs = _ours(records, **cfg)
        print(_row(f"  [{domain}] " + ",".join(f"{k}={v}" for k, v in cfg.items()), s, secs))
        if acceptable(s) and s["f1"] > best_f1:
            best, best_f1 = cfg, s["f1"]
    return best


def report_domain(domain: str, records: list[dict], baselines: bool) -> None:
    n_var = sum(r["kind"] != "base" for r in records)
    groups = len({r["group"] for r in records})
    print(f"\n== domain {domain}: {len(records)} docs, {groups} true clusters, {n_var} variants")
    print(f"{'method':<40} {'':>62}" + " ".join(f"{k:>4}"[:4] for k in KINDS))
    for method in ("minhash", "simhash", "exact"):
        s, secs = _ours(records, method=method)
        print(_row(f"ours {method} (defaults)", s, secs) + ("" if acceptable(s) else "  FAIL"))
    if not baselines:
        return
    for name, fn in (
        ("datasketch MinHashLSH t=0.7 char5", lambda: run_datasketch(records, 0.7, 128)),
        ("rensa RMinHashLSH t=0.7 char5", lambda: run_rensa(records, 0.7, 128)),
        ("datasketch MinHashLSH t=0.5 char5", lambda: run_datasketch(records, 0.5, 128)),
    ):
        t = time.perf_counter()
        s = score(records, *fn())
        print(_row(name, s, time.perf_counter() - t))


def choose_template(sets: dict[str, list[dict]], grid=TEMPLATE_GRID, show=print) -> dict | None:
    """The template-rule setting with the best lowest F1 over ``sets`` among those
    acceptable on every set whose next looser ``residue_max_own`` is acceptable too (a
    margin: a setting at the edge of precision on the tuning sets is past it on others); ties: the smallest ``min_residue`` (the rule on
    residues decides the most pairs), then the first in the grid. None: no setting is
    acceptable with that margin."""
    ok, low_f1 = {}, {}
    for cfg in grid:
        per_set = {name: _ours(recs, verify=cfg)[0] for name, recs in sets.items()}
        key = tuple(cfg.items())
        ok[key] = all(acceptable(s) for s in per_set.values())
        low_f1[key] = min(s["f1"] for s in per_set.values())
        worst = min(per_set, key=lambda n: per_set[n]["f1"])
        show(f"  {cfg} min F1 {low_f1[key]:.4f} ({worst}) {'ok' if ok[key] else 'NOT acceptable'}")
    owns = sorted({c["residue_max_own"] for c in grid})

    def looser(cfg: dict) -> tuple:
        nxt = [m for m in owns if m > cfg["residue_max_own"]][:1]
        return tuple({**cfg, "residue_max_own": nxt[0]}.items()) if nxt else None

    safe = [c for c in grid if ok[tuple(c.items())] and ok.get(looser(c), False)]
    if not safe:
        return None
    return max(safe, key=lambda c: (round(low_f1[tuple(c.items())], 4), -c["min_residue"]))


def family_report(sets: dict[str, list[dict]], configs: dict[str, dict], show=print) -> dict:
    """Rows per family and config; returns ``{(config name, family): score}``."""
    out = {}
    for family, recs in sets.items():
        pages = sum(r["kind"] == "base" for r in recs)
        show(f"-- {family}: {len(recs)} docs, {pages} distinct pages")
        for name, cfg in configs.items():
            s, secs = _ours(recs, **cfg)
            out[name, family] = s
            show(_row(f"{name}", s, secs) + ("" if passes(s) else "  below the bar"))
    return out


def report_families(demo: Path, pages: int, seeds: list[int], bases: int) -> None:
    """Choose the template rule on the tuning families and the domain sets of every
    generator seed, then report the held-out families of every seed."""
    print("\n== template families: choose on", ", ".join(TUNING), "(+ the domain sets), seeds",
          seeds)  # fmt: skip
    tuning, held_out = {}, {}
    for seed in seeds:
        families = build_families(demo, FAMILIES, pages, seed)
        tuning |= {f"{f}@{seed}": families[f] for f in TUNING}
        tuning |= {f"{d}@{seed}": build_domain_set(demo, d, bases, seed) for d in DOMAINS}
        held_out |= {f"{f}@{seed}": families[f] for f in HELD_OUT}
    chosen = choose_template(tuning)
    keys = TEMPLATE_GRID[0].keys()
    shipped = {k: getattr(Dedup.Config().verify, k) for k in keys}
    if chosen is None:
        print(f"no template setting is acceptable with a margin on the tuning sets (the "
              f"failing set is named above); shipped defaults: {shipped}")  # fmt: skip
        chosen = shipped
    else:
        print(f"chosen: {chosen}; shipped defaults: {shipped}")
    print(f"\n== held-out families (never used for a choice): {', '.join(HELD_OUT)}")
    print(f"{'':<40} {'':>62}" + " ".join(f"{k:>4}"[:4] for k in KINDS))
    configs = {"minhash defaults": {}, "simhash defaults": {"method": "simhash"}}
    if chosen != shipped:
        configs[f"minhash chosen {chosen}"] = {"verify": chosen}
    family_report(held_out, configs)


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--demo", default=str(ROOT / "data" / "demo"))
    ap.add_argument("--bases", type=int, default=300, help="base documents per corpus group")
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--family-seeds", default="1,2,3,11", help="generator seeds of the families")
    ap.add_argument("--no-sweep", action="store_true", help="skip the cross-domain check")
    ap.add_argument("--no-baselines", action="store_true")
    ap.add_argument("--pages", type=int, default=200, help="distinct pages per template family")
    ap.add_argument("--families-only", action="store_true", help="only the template families")
    args = ap.parse_args()
    demo = Path(args.demo)
    if not (demo / ".done").exists():
        print(f"{demo} is not built (make demo-data)", file=sys.stderr)
        return 2
    seeds = [int(s) for s in args.family_seeds.split(",")]
    report_families(demo, args.pages, seeds, args.bases)
    if args.families_only:
        return 0
    sets = {d: build_domain_set(demo, d, args.bases, args.seed) for d in DOMAINS}
    for domain in DOMAINS:
        report_domain(domain, sets[domain], not args.no_baselines)
    if args.no_sweep:
        return 0
    print("\n== cross-domain check: choose on one domain, measure on the other")
    for tuned, held_out in (("zh", "en"), ("en", "zh")):
        cfg = choose(sets[tuned], tuned)
        s, secs = _ours(sets[held_out], **cfg)
        name = f"chosen on {tuned} {cfg} -> {held_out}"
        print(_row(name, s, secs) + ("" if acceptable(s) else "  FAIL"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
