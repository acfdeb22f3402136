"""The dedup planner within a tiny memory budget writes what it writes without one, byte for
byte: its record keys sorted in spilled runs and merged (10^5 identical documents
included), and through a whole run on both executors (index shards on Ray actors, or in
the planning worker) with ``ray.memory_per_worker`` at its minimum."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from dedup_testkit import HOW_NOT_WHAT, make_table, planner_files, run_dedup
from hypothesis import given, settings
from hypothesis import strategies as st

from dataforge.config import MIN_WORKER_MEMORY
from dataforge.io.mds import iter_samples
from dataforge.ops.barrier.external_sort import FAN_IN, ExternalSort
from dataforge.ops.dedup import KeepConfig

CLI = [sys.executable, "-m", "dataforge.cli"]
TINY = MIN_WORKER_MEMORY
"""The smallest budget a run may set: its key runs hold a few thousand records."""
COPIES = 100_000
PAGE = "404 Not Found: the requested URL was not found on this server"
METHODS = ["exact", "minhash", "simhash"]


def _words(count: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    syllables = np.array(["ka", "lo", "mi", "ne", "ru", "ta", "vo", "shi", "pe", "gu", "zo"])
    words = ["".join(rng.choice(syllables, 3)) + str(i) for i in range(3000)]
    return [" ".join(rng.choice(words, 16)) for _ in range(count)]


def _corpus(copies: int, distinct: int, seed: int = 3) -> pa.Table:
    """``copies`` identical pages, ``distinct`` texts and a near-duplicate of every third
    one, from two sources; ids in an order unrelated to the file's, so that keys (id order)
    and rows (file order) differ everywhere."""
    texts = _words(distinct, seed)
    near = [t + " appendix" for t in texts[::3]]
    all_texts = [PAGE] * copies + texts + near
    n = len(all_texts)
    rng = np.random.default_rng(seed)
    ids = [f"r{i:07d}" for i in rng.permutation(n)]
    sources = [("web", "books")[i % 2] for i in range(n)]
    order = rng.permutation(n)  # copies, texts and their near copies mixed over the parts
    table = make_table(all_texts, ["en"] * n, sources=sources, ids=ids)
    return table.take(pa.array(order))


@settings(max_examples=40, deadline=None)
@given(
    keys=st.lists(st.tuples(st.integers(0, 3), st.text("ab", max_size=3)), max_size=400),
    pieces=st.integers(1, 9),
    run_bytes=st.sampled_from([1, 200, 2000, None]),
)
def test_the_external_sort_gives_the_order_of_one_sort(tmp_path_factory, keys, pieces, run_bytes):
    """Any budget, any split of the input: the order one sort of everything gives (row
    numbers make rows unique); up to a few hundred runs, so merge passes too."""
    table = pa.table(
        {
            "k": pa.array([k for k, _ in keys], pa.int8()),
            "s": pa.array([s for _, s in keys], pa.string()),
            "row": pa.array(np.arange(len(keys), dtype=np.int64)),
        }
    )
    spill = tmp_path_factory.mktemp("spill")
    sorter = ExternalSort(["k", "s", "row"], run_bytes, spill if run_bytes else None)
    size = -(-len(keys) // pieces) or 1
    for start in range(0, len(keys), size):
        sorter.add(table.slice(start, size))
    merged = list(sorter.sorted_tables())
    expected = sorted(range(len(keys)), key=lambda i: (*keys[i], i))
    rows = [r for t in merged for r in t.column("row").to_pylist()]
    assert rows == expected
    assert list(spill.iterdir()) == []  # every run file removed once merged


def _both(tmp_path: Path, table: pa.Table, **kw) -> tuple[tuple, tuple]:
    free = run_dedup(tmp_path / "free", table, **kw)
    tiny = run_dedup(tmp_path / "tiny", table, memory_bytes=TINY, **kw)
    return free, tiny


def _assert_same(free: tuple, tiny: tuple) -> None:
    measured = HOW_NOT_WHAT
    assert {k: v for k, v in tiny[0].items() if k not in measured} == {
        k: v for k, v in free[0].items() if k not in measured
    }
    assert tiny[1].equals(free[1])
    assert planner_files(tiny[2]) == planner_files(free[2])


@pytest.mark.parametrize("method", METHODS)
def test_a_cluster_of_1e5_identical_documents_spills_and_gives_the_same_bytes(tmp_path, method):
    table = _corpus(COPIES, 600)
    keep = KeepConfig(prefer_source=("books",))
    free, tiny = _both(tmp_path, table, batch=20_000, method=method, keep=keep)
    _assert_same(free, tiny)
    spill = tiny[2].parent / "spill"
    # the keys went through disk: their files are there, the merged runs are not
    assert sorted(p.name for p in spill.iterdir()) == ["keys.npy", "names.arrow"]
    assert free[0]["key_runs"] == 0 and tiny[0]["key_runs"] > FAN_IN  # two merge passes
    assert free[0]["dropped"] >= COPIES - 1 and free[0]["clusters"] >= 1
    assert not (free[2].parent / "spill").exists()
    assert free[0]["star_ranges"] == 1 and free[0]["edge_runs"] == 0
    assert free[0]["pair_runs"] == 0 and free[0]["candidate_rounds"] == 1
    if method == "exact":  # each copy paired with the first: 10^5 pairs, on disk, by range
        assert tiny[0]["edge_runs"] >= 1 and tiny[0]["star_ranges"] > 1
        # 10^5 bucket entries and their pairs in sorted runs, made in rounds of keys
        assert tiny[0]["pair_runs"] > 1 and tiny[0]["candidate_rounds"] > 1


@pytest.mark.parametrize("method", METHODS)
def test_within_a_budget_that_fits_nothing_spills(tmp_path, method):
    table = _corpus(50, 300)
    free = run_dedup(tmp_path / "free", table, method=method)
    big = run_dedup(tmp_path / "big", table, method=method, memory_bytes=1 << 30)
    _assert_same(free, big)
    assert list((big[2].parent / "spill").iterdir()) == []


def test_against_a_previous_run_whose_ids_are_not_in_file_order(tmp_path):
    """The records of an ``against`` run are keyed by their place in id order, also when
    their table lists them otherwise: the audit names the very record a drop matched."""
    texts = _words(3000, 11)
    prev_ids = [f"p{i:05d}" for i in range(3000)][::-1]  # published in descending id order
    first = run_dedup(tmp_path / "first", make_table(texts, ["en"] * 3000, ids=prev_ids))
    new = make_table([texts[5], texts[2990], "x y z " * 9], ["en"] * 3, ids=["n0", "n1", "n2"])
    against = (str(first[2]),)
    free, tiny = _both(tmp_path, new, method="minhash", against=against)
    _assert_same(free, tiny)
    clusters = {r["id"]: r["cluster"] for r in _audit(free[2]) if r["id"].startswith("n")}
    assert clusters == {"n0": prev_ids[5], "n1": prev_ids[2990]}


def _audit(out: Path) -> list[dict]:
    import pyarrow.parquet as pq

    return pq.read_table(out / "dedup" / "clusters.parquet").to_pylist()


# -- whole runs ------------------------------------------------------------------------


def _pipeline(tmp_path: Path, method: str) -> Path:
    table = _corpus(20_000, 1500)  # 22000 records
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for part in range(4):
        rows = table.slice(part * 5500, 5500).select(["id", "text"]).to_pylist()
        with open(corpus / f"part-{part}.jsonl", "w", encoding="utf-8") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
    path = tmp_path / f"{method}.yaml"
    path.write_text(
        f"""
