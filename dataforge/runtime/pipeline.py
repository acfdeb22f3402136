"""Driver-side orchestration, independent of where tasks run.

``run_pipeline`` plans tasks and segments, asks an *executor* to run each segment's pending
tasks (:mod:`dataforge.runtime.executors`: Ray actors or local worker processes), runs
barrier planners between segments, then commits the output (:mod:`dataforge.runtime.commit`):
parts moved into place, the accounting identity checked, the dataset index and finally
``manifest.json`` written.
"""

from __future__ import annotations

import dataclasses
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dataforge.config import PipelineConfig, config_sha256
from dataforge.io import fs
from dataforge.io.readers import InputTask, plan_input_tasks
from dataforge.io.splits import split_input_tasks
from dataforge.ops.barrier import WORK_NODES
from dataforge.rundir.lease import release_lock
from dataforge.rundir.lock import RunDirError
from dataforge.rundir.ownership import acquire_lock, claim_run_dir, describe_takeover
from dataforge.rundir.store import RunStore
from dataforge.runtime.barrier_task import plan_barrier
from dataforge.runtime.commit import RunState, commit_output
from dataforge.runtime.failures import (
    RunFailed,
    clear_task_failure,
    collect_task_failures,
    driver_failure_message,
)
from dataforge.runtime.manifest import (
    AccountingError,
    check_inputs_unchanged,
    prepare_run_dir,
)
from dataforge.runtime.progress import RunProgress
from dataforge.runtime.segments import Segment, build_segments
from dataforge.runtime.split_ids import settle_split_ids
from dataforge.runtime.validate import output_overlaps_inputs

if TYPE_CHECKING:
    from dataforge.runtime.executors.base import Executor

__all__ = ["log_line", "run_pipeline"]


def log_line(msg: str) -> None:
    """The default ``log``: ``[dataforge] msg`` on stderr."""
    print(f"[dataforge] {msg}", file=sys.stderr, flush=True)


def run_pipeline(
    config: PipelineConfig,
    out: str | Path,
    executor: Executor | Callable[[], Executor],
    *,
    overwrite: bool = False,
    log: Callable[[str], None] = log_line,
    progress: RunProgress | None = None,
) -> dict[str, Any]:
    """Run (or resume) ``config`` into ``out`` (a local path or a URI). Returns the manifest.

    ``executor`` may be a factory, called only once the run directory is claimed, locked
    and found to need work (so a refused run never starts Ray).

    Raises:
        RunDirError: ``out`` overlaps an input, is not a run directory, holds another
            config's run or another input set (and not ``overwrite``), or is locked by
            another live run (:class:`RunLockedError`).
        LeaseHeldError: another live writer holds ``out`` (object storage).
        StorageError: ``out`` or an input cannot be reached (before any work starts).
        AccountingError: counts do not add up or too many records failed (the manifest is
            written with ``status: failed`` and no dataset index).
        RunFailed: a task or the driver failed; one or two lines, the trace in ``OUT/logs/``.
    """
    progress = progress or RunProgress.silent()
    fs.configure(config.storage)
    store = RunStore(out)
    fs.check_location(store.root)
    sha = config_sha256(config)
    input_tasks = split_input_tasks(
        plan_input_tasks(config), config.inputs, config.read.split_bytes
    )
    if store.local:
        problems = output_overlaps_inputs(Path(store.root), config, input_tasks)
        if problems:
            raise RunDirError(problems[0])
    claim_run_dir(store)
    lock = acquire_lock(store)
    try:
        if takeover := describe_takeover(lock):
            log(takeover)
        state = prepare_run_dir(store, sha, input_tasks, overwrite)
        if state == "complete":
            log(f"{store.root} already holds the complete output of this config; nothing to do")
            return store.read_json("manifest.json")
        log(
            f"{'resuming' if state == 'resume' else 'starting'} run {config.name!r} into {store.root}"
        )
        verify = getattr(lock, "verify", lambda: None)  # a lease can be lost; a flock cannot
        store.guard_writes(verify)
        run = RunState(config, store, sha, time.time(), log, input_tasks, build_segments(config),
                       verify)  # fmt: skip
        progress.start({t.task_id: t.bytes if t.length is None else t.length for t in input_tasks})
        try:
            if not hasattr(executor, "run_segment"):
                executor = executor()  # starts or joins Ray: its failure is reported alike
            executor.check_paths(
                config, Path(store.root) / "_work" if store.local else None, input_tasks
            )
            manifest = _execute(run, executor, progress)
            progress.finish(manifest)
            return manifest
        except (AccountingError, RunFailed):
            raise
        except Exception as exc:  # noqa: BLE001 - reported in one line, the trace kept in logs/
            raise RunFailed(driver_failure_message(local_root(store), exc)) from exc
        finally:
            progress.close()
    finally:
        store.guard_writes(None)
        release_lock(lock, log)


def local_root(store: RunStore) -> Path:
    """Where local-only records of a run go (task failure records, traces in ``logs/``):
    OUT itself, or for a run on object storage a directory on this node."""
    if store.local:
        return Path(store.root)
    return Path(tempfile.gettempdir()) / "dataforge-remote-runs"


