"""Driver-side orchestration, independent of where tasks run.

``run_pipeline`` plans tasks and segments, asks an *executor* to run each segment's pending
tasks (Ray actor pools in :mod:`dataforge.runtime.ray_runner`, or in-process), runs barrier
planners between segments, then commits the output: parts moved into place, the accounting
identity checked, the dataset index and finally ``manifest.json`` written.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pyarrow.parquet as pq

from dataforge.config import PipelineConfig, config_sha256, to_plain
from dataforge.io.readers import InputTask, plan_input_tasks
from dataforge.io.sinks import merge_mds_indexes, write_json_atomic
from dataforge.io.splits import split_input_tasks
from dataforge.runtime.barriers import BarrierContext, run_planner
from dataforge.runtime.failures import (
    RunFailed,
    clear_task_failure,
    collect_task_failures,
    driver_failure_message,
)
from dataforge.runtime.histograms import merge_distributions
from dataforge.runtime.manifest import (
    AccountingError,
    check_accounting,
    check_inputs_unchanged,
    decoding_warnings,
    prepare_run_dir,
    sum_counts,
    versions,
)
from dataforge.runtime.ownership import (
    RunDirError,
    acquire_run_lock,
    claim_run_dir,
    describe_takeover,
    output_overlaps_inputs,
)
from dataforge.runtime.progress import RunProgress
from dataforge.runtime.segments import Segment, SegmentRunner, build_segments, make_op
from dataforge.runtime.split_ids import settle_split_ids

__all__ = ["Executor", "LocalExecutor", "run_pipeline"]


class Executor(Protocol):
    """Runs ``SegmentRunner(config, segment, work_dir).run_task(task)`` for many tasks and
    calls ``on_task(stats)`` as each one commits."""

    num_cpus: int

    def check_paths(self, config: PipelineConfig, work: Path, tasks: list[InputTask]) -> None:
        """Raise before any work if the workers cannot see the run's paths."""

    def run_segment(
        self,
        config: PipelineConfig,
        segment: Segment,
        work_dir: Path,
        tasks: list[dict[str, Any]],
        on_task: Callable[[dict[str, Any]], None],
    ) -> None: ...


class LocalExecutor:
    """Runs every task in this process, one after the other (tests, baselines)."""

    num_cpus = 1
    ray_available = False

    def check_paths(self, config, work, tasks) -> None:
        """Tasks run in this process, which sees what the driver sees."""

    def run_segment(self, config, segment, work_dir, tasks, on_task) -> None:
        runner = SegmentRunner(config, segment, str(work_dir))
        for task in tasks:
            on_task(runner.run_task(task))


def _log(msg: str) -> None:
    print(f"[dataforge] {msg}", file=sys.stderr, flush=True)


def run_pipeline(
    config: PipelineConfig,
    out: Path,
    executor: Executor | Callable[[], Executor],
    *,
    overwrite: bool = False,
    log: Callable[[str], None] = _log,
    progress: RunProgress | None = None,
) -> dict[str, Any]:
    """Run (or resume) ``config`` into ``out``. Returns the manifest.

    ``executor`` may be a factory, called only once the run directory is claimed, locked
    and found to need work (so a refused run never starts Ray).

    Raises:
        RunDirError: ``out`` overlaps an input, is not a run directory, holds another
            config's run or another input set (and not ``overwrite``), or is locked by
            another live run (:class:`RunLockedError`).
        AccountingError: counts do not add up or too many records failed (the manifest is
            written with ``status: failed`` and no dataset index).
        RunFailed: a task or the driver failed; one or two lines, the trace in ``OUT/logs/``.
    """
    progress = progress or RunProgress.silent()
    sha = config_sha256(config)
    out = Path(out)
    input_tasks = split_input_tasks(
        plan_input_tasks(config), config.inputs, config.read.split_bytes
    )
    problems = output_overlaps_inputs(out, config, input_tasks)
    if problems:
        raise RunDirError(problems[0])
    claim_run_dir(out)
    lock = acquire_run_lock(out)
    try:
        if takeover := describe_takeover(lock):
            log(takeover)
        state = prepare_run_dir(out, sha, input_tasks, overwrite)
        if state == "complete":
            log(f"{out} already holds the complete output of this config; nothing to do")
            return json.loads((out / "manifest.json").read_text())
        log(f"{'resuming' if state == 'resume' else 'starting'} run {config.name!r} into {out}")
        run = _Run(config, out, out / "_work", sha, time.time(), log, input_tasks,
                   build_segments(config))  # fmt: skip
        progress.start({t.task_id: t.bytes if t.length is None else t.length for t in input_tasks})
        try:
            if not hasattr(executor, "run_segment"):
                executor = executor()  # starts or joins Ray: its failure is reported alike
            executor.check_paths(config, out / "_work", input_tasks)
            manifest = _execute(run, executor, progress)
            progress.finish(manifest)
            return manifest
        except (AccountingError, RunFailed):
            raise
        except Exception as exc:  # noqa: BLE001 - reported in one line, the trace kept in logs/
            raise RunFailed(driver_failure_message(out, exc)) from exc
        finally:
            progress.close()
    finally:
        lock.release()


