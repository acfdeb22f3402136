"""quality_classifier's keep_top within a memory budget: the per-source cut found by radix
selection over the parts is the in-memory sort's, so the decisions and summary are the
same bytes whatever the budget, ties and repeated keys included."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataforge.ops.barrier import BarrierContext
from dataforge.ops.barrier.rank_select import key_at_rank
from dataforge.ops.quality_classifier import SCORE, TIE, QualityClassifier
from dataforge.records import ORD


def _parts(tmp: Path, rows: int, seed: int, tasks: int) -> dict[str, Path]:
    rng = np.random.default_rng(seed)
    # few distinct scores and ties: many equal (score, tie) keys straddle every cut
    score = rng.choice([-1.5, -0.0, 0.0, 0.25, 0.25, 0.5, 0.9, 1.0, np.nan], rows)
    tie = rng.integers(0, 4, rows).astype(np.uint64) << np.uint64(rng.integers(0, 64))
    source = rng.choice(["a", "b", "c"], rows)
    parts = {}
    for t, idx in enumerate(np.array_split(np.arange(rows), tasks)):
        path = tmp / f"t{t:03d}.parquet"
        pq.write_table(
            pa.table({
                "source": source[idx].tolist(),
                "lang": ["zh"] * len(idx),
                ORD: np.arange(len(idx), dtype=np.int64),
                SCORE: score[idx],
                TIE: tie[idx],
            }),
            path,
        )  # fmt: skip
        parts[f"t{t:03d}"] = path
    return parts


def _plan(tmp: Path, parts: dict[str, Path], memory_bytes: int | None, keep_top: float):
    op = QualityClassifier.__new__(QualityClassifier)
    op.config = QualityClassifier.Config(model="unused.bin", keep_top=keep_top)
    out = tmp / f"plan-{memory_bytes}-{keep_top}"
    ctx = BarrierContext(
        parts=parts, decision_dir=out / "decisions", audit_dir=out / "audit", num_cpus=1,
        seed=0, source_stats={}, sources={},
        memory_bytes=memory_bytes, spill_dir=None if memory_bytes is None else out / "spill",
    )  # fmt: skip
    summary = op.plan(ctx)
    decisions = {
        p.name: pq.read_table(p).column(ORD).to_pylist()
        for p in sorted((out / "decisions").glob("*.parquet"))
    }
    return summary, decisions


@pytest.mark.parametrize("keep_top", [0.0001, 0.1, 0.5, 0.97, 1.0])
def test_budget_gives_the_in_memory_cut(tmp_path: Path, keep_top: float) -> None:
    parts = _parts(tmp_path, 3000, seed=1, tasks=7)
    reference = _plan(tmp_path, parts, None, keep_top)
    assert reference[0]["sources"]["a"]["scored_docs"] > 800
    for memory_bytes in (64, 16 * 4 * 50, 1 << 30):  # 1 key, 50 keys, everything held
        assert _plan(tmp_path, parts, memory_bytes, keep_top) == reference


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.floats(allow_nan=False, width=64, min_value=-1e300, max_value=1e300),
            st.integers(0, 2**64 - 1),
        ),
        min_size=1,
        max_size=40,
    ),
    st.integers(1, 5),
    st.data(),
)
def test_key_at_rank_is_the_sorted_key(keys, max_rows, data) -> None:
    score = np.array([s for s, _ in keys], np.float64) + 0.0
    tie = np.array([t for _, t in keys], np.uint64)
    rank = data.draw(st.integers(0, len(keys) - 1))
    at = np.lexsort((tie, score))[rank]
    halves = [
        (score[: len(keys) // 2], tie[: len(keys) // 2]),
        (score[len(keys) // 2 :], tie[len(keys) // 2 :]),
    ]
    assert key_at_rank(lambda: iter(halves), rank, max_rows) == (float(score[at]), int(tie[at]))
