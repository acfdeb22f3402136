"""Verification of the dedup planner by groups of connected candidates, one process each
(step 3 of :mod:`dataforge.runtime.barriers.dedup` when the driver may fork).

The shards' verification reads the candidate records' texts on the driver's threads and
scores pairs on the shards' threads: mostly Python and short numpy calls, so it keeps
about one core busy whatever the CPU count (1.8-2.0 s of the 3.3 s barrier on the 112 MB
peers corpus, on 2 CPUs as on 1). Here the screened candidate pairs are cut into their
connected components, the components are dealt to ``groups`` groups of about equal text,
and each group is verified by one process: the driver takes group 0, forked children of
it (:class:`dataforge.runtime.lane_processes.ForkedCall`) the others. Each reads the parts
in task order, turns only its own records into verification texts
(``Dedup.verification_texts``) and decides its pairs with the shards' own
:func:`dataforge.ops.dedup.index.decide_pairs`. Both records of a pair are in one
component, so no record is read by two groups, and a pair's decision depends on its two
records only: the decided pairs are the shards' exactly, whatever the group count.

A record's weight when dealing is its source's mean characters per record (the stats of
the segment before the barrier), so the few long English documents do not all land in
one group; the heaviest components are dealt first, each to the lightest group.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from dataforge.ops.dedup import Dedup
from dataforge.ops.dedup.index import decide_pairs
from dataforge.ops.dedup.verify import Texts
from dataforge.runtime.barriers import BarrierContext
from dataforge.runtime.barriers._dedup_keys import Keys
from dataforge.runtime.lane_processes import ForkedCall

__all__ = ["components", "deal", "verify_in_groups"]


def components(pairs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Connected components of the graph of ``pairs`` (``(k, 2)`` node keys).

    Returns:
        ``(nodes, root)``: the distinct nodes, sorted, and per node the index (into
        ``nodes``) of the smallest node of its component.
    """
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    nodes = np.unique(pairs)
    a, b = np.searchsorted(nodes, pairs[:, 0]), np.searchsorted(nodes, pairs[:, 1])
    parent = np.arange(len(nodes))
    while True:
        # Hook the larger root of every pair that spans two trees under the smaller one,
        # then point every node at its root; roots only decrease, so this ends.
        ra, rb = parent[a], parent[b]
        apart = ra != rb
        if not apart.any():
            return nodes, parent
        np.minimum.at(parent, np.maximum(ra, rb)[apart], np.minimum(ra, rb)[apart])
        while not np.array_equal(up := parent[parent], parent):
            parent = up


def deal(
    pairs: np.ndarray, weight_of: Callable[[np.ndarray], np.ndarray], groups: int
) -> list[np.ndarray]:
    """Indices of ``pairs`` per group: whole components, heaviest first, each to the
    lightest group so far (``weight_of(nodes)``: the weight of each of the sorted nodes)."""
    nodes, root = components(pairs)
    weight = weight_of(nodes)
    _, component = np.unique(root, return_inverse=True)
    heft = np.bincount(component, weights=weight, minlength=component.max(initial=-1) + 1)
    loads = [0.0] * groups
    group_of = np.zeros(len(heft), dtype=np.int64)
    for c in np.argsort(-heft, kind="stable").tolist():
        g = loads.index(min(loads))
        group_of[c] = g
        loads[g] += heft[c]
    of_pair = group_of[component[np.searchsorted(nodes, pairs[:, 0])]] if len(pairs) else []
    return [np.flatnonzero(np.asarray(of_pair) == g) for g in range(groups)]


def record_weights(nodes: np.ndarray, keys: Keys, source_stats: dict) -> np.ndarray:
    """Per node: 1 + the mean characters per record of its source (1 when unknown)."""
    names = [name for name, s in source_stats.items() if s.get("docs")]
    means = [source_stats[name]["chars"] / source_stats[name]["docs"] for name in names]
    at = pc.index_in(keys.sources.take(pa.array(nodes)), value_set=pa.array(names, pa.string()))
    return 1.0 + np.asarray([*means, 0.0])[pc.fill_null(at, len(names)).to_numpy()]


def verify_group(
    op: Dedup, parts: dict, per_task: dict[str, np.ndarray], tasks: list[str], pairs: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The duplicates among ``pairs`` (``(pairs, similarity)`` of those kept): the texts
    of their records read from the parts in task order, no other record's."""
    needed = np.unique(pairs)
    nodes, texts = [np.zeros(0, np.int64)], []
    for task in tasks:
        task_keys = per_task[task]
        rows = np.flatnonzero(np.isin(task_keys, needed))
        if len(rows):
            table = pq.read_table(parts[task], columns=["text", "lang"]).take(pa.array(rows))
            texts.append(op.verification_texts(table.column("text"), table.column("lang")))
            nodes.append(task_keys[rows])
    pool_nodes = np.concatenate(nodes)
    pool = (pool_nodes, np.argsort(pool_nodes), None, Texts.concat(texts))
    return decide_pairs(pairs, pool, pool, op.method)


def verify_in_groups(
    op: Dedup,
    ctx: BarrierContext,
    tasks: list[str],
    keys: Keys,
    pairs: np.ndarray,
    groups: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Decide the candidate ``pairs`` (u < v, no record of an ``against`` run) in
    ``groups`` processes; returns ``(pairs, similarity)`` of the duplicates."""
    dealt = deal(pairs, lambda nodes: record_weights(nodes, keys, ctx.source_stats), groups)
    children: list[ForkedCall] = []
    try:
        for g, sel in enumerate(dealt[1:], start=1):
            if len(sel):
                name = f"dataforge-dedup-group-{g}"
                args = (op, ctx.parts, keys.per_task, tasks, pairs[sel])
                children.append(ForkedCall(name, verify_group, *args))
        decided = [verify_group(op, ctx.parts, keys.per_task, tasks, pairs[dealt[0]])]
        decided += [child.result() for child in children]
    finally:
        for child in children:
            child.kill()
    return np.concatenate([d[0] for d in decided]), np.concatenate([d[1] for d in decided])
