"""Precision and recall of the ``pii`` detectors per kind on two labeled sets: the
project's template set (:mod:`pii_sets`), with the validators (checksums, address parsing,
context rules) and without them, and the held-out set of ``Faker`` values in real
paragraphs (:mod:`pii_faker_set`).

A detected span counts as correct only with the labeled kind and exact bounds.

    .venv/bin/python benchmarks/pii_quality.py [--per-kind 500] [--seed 0]
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pii_faker_set import build_faker_set  # noqa: E402
from pii_sets import KINDS, build_set  # noqa: E402

from dataforge.ops.pii_patterns import find_pii  # noqa: E402

__all__ = ["scores"]


def scores(examples, validate: bool = True) -> dict[str, tuple[float, float, int, int, int]]:
    """kind -> (precision, recall, true positives, false positives, false negatives)."""
    tp, fp, fn = Counter(), Counter(), Counter()
    for text, gold in examples:
        truth = set(gold)
        found = {(s.kind, s.start, s.end) for s in find_pii(text, validate=validate)}
        for kind, *_ in found & truth:
            tp[kind] += 1
        for kind, *_ in found - truth:
            fp[kind] += 1
        for kind, *_ in truth - found:
            fn[kind] += 1
    out = {}
    for kind in KINDS:
        p = tp[kind] / (tp[kind] + fp[kind]) if tp[kind] + fp[kind] else 1.0
        r = tp[kind] / (tp[kind] + fn[kind]) if tp[kind] + fn[kind] else 1.0
        out[kind] = (p, r, tp[kind], fp[kind], fn[kind])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-kind", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    examples = build_set(args.per_kind, args.seed)
    print(f"template set: {len(examples)} passages, {args.per_kind} labeled values per kind")
    with_v, without = scores(examples, True), scores(examples, False)
    print(f"{'kind':<11} {'P':>6} {'R':>6} {'FP':>5} {'FN':>5} | no validators: {'P':>6} {'FP':>5}")
    for kind in KINDS:
        p, r, _, fp, fn = with_v[kind]
        p0, _, _, fp0, _ = without[kind]
        print(f"{kind:<11} {p:6.3f} {r:6.3f} {fp:5d} {fn:5d} | {'':15}{p0:6.3f} {fp0:5d}")
    faker_set = build_faker_set(args.per_kind, args.seed, with_demo=True)
    print(f"\nFaker set: {len(faker_set)} passages of real paragraphs, one Faker value each")
    print(f"{'kind':<11} {'P':>6} {'R':>6} {'FP':>5} {'FN':>5}")
    for kind, (p, r, _, fp, fn) in scores(faker_set).items():
        print(f"{kind:<11} {p:6.3f} {r:6.3f} {fp:5d} {fn:5d}")


if __name__ == "__main__":
    main()
