"""Segments: the plan cut at barrier stages, and the per-task work of one segment.

A pipeline ``read -> ops... -> [barrier] -> ops... -> write`` becomes segments separated
by barriers. Every segment processes the same task ids (one per input file); task ``t`` of
segment ``k`` reads the live rows task ``t`` of segment ``k-1`` committed, applies the
barrier's decision for ``t``, runs the segment's ops, and commits a part:

    _work/seg<k>/<t>/         live.parquet (intermediate) or out/ (final sink part),
                              dropped.parquet, stats.json
    _work/seg<k>/<t>.done     completion marker (the stats), written after the rename

This module imports no ray: the runtime decides where :class:`SegmentRunner` runs (Ray
actors or local worker processes in ``dataforge run``, in-process in tests and baselines).
"""

from __future__ import annotations

import dataclasses
import tempfile
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import xxhash

from dataforge.config import PipelineConfig, StageConfig
from dataforge.io import fs
from dataforge.io.readers import InputTask, TaskReader
from dataforge.io.sinks import PartWriter, write_json_atomic
from dataforge.ops.base import BarrierOp, Op, OpContext, op_class
from dataforge.records import DROP
from dataforge.rundir.store import RunStore
from dataforge.runtime.failures import RunFailed, clear_task_failure, record_task_failure
from dataforge.runtime.histograms import Distributions
from dataforge.runtime.split_ids import is_split_with_ids, write_split_ids

__all__ = [
    "Segment",
    "SegmentRunner",
    "TaskCancelled",
    "build_segments",
    "make_op",
    "op_context",
]


class TaskCancelled(BaseException):
    """A task stopped at a batch boundary because its runner's ``cancel`` event was set
    (the run is stopping). Not an ``Exception``: it is no failure of the task, so it is
    neither recorded nor retried; the task's staging directory is removed on the way out."""


COPY = "_copy"


@dataclasses.dataclass(frozen=True)
class Segment:
    """Stages between two barriers.

    Attributes:
        index: segment number (0 reads the inputs).
        stages: (stage index, config) of the per-batch ops.
        barrier_in: the barrier whose decision this segment applies first.
        barrier_out: the barrier whose ``prepare`` runs at the end of this segment.
        final: whether this segment writes the output sink.
    """

    index: int
    stages: tuple[tuple[int, StageConfig], ...]
    barrier_in: tuple[int, StageConfig] | None
    barrier_out: tuple[int, StageConfig] | None
    final: bool


def build_segments(config: PipelineConfig) -> list[Segment]:
    """Cut the stage list at barrier ops."""
    segments: list[Segment] = []
    current: list[tuple[int, StageConfig]] = []
    barrier_in = None
    for i, stage in enumerate(config.stages):
        if issubclass(op_class(stage.op), BarrierOp):
            segments.append(Segment(len(segments), tuple(current), barrier_in, (i, stage), False))
            current, barrier_in = [], (i, stage)
        else:
            current.append((i, stage))
    segments.append(Segment(len(segments), tuple(current), barrier_in, None, True))
    return segments


def op_context(config: PipelineConfig, stage: StageConfig | None = None) -> OpContext:
    """What the op of ``stage`` may know: seed, sources and, after a ``lang_id`` stage,
    the languages its records can carry."""
    record_langs = None
    for earlier in config.stages:
        if earlier is stage:
            break
        if earlier.op == "lang_id":
            record_langs = tuple(earlier.params.keep) or ("*",)
    return OpContext(
        seed=config.seed,
        sources={s.name: s.lang for s in config.inputs},
        base_dir=config.base_dir,
        record_langs=record_langs if stage is not None else None,
    )


def make_op(stage: StageConfig, config: PipelineConfig) -> Op:
    return op_class(stage.op)(stage.params, op_context(config, stage))


def declared_encodings(config: PipelineConfig) -> dict[str, str]:
    """MDS encodings declared by all ops of the pipeline."""
    declared: dict[str, str] = {}
    for stage in config.stages:
        declared.update(make_op(stage, config).mds_encodings())
    return declared


