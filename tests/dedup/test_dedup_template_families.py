"""Held-out template families of short-line Chinese reference text: the defaults keep every
distinct page and still find the near-duplicates (benchmarks/dedup_template_sets.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "data" / "demo"
sys.path.insert(0, str(ROOT / "benchmarks"))

from dedup_quality import run_ours, score  # noqa: E402
from dedup_template_sets import HELD_OUT, build_families  # noqa: E402

PAGES = 200  # and the seed: the figures benchmarks/dedup_quality.py reports


@pytest.fixture(scope="module")
def held_out() -> dict[str, list[dict]]:
    if not (DEMO / ".done").exists():
        pytest.skip(f"demo corpus not built ({DEMO}/.done missing): run `make demo-data`")
    return build_families(DEMO, HELD_OUT, PAGES, seed=11)


def test_families_are_hard_negatives(held_out):
    """Every family has its pages and near-duplicates of several kinds; a verification
    without the template rule and with own content only in runs of 20 character 3-grams
    merges distinct pages of each family, so the set catches what the defaults must not do."""
    for family, records in held_out.items():
        pages = [r for r in records if r["kind"] == "base"]
        assert len(pages) == PAGES and len({r["text"] for r in pages}) == PAGES, family
        assert len({r["kind"] for r in records}) >= 6, family
        cluster_of, dropped, _ = run_ours(
            records, verify={"char_block": 20, "char_max_own": 0.05, "template_docs": 0}
        )
        assert score(records, cluster_of, dropped)["lost"] > 0, family


@pytest.mark.parametrize("family", HELD_OUT)
def test_defaults_on_a_held_out_family(held_out, family):
    """MinHash defaults: precision >= 0.99, F1 >= 0.95, no distinct page lost, every
    non-edit kind found; SimHash: precision >= 0.99 and no page lost."""
    records = held_out[family]
    minhash = score(records, *run_ours(records)[:2])
    assert minhash["precision"] >= 0.99 and minhash["f1"] >= 0.95, minhash
    assert minhash["lost"] == 0 and minhash["clusters"] == PAGES
    for kind in ("exact", "ws_punct", "edit3", "prefix", "suffix", "trunc80", "shuffle"):
        assert minhash["per_kind"].get(kind, 1.0) == 1.0, (kind, minhash["per_kind"])
    simhash = score(records, *run_ours(records, method="simhash")[:2])
    assert simhash["precision"] >= 0.99 and simhash["lost"] == 0, simhash
