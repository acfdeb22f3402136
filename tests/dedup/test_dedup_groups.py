"""Verification in groups of connected candidates, one forked process each: the groups
decide exactly what the shards decide, components are never split, a group's failure or
death fails the plan."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time

import numpy as np
import pyarrow.parquet as pq
import pytest
from dedup_testkit import kept_ids, make_table
from hypothesis import given, settings
from hypothesis import strategies as st
from test_dedup_plan import labeled  # noqa: F401 - the fixture

from dataforge.runtime.barriers import _dedup_groups as groups_module
from dataforge.runtime.barriers import dedup as planner
from dataforge.runtime.barriers._dedup_groups import components, deal
from dataforge.runtime.failures import RunFailed

_edges = st.lists(
    st.tuples(st.integers(0, 40), st.integers(0, 40)).map(lambda e: (e[0] * 1009, e[1] * 1009)),
    max_size=60,
)


def _reference_components(pairs: list[tuple[int, int]]) -> dict[int, int]:
    """Node -> smallest node of its component, by a plain union-find."""
    parent: dict[int, int] = {}

    def find(x: int) -> int:
        while parent.setdefault(x, x) != x:
            x = parent[x]
        return x

    for a, b in pairs:
        ra, rb = find(a), find(b)
        parent[max(ra, rb)] = min(ra, rb)
    return {x: find(x) for x in parent}


@settings(max_examples=200, deadline=None)
@given(_edges)
def test_components_are_those_of_a_union_find(pairs) -> None:
    nodes, root = components(np.array(pairs, dtype=np.int64).reshape(-1, 2))
    expected = _reference_components(pairs)
    assert nodes.tolist() == sorted(expected)
    assert {int(n): int(nodes[r]) for n, r in zip(nodes, root, strict=True)} == expected


def test_a_long_chain_and_a_star_are_one_component_each() -> None:
    chain = np.stack([np.arange(0, 5000), np.arange(1, 5001)], axis=1)[::-1]
    star = np.stack([np.full(300, 10_000), np.arange(10_001, 10_301)], axis=1)
    nodes, root = components(np.concatenate([chain, star]))
    assert len(nodes) == 5001 + 301
    assert set(nodes[root[:5001]].tolist()) == {0} and set(nodes[root[5001:]].tolist()) == {10_000}


@settings(max_examples=200, deadline=None)
@given(_edges.filter(len), st.integers(1, 4), st.randoms(use_true_random=False))
def test_deal_keeps_components_whole_and_balances_them(pairs, groups, rng) -> None:
    pairs = np.array(pairs, dtype=np.int64)
    nodes, root = components(pairs)
    weight = np.array([rng.choice([1.0, 2.5, 40.0]) for _ in nodes])
    dealt = deal(pairs, lambda sorted_nodes: weight[np.searchsorted(nodes, sorted_nodes)], groups)
    assert len(dealt) == groups
    assert sorted(np.concatenate(dealt).tolist()) == list(range(len(pairs)))  # each pair once
    owner = {}
    for g, sel in enumerate(dealt):
        for node in np.unique(pairs[sel]).tolist():
            assert owner.setdefault(node, g) == g  # no node (so no component) in two groups
    heft: dict[int, float] = {}
    for i, r in enumerate(root.tolist()):
        heft[r] = heft.get(r, 0.0) + weight[i]
    loads = [sum(weight[np.searchsorted(nodes, np.unique(pairs[sel]))]) for sel in dealt]
    # greedy, heaviest first: no group exceeds the lightest by more than one component
    assert max(loads) - min(loads) <= max(heft.values()) + 1e-9


def _summary_without_groups(summary: dict) -> dict:
    return {
        k: v for k, v in summary.items() if k not in ("verification_groups", "shard_peak_rss_mb")
    }


def _audit(root) -> list[tuple]:
    rows = pq.read_table(root / "dedup" / "clusters.parquet").to_pylist()
    return sorted(tuple(r.values()) for r in rows)


@pytest.mark.parametrize("cpus, batch", [(2, 16), (3, 7), (2, 1000)])
def test_groups_decide_what_the_shards_decide(labeled, dedup_runner, monkeypatch, cpus, batch):  # noqa: F811
    monkeypatch.setattr(planner, "GROUPS_MIN_DOCS", 0)
    shards = dedup_runner(labeled, batch=batch, num_cpus=cpus)
    grouped = dedup_runner(labeled, batch=batch, num_cpus=cpus, may_fork=True)
    assert shards[0]["verification_groups"] == 1 and grouped[0]["verification_groups"] == cpus
    assert _summary_without_groups(grouped[0]) == _summary_without_groups(shards[0])
    assert grouped[0]["dropped"] == 75 and grouped[0]["verified_pairs"] > 0
    assert kept_ids(grouped[1]) == kept_ids(shards[1])
    assert grouped[1].to_pylist() == shards[1].to_pylist()
    assert _audit(grouped[2]) == _audit(shards[2])
    assert not multiprocessing.active_children()


def test_groups_need_enough_candidates_and_no_against_run(labeled, dedup_runner, monkeypatch):  # noqa: F811
    summary, _, prev = dedup_runner(labeled, may_fork=True)  # 135 records: below the minimum
    assert summary["verification_groups"] == 1 and summary["candidate_docs"] > 0
    monkeypatch.setattr(planner, "GROUPS_MIN_DOCS", 0)
    # pairs with a published record are judged on signatures, which groups do not read
    summary, _, _ = dedup_runner(labeled, batch=9, may_fork=True, against=(str(prev),))
    assert summary["verification_groups"] == 1 and summary["dropped_against"] == 135


def _raises_in_a_child(parent: int):
    real = groups_module.verify_group

    def verify_group(*args):
        if os.getpid() != parent:
            raise ValueError("a child's own error")
        return real(*args)

    return verify_group


def _killed_in_a_child(parent: int):
    real = groups_module.verify_group

    def verify_group(*args):
        if os.getpid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(*args)

    return verify_group


def test_a_group_error_or_death_fails_the_plan(labeled, dedup_runner, monkeypatch):  # noqa: F811
    monkeypatch.setattr(planner, "GROUPS_MIN_DOCS", 0)
    monkeypatch.setattr(groups_module, "verify_group", _raises_in_a_child(os.getpid()))
    with pytest.raises(ValueError, match="a child's own error"):
        dedup_runner(labeled, may_fork=True)
    monkeypatch.setattr(groups_module, "verify_group", _killed_in_a_child(os.getpid()))
    with pytest.raises(
        RunFailed, match=r"dataforge-dedup-group-1: process \d+ died \(killed by signal 9\)"
    ):
        dedup_runner(labeled, batch=8, may_fork=True)
    assert not multiprocessing.active_children()


def test_groups_without_any_candidate_pair(reviews_zh, dedup_runner, monkeypatch):
    monkeypatch.setattr(planner, "GROUPS_MIN_DOCS", 0)
    table = make_table(reviews_zh[:30], ["zh"] * 30)  # distinct real reviews
    shards = dedup_runner(table, batch=8)
    grouped = dedup_runner(table, batch=8, may_fork=True)
    assert grouped[0]["verification_groups"] == 2 and grouped[0]["dropped"] == 0
    assert _summary_without_groups(grouped[0]) == _summary_without_groups(shards[0])
    assert grouped[1].to_pylist() == shards[1].to_pylist() and kept_ids(grouped[1]) == set(
        table.column("id").to_pylist()
    )


def _parent_fails_while_a_child_works(parent: int):
    real = groups_module.verify_group

    def verify_group(*args):
        if os.getpid() == parent:
            raise KeyboardInterrupt  # Ctrl-C in the driver while a group is still working
        time.sleep(60)
        return real(*args)

    return verify_group


def test_an_interrupted_driver_leaves_no_group_process(labeled, dedup_runner, monkeypatch):  # noqa: F811
    monkeypatch.setattr(planner, "GROUPS_MIN_DOCS", 0)
    monkeypatch.setattr(
        groups_module, "verify_group", _parent_fails_while_a_child_works(os.getpid())
    )
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        dedup_runner(labeled, may_fork=True)
    assert time.monotonic() - started < 30  # the sleeping child was killed, not waited for
    assert not multiprocessing.active_children()