def _clock() -> tuple[float, float]:
    """Wall and CPU time now. CPU time is the calling thread's (``thread_time``): the ops run
    in it, and the process clock would also count a Ray worker's own threads."""
    return time.perf_counter(), time.thread_time()


class SegmentRunner:
    """Runs one segment's work for one task at a time; holds the loaded ops."""

    def __init__(self, config: PipelineConfig, segment: Segment, work_dir: str) -> None:
        fs.configure(config.storage)
        self.config = config
        self.segment = segment
        self.store = RunStore(work_dir)
        self.seg = f"seg{segment.index}"
        self.ops = [(i, s, make_op(s, config)) for i, s in segment.stages]
        self.barrier_in = make_op(segment.barrier_in[1], config) if segment.barrier_in else None
        self.barrier_out = make_op(segment.barrier_out[1], config) if segment.barrier_out else None
        self.declared = declared_encodings(config) if segment.final else {}
        self._split_ids: set[str] | None = None  # what a split of a file with id_key accepted
        self._records_read = 0
        self.cancel: threading.Event | None = None  # set: the task in flight stops (local workers)
        for _, _, op in self.ops:
            op.setup()
        for op in (self.barrier_in, self.barrier_out):
            if op is not None:
                op.setup()

    def run_task(self, task: dict[str, Any]) -> dict[str, Any]:
        """Process one task and commit its part; returns the part's stats. Idempotent:
        a task whose marker exists is not redone (retries and resume)."""
        task_id = task["task_id"]
        marker = f"{self.seg}/{task_id}.done"
        stats = self.store.read_json(marker)
        if stats is not None:
            return stats
        seg_dir, logs = self._failure_dirs()
        clear_task_failure(seg_dir, task_id)
        self._records_read = 0
        try:
            with self.store.staging(f"{self.seg}/{task_id}") as tmp:
                stats = self._process(task, tmp)
                write_json_atomic(tmp / "stats.json", stats)
                self.store.commit_dir(tmp, f"{self.seg}/{task_id}")
            # The marker, written last, commits the part (object stores have no rename).
            self.store.write_json(marker, stats)
        except Exception as exc:
            message = record_task_failure(seg_dir, logs, task, exc, self._records_read)
            raise RunFailed(message) from exc
        return stats

    def _failure_dirs(self) -> tuple[Path, Path]:
        """Where a failed task's record and trace go: ``_work/seg<k>/`` and ``OUT/logs/``;
        for a run on object storage a local directory (the message travels to the driver
        in the exception)."""
        if self.store.local:
            seg_dir = Path(self.store.location(self.seg))
        else:  # the same node-local root as the driver's (runtime.pipeline.local_root)
            seg_dir = Path(tempfile.gettempdir()) / "dataforge-remote-runs" / "_work" / self.seg
        seg_dir.mkdir(parents=True, exist_ok=True)
        return seg_dir, seg_dir.parent.parent / "logs"

    # -- the work ----------------------------------------------------------------------
    def _input_batches(self, task: dict[str, Any], stats: dict[str, Any]):
        if self.segment.index == 0:
            source = next(s for s in self.config.inputs if s.name == task["source"])
            input_task = InputTask(**task["input"])
            reader = TaskReader(input_task, source, self.config.read)
            yield from reader.batches()
            stats["events"] = dict(reader.events)
            stats["decoding"] = reader.decoding_report()
            if is_split_with_ids(input_task, self.config):
                self._split_ids = reader.accepted_ids()
            return
        live = _read_parquet(task["previous"])
        if live is None or live.num_rows == 0:
            return
        if self.barrier_in is not None:
            decision_path = task.get("decision")
            decision = _read_parquet(decision_path) if decision_path else None
            started = _clock()
            live = self.barrier_in.apply(live, decision)
            self._time(stats, self.segment.barrier_in[0], started)
        size = self.config.read.batch_rows
        for offset in range(0, live.num_rows, size):
            yield live.slice(offset, size)

    def _time(self, stats: dict[str, Any], stage_index: int, started: tuple[float, float]) -> None:
        key = str(stage_index)
        wall, cpu = _clock()
        stats["op_seconds"][key] = stats["op_seconds"].get(key, 0.0) + wall - started[0]
        stats["op_cpu_seconds"][key] = stats["op_cpu_seconds"].get(key, 0.0) + cpu - started[1]

    def _process(self, task: dict[str, Any], tmp: Path) -> dict[str, Any]:
        stats: dict[str, Any] = {"task_id": task["task_id"], "events": {}}
        stats |= {"op_seconds": {}, "op_cpu_seconds": {}}  # wall; CPU of this thread
        self._split_ids = None
        counts: dict[str, dict[str, Any]] = defaultdict(
            lambda: {
                "input": 0,
                "kept": 0,
                "repeated": 0,
                "dropped": Counter(),
                "docs": 0,
                "chars": 0,
                "tokens": 0,
            }
        )
        sinks = _PartSinks(tmp, self.config, self.segment.final, self.declared)
        dists = Distributions()
        for _, _, op in self.ops:
            op.events.clear()
        started_all = _clock()
        for batch in self._input_batches(task, stats):
            if self.cancel is not None and self.cancel.is_set():
                raise TaskCancelled(task["task_id"])
            self._records_read += batch.num_rows
            if self.segment.index == 0:
                for src, n in Counter(batch.column("source").to_pylist()).items():
                    counts[src]["input"] += n
                dists.observe_input(batch)
            for stage_index, stage, op in self.ops:
                started = _clock()
                batch = _run_op_isolating_errors(op, batch, stage.batch_size)
                self._time(stats, stage_index, started)
                if op.observed_as is not None:
                    dists.observe_stage(op.observed_as, batch)
            mask = pc.is_null(batch.column(DROP))
            dropped = batch.filter(pc.invert(mask))
            live = batch.filter(mask)
            if self.barrier_out is not None and live.num_rows:
                started = _clock()
                live = self.barrier_out.prepare(live)
                self._time(stats, self.segment.barrier_out[0], started)
            _count(counts, live, dropped)
            if self.segment.final:
                dists.observe_output(live)
            sinks.write(live, dropped)
        for _, _, op in self.ops:
            _merge_events(stats, op)
        stats["rows_written"] = sinks.close()
        if self._split_ids is not None:
            write_split_ids(tmp, self._split_ids)
            self._split_ids = None
        stats["seconds"] = time.perf_counter() - started_all[0]
        stats["cpu_seconds"] = time.thread_time() - started_all[1]
        stats["distributions"] = dists.to_json()
        stats["by_source"] = {
            src: {**c, "dropped": dict(c["dropped"])} for src, c in sorted(counts.items())
        }
        return stats


