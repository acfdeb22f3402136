"""The end of a run: committed parts moved into place, the accounting identity checked,
the dataset index and, last, ``manifest.json`` written (through the run store, so the same
on local disk and object storage)."""

from __future__ import annotations

import dataclasses
import io
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from dataforge.config import PipelineConfig, to_plain
from dataforge.io.readers import InputTask
from dataforge.io.sinks import merge_mds_indexes
from dataforge.rundir.store import RunStore
from dataforge.runtime.histograms import merge_distributions
from dataforge.runtime.manifest import (
    AccountingError,
    check_accounting,
    decoding_warnings,
    stage_report,
    sum_counts,
    versions,
)
from dataforge.runtime.segments import Segment

__all__ = ["RunState", "commit_output"]


@dataclasses.dataclass
class RunState:
    """What the driver knows about a run while it goes and when it commits."""

    config: PipelineConfig
    store: RunStore
    sha: str
    started: float
    log: Callable[[str], None]
    input_tasks: list[InputTask]
    segments: list[Segment]
    verify: Callable[[], None]
    timings: dict[str, float] = dataclasses.field(default_factory=dict)
    barrier_summaries: dict[int, dict[str, Any]] = dataclasses.field(default_factory=dict)
    seg_stats: list[list[dict[str, Any]]] = dataclasses.field(default_factory=list)
    runtime: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Where the tasks ran (:meth:`dataforge.runtime.placement.Placement.summary`)."""


def _move_parts(config, store: RunStore, final_seg: int, task_ids: list[str]) -> list[str]:
    """Move committed sink parts from ``_work`` to ``OUT/<format>/[<source>/]<task>``
    (idempotent, so a kill in the middle is resumed). Returns the part dirs in task order."""
    fmt = config.output.format
    sources = [s.name for s in config.inputs]
    moved = []
    for task_id in task_ids:
        src = f"_work/seg{final_seg}/{task_id}/out"
        pairs = (
            [(f"{src}/{s}", f"{fmt}/{s}/{task_id}") for s in sources]
            if config.output.split_by_source
            else [(src, f"{fmt}/{task_id}")]
        )
        for part_src, dest in pairs:
            store.move_dir(part_src, dest)
            if store.exists(dest):
                moved.append(dest)
    return moved


def _count_output(config, store: RunStore, parts: list[str]) -> int:
    fmt = config.output.format
    total = 0
    for d in parts:
        if fmt == "mds" and (index := store.read_json(f"{d}/index.json")) is not None:
            total += sum(s["samples"] for s in index["shards"])
        elif fmt == "parquet" and store.exists(f"{d}/data.parquet"):
            with store.open_file(f"{d}/data.parquet") as f:
                total += pq.ParquetFile(f).metadata.num_rows
        elif fmt == "jsonl" and store.exists(f"{d}/data.jsonl"):
            with store.open_file(f"{d}/data.jsonl") as f:
                total += sum(1 for _ in f)
    return total


def _check_unique_ids(store: RunStore, final_seg: int, task_ids: list[str]) -> None:
    hashes = [
        np.load(io.BytesIO(store.read_bytes(p)))
        for t in task_ids
        if store.exists(p := f"_work/seg{final_seg}/{t}/idhash.npy")
    ]
    if not hashes:
        return
    allh = np.sort(np.concatenate(hashes))
    dup = int(np.sum(allh[1:] == allh[:-1]))
    if dup:
        raise AccountingError(
            f"{dup} output records share an id with another record of a different input file; ids "
            "must be unique within a source (drop id_key to derive ids from file and line)"
        )


def commit_output(run: RunState) -> dict[str, Any]:
    config, store, log = run.config, run.store, run.log
    input_tasks, segments, seg_stats = run.input_tasks, run.segments, run.seg_stats
    barrier_summaries, timings, sha, started = (
        run.barrier_summaries, run.timings, run.sha, run.started)  # fmt: skip
    final_seg = segments[-1].index
    task_ids = [t.task_id for t in input_tasks]
    counts = sum_counts(seg_stats)
    decoding = {stats["task_id"]: stats.get("decoding") for stats in seg_stats[0]}
    warnings = decoding_warnings(config, input_tasks, decoding)
    manifest: dict[str, Any] = {
        "name": config.name,
        "status": "failed",
        "config": to_plain(config),
        "config_sha256": sha,
        "versions": versions(),
        "inputs": [
            {"source": t.source, "path": t.path, "bytes": t.bytes, "task_id": t.task_id}
            | ({"decoding": decoding[t.task_id]} if decoding.get(t.task_id) else {})
            for t in input_tasks
        ],
        "counts": counts,
        "warnings": warnings,
        "stages": stage_report(config, seg_stats, barrier_summaries),
        "timings": timings,
        "runtime": run.runtime,
        "distributions": merge_distributions(
            [s.get("distributions", {}) for stats in seg_stats for s in stats]
        ),
    }
    sources = [s.name for s in config.inputs]
    for warning in warnings:  # before the checks: a wrong encoding often fails the run
        log(f"warning: {warning}")
    try:
        _check_unique_ids(store, final_seg, task_ids)
        parts = _move_parts(config, store, final_seg, task_ids)
        written = _count_output(config, store, parts)
        check_accounting(counts, written, config.max_error_rate)
    except AccountingError as exc:
        manifest["error"] = str(exc)
        store.write_json("manifest.json", manifest)
        raise
    output_info: dict[str, Any] = {
        "format": config.output.format,
        "path": config.output.format,
        "records": written,
    }
    if config.output.format == "mds":
        root = "mds"
        if config.output.split_by_source:
            from dataforge.ops.sample import stream_proportions

            # Stream proportions count samples, so they come from written records per source
            # (repeats included), which is what streaming.Stream(proportion=...) weighs.
            share = {
                e["source"]: e["proportion"]
                for e in stream_proportions(
                    {
                        "sources": {
                            s: {"output_docs": c["kept"] + c["repeated"]}
                            for s, c in counts["by_source"].items()
                        }
                    }
                )
            }
            streams = []
            for src in sources:
                src_parts = [p for p in parts if p.split("/")[-2] == src]
                if src_parts:
                    merge_mds_indexes(store, f"{root}/{src}", src_parts)
                    streams.append({"source": src, "path": f"mds/{src}", "proportion": share[src]})
            output_info["streams"] = streams
        index = merge_mds_indexes(store, root, parts)
        output_info["shards"] = len(index["shards"])
    if config.output.rejects:
        _collect_rejects(store, len(segments), task_ids)
    manifest["output"] = output_info
    manifest["status"] = "complete"
    manifest["timings"]["total"] = round(time.time() - started, 3)
    run.verify()
    store.write_json("manifest.json", manifest)
    if not config.output.keep_work:
        store.remove("_work")  # ours: _work of the run dir this run claimed (.dataforge-run)
    log(
        f"done: {counts['total']['kept']} of {counts['total']['input']} records kept "
        f"(+{counts['total']['repeated']} repeated) -> {store.root}"
    )
    return manifest


def _collect_rejects(store: RunStore, n_segments: int, task_ids: list[str]) -> None:
    for k in range(n_segments):
        for task_id in task_ids:
            src = f"_work/seg{k}/{task_id}/dropped.parquet"
            if store.exists(src):
                store.copy_file(src, f"rejects/seg{k}-{task_id}.parquet")
