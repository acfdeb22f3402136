"""The sample barrier end to end without Ray: prepare -> parquet parts -> plan -> apply."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sample_harness import outcome, run_sample, synthetic_docs

from dataforge.ops.base import OpContext
from dataforge.ops.sample import Sample, keyed_hashes, planner


def realized(applied: pa.Table) -> dict[str, int]:
    """Units (chars) actually emitted per source: kept originals plus repeated copies."""
    kept = applied.filter(pc.is_null(applied.column("drop")))
    lengths = pc.utf8_length(kept.column("text")).to_numpy()
    sources = np.array(kept.column("source").to_pylist())
    return {s: int(lengths[sources == s].sum()) for s in np.unique(sources)}


def test_realized_shares_within_half_a_point_at_100k_docs(tmp_path):
    counts = {"news_zh": 60_000, "reviews_zh": 30_000, "docs_en": 9_000, "pkgdesc_en": 1_000}
    docs = synthetic_docs(counts, seed=1)
    params = {"alpha": 0.3, "unit": "chars", "keep_total": True, "max_epochs": 20}
    applied, summary = run_sample(docs, params, tmp_path, tasks=3, batch_rows=4096)
    units = realized(applied)
    total = sum(units.values())
    for s in counts:
        info = summary["sources"][s]
        assert not info["capped"]
        assert abs(units[s] / total - info["p"]) < 0.005, (s, units[s] / total, info["p"])
        assert units[s] == info["realized_units"]
    # both directions happened: the big source was cut, the small one repeated ~11x
    assert summary["sources"]["news_zh"]["dropped_docs"] > 0
    assert summary["sources"]["pkgdesc_en"]["repetition"] > 10
    # exact selection: each source misses its target by less than one document (200 chars)
    for s in counts:
        assert (
            abs(summary["sources"][s]["realized_units"] - summary["sources"][s]["target_units"])
            <= 200
        )


def test_selection_is_identical_across_tasks_batches_and_order(tmp_path):
    docs = synthetic_docs({"news_zh": 3000, "docs_en": 500}, seed=2)
    params = {"alpha": 0.5, "unit": "chars", "target": 200_000, "max_epochs": 3.5}
    one, s1 = run_sample(docs, params, tmp_path / "a", tasks=1, batch_rows=1000)
    three, s3 = run_sample(docs, params, tmp_path / "b", tasks=3, batch_rows=257, shuffle_seed=9)
    assert outcome(one) == outcome(three)
    assert s1 == s3
    other_seed, _ = run_sample(docs, params, tmp_path / "c", tasks=1, seed=99)
    assert outcome(other_seed) != outcome(one)


def test_accounting_per_source(tmp_path):
    docs = synthetic_docs({"news_zh": 2000, "reviews_zh": 300, "docs_en": 40}, seed=3)
    params = {"temperature": 3.0, "unit": "docs", "target": 2340, "max_epochs": 6}
    applied, summary = run_sample(docs, params, tmp_path, tasks=2, batch_rows=128)
    copies = applied.column("_copy").to_numpy()
    originals = applied.filter(pa.array(copies == 0))
    for s, info in summary["sources"].items():
        mine = originals.filter(pc.equal(originals.column("source"), s))
        kept = int(pc.sum(pc.is_null(mine.column("drop"))).as_py())
        dropped = int(pc.sum(pc.equal(mine.column("drop"), "sample")).as_py() or 0)
        repeated = int(np.sum((copies > 0) & (np.array(applied.column("source").to_pylist()) == s)))
        assert mine.num_rows == info["input_docs"] == kept + dropped
        assert (kept, dropped, repeated) == (
            info["kept_docs"],
            info["dropped_docs"],
            info["repeated_docs"],
        )
        assert info["output_docs"] == kept + repeated == info["realized_units"]  # unit: docs
    assert applied.num_rows == 2340 + sum(i["dropped_docs"] for i in summary["sources"].values())


def test_upsampling_stops_at_max_epochs_and_redistributes(tmp_path):
    docs = synthetic_docs({"news_zh": 900, "reviews_zh": 90, "docs_en": 10}, seed=4)
    # alpha 0: 333 docs wanted from each; the numbers of the worked water-filling example
    params = {"alpha": 0.0, "unit": "docs", "target": 999, "max_epochs": 4}
    applied, summary = run_sample(docs, params, tmp_path, tasks=2, batch_rows=100)
    src = summary["sources"]
    assert [src[s]["realized_units"] for s in ("news_zh", "reviews_zh", "docs_en")] == [
        599,
        360,
        40,
    ]
    assert [src[s]["capped"] for s in ("news_zh", "reviews_zh", "docs_en")] == [False, True, True]
    assert src["docs_en"]["cap_shortfall"] == pytest.approx(333 - 40)
    assert summary["shortfall_units"] == 0
    ids = applied.column("id").to_pylist()
    assert len(set(ids)) == len(ids)  # every copy has its own id
    assert ids.count("docs_en/3#r3") == 1 and "docs_en/3#r4" not in ids
    assert int(pc.max(applied.column("_copy")).as_py()) == 3


def test_all_capped_reports_shortfall(tmp_path):
    docs = synthetic_docs({"news_zh": 10, "docs_en": 30}, seed=5)
    params = {"unit": "docs", "target": 100, "max_epochs": 2}
    _, summary = run_sample(docs, params, tmp_path)
    assert summary["realized_units"] == 80
    assert summary["shortfall_units"] == pytest.approx(20)


def test_fractional_epochs_repeat_a_hash_selected_part(tmp_path):
    docs = synthetic_docs({"news_zh": 100, "docs_en": 100}, seed=6)
    params = {"unit": "docs", "target": 500, "weights": {"docs_en": 0.25}}
    applied, summary = run_sample(docs, params, tmp_path)
    # docs_en gets 100 (p = 0.2), news_zh 400 = 4 epochs exactly
    assert summary["sources"]["docs_en"]["realized_units"] == 100
    assert summary["sources"]["news_zh"]["repeated_docs"] == 300
    params = {"unit": "docs", "target": 250, "weights": {"docs_en": 0.0}, "max_epochs": 3}
    applied, summary = run_sample(docs, params, tmp_path / "b")
    news = applied.filter(pc.equal(applied.column("source"), "news_zh"))
    originals = pc.list_element(pc.split_pattern(news.column("id"), "#"), 0)
    per_doc = pc.value_counts(originals).field("counts")
    assert sorted(set(per_doc.to_pylist())) == [2, 3]  # 2.5 epochs: 2 for all, 3 for half
    assert summary["sources"]["news_zh"]["realized_units"] == 250
    assert summary["sources"]["docs_en"]["dropped_docs"] == 100


def test_empty_source_is_redistributed_not_a_crash(tmp_path):
    docs = synthetic_docs({"news_zh": 400, "docs_en": 100}, seed=7)
    params = {"alpha": 0.5, "unit": "docs", "keep_total": True}
    sources = ["news_zh", "reviews_zh", "docs_en"]  # reviews_zh lost everything upstream
    applied, summary = run_sample(docs, params, tmp_path, sources=sources)
    empty = summary["sources"]["reviews_zh"]
    assert (empty["n"], empty["p"], empty["realized_units"], empty["repetition"]) == (
        0,
        0.0,
        0,
        0.0,
    )
    assert summary["sources"]["news_zh"]["p"] == pytest.approx(20 / 30)
    assert summary["realized_units"] == 500


def test_apply_marks_drops_and_appends_copies():
    op = Sample(Sample.Config(unit="docs", keep_total=True))
    batch = synthetic_docs({"a": 4}).set_column(6, "_ord", pa.array([0, 1, 2, 3], pa.int64()))
    batch = batch.set_column(5, "drop", pa.array([None, None, None, "too_short"], pa.string()))
    # _ord 99 belongs to another batch of the task; row 3 was dropped by an earlier op
    decision = pa.table({"_ord": [1, 2, 3, 99], "copies": [0, 3, 0, 5]})
    out = op.apply(batch, decision)
    assert out.column("id").to_pylist() == ["a/0", "a/1", "a/2", "a/3", "a/2#r1", "a/2#r2"]
    assert out.column("drop").to_pylist() == [None, "sample", None, "too_short", None, None]
    assert out.column("_copy").to_pylist() == [0, 0, 0, 0, 1, 2]
    assert out.column("_ord").to_pylist() == [0, 1, 2, 3, 2, 2]
    unchanged = op.apply(batch, None)
    assert unchanged.drop_columns("_copy").equals(batch)
    assert unchanged.column("_copy").to_pylist() == [0, 0, 0, 0]


def test_prepare_units_and_keyed_hash():
    docs = synthetic_docs({"a": 3}, max_len=5)
    chars = Sample(Sample.Config(unit="chars", keep_total=True), OpContext(seed=5)).prepare(docs)
    assert chars.column("_units").to_pylist() == pc.utf8_length(docs.column("text")).to_pylist()
    assert chars.column("_hash").to_pylist() == keyed_hashes(["a/0", "a/1", "a/2"], 5).to_pylist()
    assert chars.schema.field("_hash").type == pa.uint64()
    own_seed = Sample(Sample.Config(unit="docs", keep_total=True, seed=6), OpContext(seed=5))
    assert own_seed.prepare(docs).column("_hash") != chars.column("_hash")
    tokens = Sample(Sample.Config(unit="tokens", keep_total=True))
    with pytest.raises(ValueError, match="num_tokens"):
        tokens.prepare(docs)
    with_tokens = docs.append_column("num_tokens", pa.array([3, 1, 4], pa.int64()))
    assert tokens.prepare(with_tokens).column("_units").to_pylist() == [3, 1, 4]


def test_stats_that_disagree_with_the_parts_are_an_error(tmp_path, monkeypatch):
    import sample_harness

    real = sample_harness.source_stats
    monkeypatch.setattr(
        sample_harness,
        "source_stats",
        lambda d, s: {k: {**v, "chars": v["chars"] + 1} for k, v in real(d, s).items()},
    )
    with pytest.raises(RuntimeError, match="disagree"):
        run_sample(synthetic_docs({"a": 5}), {"unit": "chars", "keep_total": True}, tmp_path)


def reference_copies(docs: pa.Table, target: float, seed: int) -> dict[str, int]:
    """Brute force: floor(r) copies of everything, then the remainder by ascending
    (hash, units), stopping on whichever side of it is closer (fewer on a tie)."""
    ids = docs.column("id").to_pylist()
    units = pc.utf8_length(docs.column("text")).to_pylist()
    base = int(target // sum(units))
    remainder = target - base * sum(units)
    copies = dict.fromkeys(ids, base)
    total = 0
    for _, u, i in sorted(zip(keyed_hashes(ids, seed).to_pylist(), units, ids, strict=True)):
        if total >= remainder or remainder - total <= total + u - remainder:
            break
        copies[i] += 1
        total += u
    return copies


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    n=st.integers(1, 300),
    ratio=st.floats(0.0, 3.5),
    tasks=st.integers(1, 4),
    bits=st.sampled_from([1, 4, 16]),
)
def test_selection_matches_brute_force(tmp_path_factory, n, ratio, tasks, bits):
    docs = synthetic_docs({"a": n}, seed=n, max_len=50)
    total_chars = pc.sum(pc.utf8_length(docs.column("text"))).as_py()
    params = {"unit": "chars", "target": max(1, int(total_chars * ratio)), "max_epochs": 4}
    # coarse histograms put many documents in the bucket where the cut falls
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(planner, "_BUCKETS", 1 << bits)
        mp.setattr(planner, "_SHIFT", np.uint64(64 - bits))
        applied, _ = run_sample(
            docs, params, tmp_path_factory.mktemp("p"), tasks=tasks, batch_rows=37
        )
    emitted = applied.filter(pc.is_null(applied.column("drop")))
    originals = pc.list_element(pc.split_pattern(emitted.column("id"), "#"), 0).to_pylist()
    got = dict.fromkeys(docs.column("id").to_pylist(), 0)
    for i in originals:
        got[i] += 1
    assert got == reference_copies(docs, params["target"], seed=1234)