def _read_parquet(location: str) -> pa.Table | None:
    """The table at ``location`` (a path or URI), or None if there is none."""
    if not fs.exists(location):
        return None
    with fs.open_input_file(location) as f:
        return pq.read_table(f)


def _merge_events(stats: dict[str, Any], op: Op) -> None:
    events = stats.setdefault("events", {})
    for key, n in op.events.items():
        events[key] = events.get(key, 0) + n


def _run_op_isolating_errors(op: Op, batch: pa.Table, batch_size: int | None) -> pa.Table:
    """Run ``op`` over ``batch`` (in slices of ``batch_size``); if it raises, rerun row by
    row so that only the offending records are dropped, with reason ``error:<op>``."""
    if batch_size and batch.num_rows > batch_size:
        return pa.concat_tables(
            [
                _run_op_isolating_errors(op, batch.slice(o, batch_size), None)
                for o in range(0, batch.num_rows, batch_size)
            ],
            promote_options="default",
        )
    events_before = Counter(op.events)
    try:
        return op(batch)
    except Exception:  # noqa: BLE001 - isolated and counted per record below
        # The rows are redone one by one below: forget what the failed call counted.
        op.events.clear()
        op.events.update(events_before)
        if batch.num_rows == 1:
            reason = f"error:{op.name}"
            return batch.set_column(
                batch.schema.get_field_index(DROP), DROP, pa.array([reason], pa.string())
            )
        rows = [
            _run_op_isolating_errors(op, batch.slice(i, 1), None) for i in range(batch.num_rows)
        ]
        return pa.concat_tables(rows, promote_options="default")


