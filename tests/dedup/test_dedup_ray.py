"""The dedup planner on Ray index actors: determinism across actor counts and batch sizes,
and an index actor killed mid-stage. One local Ray session for the module (slow to start)."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest
from dedup_testkit import kept_ids, make_table, run_dedup

from dataforge.ops.dedup import planner

pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def ray_session():
    ray = pytest.importorskip("ray")
    # address="local": a fresh instance even when someone ran `ray start` on this machine.
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def test_the_ray_executor_indexes_on_actors_the_local_one_in_the_driver(
    ray_session, table, tmp_path, monkeypatch
):
    actors_seen = []
    monkeypatch.setattr(planner, "_fault_hook", lambda phase, attempt, a: actors_seen.append(a))
    summary, out, _ = run_dedup(tmp_path / "local", table, ray_available=False, index_shards=3)
    assert summary["dropped"] == 16 and len(kept_ids(out)) == 40
    assert actors_seen and all(a == [] for a in actors_seen)  # in-driver shards: no actors
    actors_seen.clear()
    run_dedup(tmp_path / "ray", table, ray_available=True, index_shards=3)
    assert actors_seen and all(len(a) == 3 for a in actors_seen)


@pytest.fixture
def table(reviews_zh, docs_en):
    texts = reviews_zh[:20] + docs_en[:20]
    langs = ["zh"] * 20 + ["en"] * 20
    dups = [t.replace("，", ",") for t in reviews_zh[:8]] + [t.upper() for t in docs_en[:8]]
    return make_table(texts + dups, langs + ["zh"] * 8 + ["en"] * 8)


def _audit(root):
    return sorted(
        tuple(r.values()) for r in pq.read_table(root / "dedup" / "clusters.parquet").to_pylist()
    )


def test_one_vs_four_actors_and_batch_sizes(ray_session, table, tmp_path):
    one = run_dedup(tmp_path / "a", table, batch=1000, ray_available=True, index_shards=1)
    four = run_dedup(tmp_path / "b", table, batch=9, ray_available=True, index_shards=4)
    local = run_dedup(tmp_path / "c", table, batch=5, ray_available=False, index_shards=2)
    assert kept_ids(one[1]) == kept_ids(four[1]) == kept_ids(local[1])
    assert len(kept_ids(one[1])) == 40 and one[0]["dropped"] == 16
    assert _audit(one[2]) == _audit(four[2]) == _audit(local[2])


def test_killed_index_actor_is_retried_or_fails_cleanly(ray_session, table, tmp_path, monkeypatch):
    expected = kept_ids(run_dedup(tmp_path / "ref", table, index_shards=3)[1])

    def kill_first_attempt(phase, attempt, actors):
        if phase == "signatures" and attempt == 1:
            ray_session.kill(actors[1], no_restart=True)

    monkeypatch.setattr(planner, "_fault_hook", kill_first_attempt)
    summary, out, _ = run_dedup(tmp_path / "retry", table, ray_available=True, index_shards=3)
    assert summary["attempts"] == 2 and kept_ids(out) == expected

    def kill_always(phase, attempt, actors):
        if phase == "indexed":
            ray_session.kill(actors[0], no_restart=True)

    monkeypatch.setattr(planner, "_fault_hook", kill_always)
    decisions = tmp_path / "fail"
    with pytest.raises(RuntimeError, match="index actor died in each of 2 attempts"):
        run_dedup(decisions, table, ray_available=True, index_shards=3)
    assert not list(decisions.rglob("*.parquet.tmp"))
    assert not list(decisions.rglob("decisions/*.parquet"))
