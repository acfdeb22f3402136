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
from dataforge.ops.sample import stream_proportions
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

__all__ = ["RunState", "commit_output", "dataset_dir"]


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


def commit_output(run: RunState) -> dict[str, Any]:
    """Finish a run whose segments all committed; returns its manifest.

    In order, each step safe to repeat after a kill: the decoding warnings logged; ids
    checked unique, the committed parts moved into ``OUT/<format>/``, the records written
    counted and the accounting identity checked (on failure ``manifest.json`` is written
    with ``status: failed`` and the error raised); the dataset index merged; rejects
    collected; ``manifest.json`` written last; ``_work`` removed.

    Raises:
        AccountingError: ids repeat across input files, or the counts do not add up.
    """
    config, store = run.config, run.store
    manifest = _draft_manifest(run)
    for warning in manifest["warnings"]:  # before the checks: a wrong encoding often fails
        run.log(f"warning: {warning}")
    final_seg = run.segments[-1].index
    task_ids = [t.task_id for t in run.input_tasks]
    try:
        _check_unique_ids(store, final_seg, task_ids)
        parts = _move_parts(config, store, final_seg, task_ids)
        written = _count_output(config, store, parts)
        check_accounting(manifest["counts"], written, config.max_error_rate)
    except AccountingError as exc:
        manifest["error"] = str(exc)
        store.write_json("manifest.json", manifest)
        raise
    output = {"format": config.output.format, "path": dataset_dir(config), "records": written}
    if config.output.format == "mds":
        output |= _merge_mds_index(config, store, parts, manifest["counts"]["by_source"])
    if config.output.rejects:
        _collect_rejects(store, len(run.segments), task_ids)
    manifest["output"] = output
    manifest["status"] = "complete"
    manifest["timings"]["total"] = round(time.time() - run.started, 3)
    run.verify()
    store.write_json("manifest.json", manifest)
    if not config.output.keep_work:
        store.remove("_work")  # ours: _work of the run dir this run claimed (.dataforge-run)
    total = manifest["counts"]["total"]
    run.log(
        f"done: {total['kept']} of {total['input']} records kept "
        f"(+{total['repeated']} repeated) -> {store.root}"
    )
    return manifest


def _draft_manifest(run: RunState) -> dict[str, Any]:
    """The manifest before the output is checked: ``status: failed`` and no ``output``
    until the commit completes."""
    config, input_tasks, seg_stats = run.config, run.input_tasks, run.seg_stats
    decoding = {stats["task_id"]: stats.get("decoding") for stats in seg_stats[0]}
    return {
        "name": config.name,
        "status": "failed",
        "config": to_plain(config),
        "config_sha256": run.sha,
        "versions": versions(),
        "inputs": [
            {"source": t.source, "path": t.path, "bytes": t.bytes, "task_id": t.task_id}
            | ({"decoding": decoding[t.task_id]} if decoding.get(t.task_id) else {})
            for t in input_tasks
        ],
        "counts": sum_counts(seg_stats),
        "warnings": decoding_warnings(config, input_tasks, decoding),
        "stages": stage_report(config, seg_stats, run.barrier_summaries),
        "timings": run.timings,
        "runtime": run.runtime,
        "distributions": merge_distributions(
            [s.get("distributions", {}) for stats in seg_stats for s in stats]
        ),
    }


def dataset_dir(config: PipelineConfig) -> str:
    """The folder of ``OUT`` that holds the dataset, named after its format (``mds``,
    ``parquet``, ``jsonl``): the manifest's ``output.path``."""
    return config.output.format


def _move_parts(
    config: PipelineConfig, store: RunStore, final_seg: int, task_ids: list[str]
) -> list[str]:
    """Move committed sink parts from ``_work`` to ``OUT/<format>/[<source>/]<task>``
    (idempotent, so a kill in the middle is resumed). Returns the part dirs in task order."""
    root = dataset_dir(config)
    sources = [s.name for s in config.inputs]
    moved = []
    for task_id in task_ids:
        src = f"_work/seg{final_seg}/{task_id}/out"
        pairs = (
            [(f"{src}/{s}", f"{root}/{s}/{task_id}") for s in sources]
            if config.output.split_by_source
            else [(src, f"{root}/{task_id}")]
        )
        for part_src, dest in pairs:
            store.move_dir(part_src, dest)
            if store.exists(dest):
                moved.append(dest)
    return moved


def _count_output(config: PipelineConfig, store: RunStore, parts: list[str]) -> int:
    """Records in the committed ``parts``, read from what was written."""
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


def _merge_mds_index(
    config: PipelineConfig, store: RunStore, parts: list[str], by_source: dict[str, Any]
) -> dict[str, Any]:
    """``OUT/mds/index.json`` over all ``parts`` and, with ``output.split_by_source``, one
    index per source; returns the manifest's ``output`` entries for them (``shards``,
    ``streams``)."""
    root = dataset_dir(config)
    entries: dict[str, Any] = {}
    if config.output.split_by_source:
        # A stream's proportion counts samples, repeats included: what
        # streaming.Stream(proportion=...) weighs.
        written = {s: c["kept"] + c["repeated"] for s, c in by_source.items()}
        share = {e["source"]: e["proportion"] for e in stream_proportions(written)}
        streams = []
        for source in (s.name for s in config.inputs):
            source_parts = [p for p in parts if p.split("/")[-2] == source]
            if source_parts:
                merge_mds_indexes(store, f"{root}/{source}", source_parts)
                streams.append(
                    {"source": source, "path": f"{root}/{source}", "proportion": share[source]}
                )
        entries["streams"] = streams
    entries["shards"] = len(merge_mds_indexes(store, root, parts)["shards"])
    return entries


def _collect_rejects(store: RunStore, n_segments: int, task_ids: list[str]) -> None:
    for k in range(n_segments):
        for task_id in task_ids:
            src = f"_work/seg{k}/{task_id}/dropped.parquet"
            if store.exists(src):
                store.copy_file(src, f"rejects/seg{k}-{task_id}.parquet")