def _count(counts: dict[str, dict[str, Any]], live: pa.Table, dropped: pa.Table) -> None:
    if dropped.num_rows:
        for (src, reason), n in Counter(
            zip(dropped.column("source").to_pylist(), dropped.column(DROP).to_pylist(), strict=True)
        ).items():
            counts[src]["dropped"][reason] += n
    if not live.num_rows:
        return
    sources = live.column("source").to_numpy(zero_copy_only=False)
    copies = (
        live.column(COPY).fill_null(0).to_numpy()
        if COPY in live.column_names
        else np.zeros(live.num_rows, dtype=np.int64)
    )
    chars = pc.utf8_length(live.column("text")).to_numpy(zero_copy_only=False)
    tokens = (
        live.column("num_tokens").fill_null(0).to_numpy()
        if "num_tokens" in live.column_names
        else np.zeros(live.num_rows, dtype=np.int64)
    )
    for src in np.unique(sources):
        sel = sources == src
        c = counts[str(src)]
        c["kept"] += int(np.sum(sel & (copies == 0)))
        c["repeated"] += int(np.sum(sel & (copies > 0)))
        c["docs"] += int(np.sum(sel))
        c["chars"] += int(np.sum(chars[sel]))
        c["tokens"] += int(np.sum(tokens[sel]))


class _PartSinks:
    """Streams one task's live and dropped rows to their files in the part directory."""

    def __init__(self, part: Path, config: PipelineConfig, final: bool, declared: dict[str, str]):
        self.part = part
        self.config = config
        self.final = final
        self.declared = declared
        self.dropped_writer: pq.ParquetWriter | None = None
        self.live_writer: pq.ParquetWriter | None = None
        self.outputs: dict[str, PartWriter] = {}
        self.id_hashes: list[np.ndarray] = []
        self.rows = 0

    def write(self, live: pa.Table, dropped: pa.Table) -> None:
        if dropped.num_rows:
            audit = ["text", "meta"] if self.config.output.rejects else []  # meta: url, WARC ids
            cols = ["id", "source", DROP, "_ord", *audit]
            table = dropped.select(cols)
            if self.dropped_writer is None:
                self.dropped_writer = pq.ParquetWriter(self.part / "dropped.parquet", table.schema)
            self.dropped_writer.write_table(table.cast(self.dropped_writer.schema))
        if not live.num_rows:
            return
        self.rows += live.num_rows
        if not self.final:
            if self.live_writer is None:
                self.live_writer = pq.ParquetWriter(self.part / "live.parquet", live.schema)
            self.live_writer.write_table(live.cast(self.live_writer.schema))
            return
        ids = live.column("id").to_pylist()
        self.id_hashes.append(
            np.fromiter((xxhash.xxh64_intdigest(i) for i in ids), np.uint64, len(ids))
        )
        out = self.config.output
        if out.split_by_source:
            sources = live.column("source")
            groups = [
                (s, live.filter(pc.equal(sources, s))) for s in sorted(set(sources.to_pylist()))
            ]
        else:
            groups = [("", live)]
        for name, group in groups:
            if name not in self.outputs:
                self.outputs[name] = PartWriter(
                    self.part / "out" / name if name else self.part / "out",
                    out.format,
                    self.declared,
                    compression=out.compression,
                    size_limit=out.size_limit,
                    hashes=out.hashes,
                )
            self.outputs[name].write(group)

    def close(self) -> int:
        for writer in (self.dropped_writer, self.live_writer):
            if writer is not None:
                writer.close()
        for output in self.outputs.values():
            output.close()
        if self.id_hashes:
            np.save(self.part / "idhash.npy", np.concatenate(self.id_hashes))
        return self.rows