def _execute(run: _Run, executor: Executor, progress: RunProgress) -> dict[str, Any]:
    for segment in run.segments:
        if segment.barrier_in is not None:
            stage_index, stage = segment.barrier_in
            t0 = time.time()
            progress.barrier_started(stage_index, stage.op)
            run.barrier_summaries[stage_index] = _run_barrier(
                run.config, run.out, run.work, segment.index - 1, stage_index, stage,
                run.seg_stats[-1], executor,
            )  # fmt: skip
            progress.barrier_finished()
            run.timings[f"barrier{stage_index}:{stage.op}"] = round(time.time() - t0, 3)
        _run_segment(run, segment, executor, progress)
    check_inputs_unchanged(run.input_tasks)
    return _commit(run)


def _run_segment(run: _Run, segment: Segment, executor: Executor, progress: RunProgress) -> None:
    """The segment's pending tasks; a failed task is reported in one line (RunFailed)."""
    config, work = run.config, run.work
    tasks = _segment_tasks(segment, run.input_tasks, work)
    seg_dir = work / f"seg{segment.index}"
    pending = [t for t in tasks if not (seg_dir / f"{t['task_id']}.done").exists()]
    if len(pending) < len(tasks):  # progress shows the rest
        run.log(
            f"segment {segment.index}: {len(pending)} of {len(tasks)} tasks to run "
            f"({len(tasks) - len(pending)} already committed)"
        )
    t0 = time.time()
    progress.segment_started(
        segment.index, [s.op for _, s in segment.stages], [t["task_id"] for t in pending]
    )
    if pending:
        for t in pending:  # a failure record of an earlier attempt says nothing now
            clear_task_failure(seg_dir, t["task_id"])
        try:
            executor.run_segment(config, segment, work, pending, progress.task_committed)
        except Exception as exc:
            failures = collect_task_failures(seg_dir, [t["task_id"] for t in pending])
            if not failures:  # none recorded (a full disk): the exception's own message
                raise RunFailed(driver_failure_message(run.out, exc)) from exc
            more = f" (and {len(failures) - 1} more failed tasks)" if len(failures) > 1 else ""
            trace = failures[0]["trace"]
            raise RunFailed(
                failures[0]["message"] + more + (f"\nfull trace: {trace}" if trace else "")
            ) from exc
    if segment.index == 0:
        run.input_tasks = settle_split_ids(
            seg_dir,
            run.input_tasks,
            config,
            lambda redo: executor.run_segment(
                config, segment, work, _segment_tasks(segment, redo, work), lambda stats: None
            ),
        )
    progress.segment_finished()
    run.timings[f"segment{segment.index}"] = round(time.time() - t0, 3)
    run.seg_stats.append([_read_marker(work, segment.index, t["task_id"]) for t in tasks])


