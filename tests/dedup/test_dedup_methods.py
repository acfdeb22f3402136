"""The method protocol: every method through the same planner; a new one plugs in alone."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
from dedup_testkit import kept_ids, make_table

from dataforge.ops.dedup.method import DedupMethod
from dataforge.ops.dedup.registry import METHODS
from dataforge.ops.dedup.shingles import ShingleSet


class SmallestShingle(DedupMethod):
    """A one-permutation MinHash: the bucket key is the smallest shingle hash."""

    name = "smallest"

    def signatures(self, shingles: ShingleSet | None, points) -> np.ndarray:
        filled = shingles.counts > 0
        out = np.zeros(len(shingles.counts), dtype=np.uint64)
        starts = shingles.offsets[:-1][filled]
        out[filled] = np.minimum.reduceat(shingles.hashes, starts) if filled.any() else 0
        return out


def test_registry_lists_the_methods():
    assert sorted(METHODS) == ["exact", "minhash", "simhash"]
    assert all(cls.name == name for name, cls in METHODS.items())


def test_a_new_method_needs_no_planner_change(monkeypatch, reviews_zh, dedup_runner):
    monkeypatch.setitem(METHODS, "smallest", SmallestShingle)
    # A near copy (a cut tail: verified) and an exact copy (collapsed before the index).
    texts = [reviews_zh[0], reviews_zh[0][:-3], reviews_zh[1], reviews_zh[2], reviews_zh[2]]
    summary, out, root = dedup_runner(make_table(texts, ["zh"] * 5), method="smallest")
    assert kept_ids(out) == {"doc00000", "doc00002", "doc00003"}
    assert {r["drop"] for r in out.to_pylist() if r["drop"]} == {"dedup:smallest"}
    assert summary["method"] == "smallest" and summary["verified_pairs"] == 1
    assert summary["copies"] == 1
    published = pq.read_table(root / "dedup" / "signatures.parquet")
    assert "_smallest" in published.column_names