def _execute(run: RunState, executor: Executor, progress: RunProgress) -> dict[str, Any]:
    for segment in run.segments:
        run.verify()
        if segment.barrier_in is not None:
            stage_index, stage = segment.barrier_in
            t0 = time.time()
            progress.barrier_started(stage_index, stage.op)
            run.barrier_summaries[stage_index] = _run_barrier(
                run.config, run.store, segment.index - 1, stage_index, stage,
                run.seg_stats[-1], executor,
            )  # fmt: skip
            progress.barrier_finished()
            run.timings[f"barrier{stage_index}:{stage.op}"] = round(time.time() - t0, 3)
        _run_segment(run, segment, executor, progress)
    check_inputs_unchanged(run.input_tasks)
    run.verify()
    run.runtime = executor.placement.summary()
    return commit_output(run)


def _run_segment(run: RunState, segment: Segment, executor: Executor, progress: RunProgress):
    """The segment's pending tasks; a failed task is reported in one line (RunFailed)."""
    config, store = run.config, run.store
    tasks = _segment_tasks(segment, run.input_tasks, store)
    done = set(store.names(f"_work/seg{segment.index}"))
    pending = [t for t in tasks if f"{t['task_id']}.done" not in done]
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
        _clear_task_failures(store, segment.index, pending)
        try:
            executor.run_segment(
                config, segment, store.location("_work"), pending, progress.task_committed
            )
        except Exception as exc:
            failures = _task_failures(store, segment.index, pending)
            if not failures:
                raise
            more = f" (and {len(failures) - 1} more failed tasks)" if len(failures) > 1 else ""
            trace = failures[0]["trace"]
            raise RunFailed(
                failures[0]["message"] + more + (f"\nfull trace: {trace}" if trace else "")
            ) from exc
    if segment.index == 0 and store.local:  # (object storage: not yet)
        run.input_tasks = settle_split_ids(
            Path(store.root) / "_work" / "seg0",
            run.input_tasks,
            config,
            lambda redo: executor.run_segment(
                config,
                segment,
                store.location("_work"),
                _segment_tasks(segment, redo, store),
                lambda stats: None,
            ),
        )
    progress.segment_finished()
    run.timings[f"segment{segment.index}"] = round(time.time() - t0, 3)
    run.seg_stats.append([_read_marker(store, segment.index, t["task_id"]) for t in tasks])


def _clear_task_failures(store: RunStore, seg: int, pending: list[dict[str, Any]]) -> None:
    """A failure record of an earlier attempt says nothing now (records are local files;
    on object storage none reach the driver)."""
    if store.local:
        seg_dir = Path(store.location(f"_work/seg{seg}"))
        for task in pending:
            clear_task_failure(seg_dir, task["task_id"])


def _task_failures(store: RunStore, seg: int, pending: list[dict[str, Any]]) -> list[dict]:
    """Failure records of local runs; on object storage a task's message travels in its
    exception (read by :func:`driver_failure_message`)."""
    if not store.local:
        return []
    seg_dir = Path(store.location(f"_work/seg{seg}"))
    return collect_task_failures(seg_dir, [t["task_id"] for t in pending])


def _segment_tasks(
    segment: Segment, input_tasks: list[InputTask], store: RunStore
) -> list[dict[str, Any]]:
    tasks = []
    for task in input_tasks:
        spec: dict[str, Any] = {"task_id": task.task_id, "source": task.source}
        if segment.index == 0:
            spec["input"] = dataclasses.asdict(task)
        else:
            spec["previous"] = store.location(
                f"_work/seg{segment.index - 1}/{task.task_id}/live.parquet"
            )
            if segment.barrier_in is not None:
                spec["decision"] = store.location(
                    f"_work/barrier{segment.barrier_in[0]}/{task.task_id}.parquet"
                )
        tasks.append(spec)
    return tasks


def _read_marker(store: RunStore, seg: int, task_id: str) -> dict[str, Any]:
    stats = store.read_json(f"_work/seg{seg}/{task_id}.done")
    if stats is None:
        raise RuntimeError(f"task {task_id} of segment {seg} did not commit (see the errors above)")
    return stats


def _run_barrier(config, store, prev_seg, stage_index, stage, prev_stats, executor) -> dict:
    """The barrier's summary: from its marker, else planned on one of the executor's
    workers (:mod:`dataforge.runtime.barrier_task`), then the marker written here."""
    marker = f"_work/barrier{stage_index}.done"
    summary = store.read_json(marker)
    if summary is not None:
        return summary
    summary = executor.run_call(
        config, store.location("_work"), plan_barrier,
        config, store, prev_seg, stage_index, stage, prev_stats,
        executor.num_cpus, executor.ray_available, executor.memory_budget(config).bytes,
    )  # fmt: skip
    executor.placement.barrier_ran(summary.pop(WORK_NODES, []))
    store.write_json(marker, summary)
    return summary