@dataclasses.dataclass
class _Run:
    """What the driver knows about a run while it goes and when it commits."""

    config: PipelineConfig
    out: Path
    work: Path
    sha: str
    started: float
    log: Callable[[str], None]
    input_tasks: list[InputTask]
    segments: list[Segment]
    timings: dict[str, float] = dataclasses.field(default_factory=dict)
    barrier_summaries: dict[int, dict[str, Any]] = dataclasses.field(default_factory=dict)
    seg_stats: list[list[dict[str, Any]]] = dataclasses.field(default_factory=list)


def _segment_tasks(
    segment: Segment, input_tasks: list[InputTask], work: Path
) -> list[dict[str, Any]]:
    tasks = []
    for task in input_tasks:
        spec: dict[str, Any] = {"task_id": task.task_id, "source": task.source}
        if segment.index == 0:
            spec["input"] = dataclasses.asdict(task)
        else:
            spec["previous"] = str(work / f"seg{segment.index - 1}" / task.task_id / "live.parquet")
            if segment.barrier_in is not None:
                spec["decision"] = str(
                    work / f"barrier{segment.barrier_in[0]}" / f"{task.task_id}.parquet"
                )
        tasks.append(spec)
    return tasks


def _read_marker(work: Path, seg: int, task_id: str) -> dict[str, Any]:
    marker = work / f"seg{seg}" / f"{task_id}.done"
    if not marker.exists():
        raise RuntimeError(f"task {task_id} of segment {seg} did not commit (see the errors above)")
    return json.loads(marker.read_text())


def _run_barrier(
    config, out, work, prev_seg, stage_index, stage, prev_stats, executor
) -> dict[str, Any]:
    marker = work / f"barrier{stage_index}.done"
    if marker.exists():
        return json.loads(marker.read_text())
    decision_dir = work / f"barrier{stage_index}"
    tmp = work / f".barrier{stage_index}.tmp"
    for d in (tmp, decision_dir):
        if d.exists():
            shutil.rmtree(d)
    tmp.mkdir(parents=True)
    audit_dir = out / stage.op
    if audit_dir.exists():
        shutil.rmtree(audit_dir)
    audit_dir.mkdir(parents=True)
    parts = {}
    for stats in prev_stats:
        live = work / f"seg{prev_seg}" / stats["task_id"] / "live.parquet"
        if live.exists():
            parts[stats["task_id"]] = live
    source_stats: dict[str, dict[str, int]] = {
        s.name: {"docs": 0, "chars": 0, "tokens": 0} for s in config.inputs
    }
    for stats in prev_stats:
        for src, c in stats["by_source"].items():
            for key in ("docs", "chars", "tokens"):
                source_stats[src][key] += c[key]
    ctx = BarrierContext(
        parts=dict(sorted(parts.items())),
        decision_dir=tmp,
        audit_dir=audit_dir,
        num_cpus=executor.num_cpus,
        seed=config.seed,
        source_stats=source_stats,
        sources={s.name: s.lang for s in config.inputs},
        ray_available=getattr(executor, "ray_available", False),
    )
    op = make_op(stage, config)
    op.setup()
    summary = run_planner(op, ctx)
    os.replace(tmp, decision_dir)
    write_json_atomic(marker, summary)
    return summary


def _move_parts(config, out: Path, work: Path, final_seg: int, task_ids: list[str]) -> list[Path]:
    """Move committed sink parts from ``_work`` to ``OUT/<format>/[<source>/]<task>``
    (idempotent, so a kill in the middle is resumed). Returns the part dirs in task order."""
    dest_root = out / config.output.format
    dest_root.mkdir(exist_ok=True)
    sources = [s.name for s in config.inputs]
    moved = []
    for task_id in task_ids:
        src = work / f"seg{final_seg}" / task_id / "out"
        pairs = (
            [(src / s, dest_root / s / task_id) for s in sources]
            if config.output.split_by_source
            else [(src, dest_root / task_id)]
        )
        for part_src, dest in pairs:
            if part_src.exists():
                if dest.exists():
                    shutil.rmtree(dest)
                dest.parent.mkdir(parents=True, exist_ok=True)
                os.replace(part_src, dest)
            if dest.exists():
                moved.append(dest)
    return moved


