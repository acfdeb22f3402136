"""The mixture math, without files or Ray: worked examples and properties."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataforge.ops.sample import Sample, mixture_plan


def shares(plan):
    return {s: m.target_share for s, m in plan.sources.items()}


def targets(plan):
    return {s: m.target_units for s, m in plan.sources.items()}


def test_worked_example_sqrt_of_9_to_1_gives_75_25():
    # p_i = n_i^0.5 / sum: sqrt(9M) = 3000, sqrt(1M) = 1000 -> 0.75 / 0.25 (natural 0.9 / 0.1)
    plan = mixture_plan({"big": 9_000_000, "small": 1_000_000}, alpha=0.5, total=10_000_000)
    assert shares(plan) == pytest.approx({"big": 0.75, "small": 0.25}, abs=1e-12)
    assert {s: m.share for s, m in plan.sources.items()} == pytest.approx(
        {"big": 0.9, "small": 0.1}
    )
    # big is cut from 9M to 7.5M, small repeated 2.5 times (within the default cap of 4)
    assert targets(plan) == pytest.approx({"big": 7_500_000, "small": 2_500_000})
    assert plan.shortfall == 0


def test_alpha_one_keeps_natural_shares_and_alpha_zero_is_uniform():
    sizes = {"a": 700, "b": 200, "c": 100}
    assert shares(mixture_plan(sizes, 1.0, 1000)) == pytest.approx({"a": 0.7, "b": 0.2, "c": 0.1})
    assert shares(mixture_plan(sizes, 0.0, 1000)) == pytest.approx({s: 1 / 3 for s in sizes})


def test_temperature_is_the_inverse_of_alpha():
    by_t = Sample.Config(temperature=2.0, keep_total=True)
    assert by_t.effective_alpha == 0.5
    assert Sample.Config(keep_total=True).effective_alpha == 1.0


def test_weights_multiply_before_normalizing():
    # 3000 * 1 vs 1000 * 3 -> equal shares
    plan = mixture_plan({"big": 9_000_000, "small": 1_000_000}, 0.5, 1000, weights={"small": 3.0})
    assert shares(plan) == pytest.approx({"big": 0.5, "small": 0.5})
    zero = mixture_plan({"a": 10, "b": 10}, 1.0, 10, weights={"b": 0.0})
    assert targets(zero) == pytest.approx({"a": 10, "b": 0})


def test_cap_binds_and_excess_is_water_filled():
    # alpha 0: 333 units wanted from each; c (10 units) caps at 4 epochs = 40; the 959 left
    # are split a/b equally (479.5 each); b caps at 360; a takes the remaining 599.
    plan = mixture_plan({"a": 900, "b": 90, "c": 10}, 0.0, 999, max_epochs=4)
    assert targets(plan) == pytest.approx({"a": 599, "b": 360, "c": 40})
    assert [plan.sources[s].capped for s in "abc"] == [False, True, True]
    assert plan.shortfall == 0


def test_all_capped_reports_the_shortfall():
    plan = mixture_plan({"a": 10, "b": 30}, 1.0, 100, max_epochs=2)
    assert targets(plan) == pytest.approx({"a": 20, "b": 60})
    assert plan.shortfall == pytest.approx(20)
    assert all(m.capped for m in plan.sources.values())


def test_no_cap_means_unbounded_repetition():
    plan = mixture_plan({"a": 10, "b": 10}, 1.0, 1000, max_epochs=None)
    assert targets(plan) == pytest.approx({"a": 500, "b": 500})


@pytest.mark.parametrize("alpha", [0.0, 0.5, 1.0])
def test_empty_source_gets_nothing_and_its_share_goes_to_the_others(alpha):
    plan = mixture_plan({"a": 400, "empty": 0, "b": 100}, alpha, 500)
    assert plan.sources["empty"].target_share == 0
    assert plan.sources["empty"].target_units == 0
    assert sum(shares(plan).values()) == pytest.approx(1.0)
    assert sum(targets(plan).values()) == pytest.approx(500)


def test_all_sources_empty_is_all_shortfall_without_division_by_zero():
    plan = mixture_plan({"a": 0, "b": 0}, 0.5, 100)
    assert targets(plan) == {"a": 0, "b": 0}
    assert shares(plan) == {"a": 0, "b": 0}
    assert plan.shortfall == 100
    assert mixture_plan({"a": 0}, 0.5, 0).shortfall == 0


def test_large_alpha_does_not_overflow():
    plan = mixture_plan({"a": 10**15, "b": 10**14}, 40.0, 10**15)
    assert shares(plan)["a"] == pytest.approx(1.0)
    assert all(math.isfinite(v) for v in targets(plan).values())


sizes_st = st.dictionaries(
    st.sampled_from("abcdefgh"), st.integers(0, 10**9), min_size=1, max_size=8
)


@settings(max_examples=300, deadline=None)
@given(
    sizes=sizes_st,
    alpha=st.floats(0, 3),
    total=st.integers(0, 10**10),
    max_epochs=st.one_of(st.none(), st.floats(1, 10)),
    weights=st.dictionaries(st.sampled_from("abcdefgh"), st.floats(0, 5)),
)
def test_plan_properties(sizes, alpha, total, max_epochs, weights):
    plan = mixture_plan(sizes, alpha, total, weights, max_epochs)
    tol = 1e-9 * max(total, 1)
    t = targets(plan)
    # every unit requested is either planned or reported as shortfall
    assert sum(t.values()) + plan.shortfall == pytest.approx(total, abs=tol * 10)
    eligible = [s for s in sizes if sizes[s] > 0 and weights.get(s, 1.0) > 0]
    if eligible:
        assert sum(shares(plan).values()) == pytest.approx(1.0)
    for s, n in sizes.items():
        assert t[s] >= 0
        if max_epochs is not None:
            assert t[s] <= n * max_epochs + tol
        if s not in eligible:
            assert t[s] == 0
    uncapped = [
        s for s in eligible if not plan.sources[s].capped and plan.sources[s].target_share > 0
    ]
    if plan.shortfall > tol:
        # shortfall only when no source could take more
        assert not uncapped
    # uncapped sources keep their relative target shares
    for a in uncapped:
        for b in uncapped:
            pa_, pb = plan.sources[a].target_share, plan.sources[b].target_share
            assert t[a] * pb == pytest.approx(t[b] * pa_, rel=1e-9, abs=tol)