name: budget
inputs:
  - {{name: web, path: "corpus/part-[01].jsonl", lang: en, id_key: id}}
  - {{name: books, path: "corpus/part-[23].jsonl", lang: en, id_key: id}}
read: {{split_bytes: 200000}}
ray: {{num_cpus: 2}}
stages:
  - {{op: dedup, method: {method}, keep: {{prefer_source: [books]}}}}
output: {{path: out, format: mds, size_limit: 200000}}
""",
        encoding="utf-8",
    )
    return path


def _run(executor: str, pipeline: Path, out: Path, *options: str) -> dict:
    """``dataforge run`` in a process of its own: a forked local worker must not inherit
    the thread pools earlier tests started in this one."""
    args = ["run", str(pipeline), "-o", str(out), "--executor", executor, *options]
    proc = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((out / "manifest.json").read_text())


def _shards(out: Path) -> dict[str, bytes]:
    files = sorted(p for p in (out / "mds").rglob("*") if p.is_file())
    return {str(p.relative_to(out)): p.read_bytes() for p in files}


_RAY = [pytest.mark.ray]
_RUNS = [("local", m) for m in METHODS] + [
    pytest.param("ray", "exact", marks=_RAY),  # about 20 s each: Ray starts twice
    pytest.param("ray", "minhash", marks=[*_RAY, pytest.mark.slow]),
    pytest.param("ray", "simhash", marks=[*_RAY, pytest.mark.slow]),
]


@pytest.mark.parametrize(("executor", "method"), _RUNS)
def test_a_run_at_the_smallest_budget_writes_the_same_shards(tmp_path, executor, method):
    pipeline = _pipeline(tmp_path, method)
    free = _run(executor, pipeline, tmp_path / "free")
    tiny = _run(executor, pipeline, tmp_path / "tiny", "--set", f"ray.memory_per_worker={TINY}")
    assert _shards(tmp_path / "tiny") == _shards(tmp_path / "free")
    assert tiny["counts"] == free["counts"]
    assert free["counts"]["total"]["input"] == 22_000
    assert free["counts"]["total"]["kept"] <= 2001
    assert len(list(iter_samples(tmp_path / "tiny"))) == free["counts"]["total"]["kept"]
    # unconstrained: the keys sorted in memory; at 1 MiB: in runs spilled and merged
    (free_dedup,), (tiny_dedup,) = ([s["summary"] for s in m["stages"]] for m in (free, tiny))
    assert free_dedup["key_runs"] == 0 and tiny_dedup["key_runs"] > 1
    if method != "exact":  # the candidates' texts went in shares too
        assert free_dedup["verify_rounds"] == 1 and tiny_dedup["verify_rounds"] > 1
    else:  # ~20,000 copy pairs: clustered a range of them at a time
        assert free_dedup["star_ranges"] == 1 and tiny_dedup["star_ranges"] > 1


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.integers(0, 6), min_size=1, max_size=8),
    st.data(),
)
def test_ids_taken_chunk_by_chunk_are_a_plain_take(chunk_sizes, data) -> None:
    from dataforge.ops.dedup.keys import _take

    n = sum(chunk_sizes)
    values, start = [], 0
    for size in chunk_sizes:
        values.append(pa.array([f"id{i}" for i in range(start, start + size)], pa.string()))
        start += size
    chunked = pa.chunked_array(values, pa.string())
    keys = data.draw(st.lists(st.integers(0, max(0, n - 1)), max_size=30 if n else 0))
    taken = _take(chunked, np.array(keys, np.int64))
    assert taken.to_pylist() == [f"id{k}" for k in keys]