def _count_output(config, parts: list[Path]) -> int:
    fmt = config.output.format
    total = 0
    for d in parts:
        if fmt == "mds" and (d / "index.json").exists():
            total += sum(s["samples"] for s in json.loads((d / "index.json").read_text())["shards"])
        elif fmt == "parquet" and (d / "data.parquet").exists():
            total += pq.ParquetFile(d / "data.parquet").metadata.num_rows
        elif fmt == "jsonl" and (d / "data.jsonl").exists():
            with open(d / "data.jsonl", "rb") as f:
                total += sum(1 for _ in f)
    return total


def _check_unique_ids(work: Path, final_seg: int, task_ids: list[str]) -> None:
    hashes = [
        np.load(p) for t in task_ids if (p := work / f"seg{final_seg}" / t / "idhash.npy").exists()
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


def _commit(run: _Run) -> dict[str, Any]:
    config, out, work, log = run.config, run.out, run.work, run.log
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
        "stages": _stage_report(config, seg_stats, barrier_summaries),
        "timings": timings,
        "distributions": merge_distributions(
            [s.get("distributions", {}) for stats in seg_stats for s in stats]
        ),
    }
    sources = [s.name for s in config.inputs]
    for warning in warnings:  # before the checks: a wrong encoding often fails the run
        log(f"warning: {warning}")
    try:
        _check_unique_ids(work, final_seg, task_ids)
        parts = _move_parts(config, out, work, final_seg, task_ids)
        written = _count_output(config, parts)
        check_accounting(counts, written, config.max_error_rate)
    except AccountingError as exc:
        manifest["error"] = str(exc)
        write_json_atomic(out / "manifest.json", manifest)
        raise
    output_info: dict[str, Any] = {
        "format": config.output.format,
        "path": config.output.format,
        "records": written,
    }
    if config.output.format == "mds":
        root = out / "mds"
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
                src_parts = [p for p in parts if p.parent.name == src]
                if src_parts:
                    merge_mds_indexes(root / src, src_parts)
                    streams.append({"source": src, "path": f"mds/{src}", "proportion": share[src]})
            output_info["streams"] = streams
        index = merge_mds_indexes(root, parts)
        output_info["shards"] = len(index["shards"])
    if config.output.rejects:
        _collect_rejects(out, work, len(segments), task_ids)
    manifest["output"] = output_info
    manifest["status"] = "complete"
    manifest["timings"]["total"] = round(time.time() - started, 3)
    write_json_atomic(out / "manifest.json", manifest)
    if not config.output.keep_work:
        shutil.rmtree(work, ignore_errors=True)
    log(
        f"done: {counts['total']['kept']} of {counts['total']['input']} records kept "
        f"(+{counts['total']['repeated']} repeated) -> {out}"
    )
    return manifest


def _collect_rejects(out: Path, work: Path, n_segments: int, task_ids: list[str]) -> None:
    dest = out / "rejects"
    dest.mkdir(exist_ok=True)
    for k in range(n_segments):
        for task_id in task_ids:
            src = work / f"seg{k}" / task_id / "dropped.parquet"
            if src.exists():
                shutil.copyfile(src, dest / f"seg{k}-{task_id}.parquet")


def _stage_report(config, seg_stats, barrier_summaries) -> list[dict[str, Any]]:
    """Per stage: ``seconds`` spent in it inside the tasks (summed over tasks, so actor-
    seconds) and ``cpu_seconds`` of CPU those calls used."""
    sums: dict[str, dict[str, float]] = {"op_seconds": {}, "op_cpu_seconds": {}}
    for stats_list in seg_stats:
        for stats in stats_list:
            for field, into in sums.items():
                for key, value in stats.get(field, {}).items():
                    into[key] = into.get(key, 0.0) + value
    report = []
    for i, stage in enumerate(config.stages):
        entry: dict[str, Any] = {
            "op": stage.op,
            "seconds": round(sums["op_seconds"].get(str(i), 0.0), 3),
            "cpu_seconds": round(sums["op_cpu_seconds"].get(str(i), 0.0), 3),
        }
        if i in barrier_summaries:
            entry["summary"] = barrier_summaries[i]
        report.append(entry)
    return report
