"""Run-directory bookkeeping: resume decisions, accounting identity, the manifest.

Layout of ``OUT/``: ``.dataforge-run`` (the run marker), ``.dataforge-lock``, ``plan.json``
(the task plan, written before any work), ``manifest.json`` (written last, atomically), ``mds/`` (or
``parquet/``, ``jsonl/``), ``rejects/``, ``<barrier op>/`` audit output, and ``_work/``
(committed parts and markers; removed after success unless ``output.keep_work``).
"""

from __future__ import annotations

import dataclasses
import platform
from collections import Counter
from importlib import metadata
from typing import Any

from dataforge.config import PipelineConfig
from dataforge.io import fs
from dataforge.io.readers import InputTask
from dataforge.rundir.lock import RunDirError
from dataforge.rundir.ownership import remove_owned_entries
from dataforge.rundir.store import RunStore
from dataforge.runtime.failures import RunFailed

__all__ = [
    "AccountingError",
    "RunDirError",
    "check_accounting",
    "check_inputs_unchanged",
    "decoding_warnings",
    "plan_changes",
    "prepare_run_dir",
    "stage_report",
    "sum_counts",
    "versions",
]

RUN_FILE = "run.json"
PLAN_FILE = "plan.json"


class AccountingError(RuntimeError):
    """The run's counts do not add up, or too many records failed."""


def _plan(tasks: list[InputTask]) -> list[dict[str, Any]]:
    return [dataclasses.asdict(t) for t in tasks]


def plan_changes(recorded: list[dict[str, Any]], tasks: list[InputTask]) -> list[str]:
    """What differs between a recorded task plan and the inputs found now, one line per
    file: added, removed, or changed (size, modification time)."""
    before = {(t["source"], t["path"]): t for t in recorded}
    now = {(t["source"], t["path"]): t for t in _plan(tasks)}
    changes = [f"added {p} (source {s})" for s, p in sorted(now.keys() - before.keys())]
    changes += [f"removed {p} (source {s})" for s, p in sorted(before.keys() - now.keys())]
    for key in sorted(now.keys() & before.keys()):
        diff = [
            f"{field} {before[key].get(field)} -> {now[key][field]}"
            for field in ("bytes", "mtime_ns")  # task ids follow from the set of files
            if before[key].get(field) != now[key][field]
        ]
        if diff:
            changes.append(f"changed {key[1]} ({', '.join(diff)})")
    return changes


def _previous_sha(store: RunStore) -> str | None:
    for rel in (f"_work/{RUN_FILE}", "manifest.json"):
        found = store.read_json(rel)
        if found is not None:
            return found.get("config_sha256")
    return None


def prepare_run_dir(
    store: RunStore, config_sha: str, tasks: list[InputTask], overwrite: bool
) -> str:
    """Decide what to do with claimed, locked run directory ``store``: ``"fresh"``,
    ``"resume"`` or ``"complete"``; a fresh run records its task plan before any work.

    A run of the same config over the same planned inputs is resumed (or reported
    complete). Another config, or inputs that differ from the recorded plan, are refused
    unless ``overwrite``, which removes only what dataforge wrote.

    Raises:
        RunDirError: another config or input set (and not ``overwrite``).
    """
    out = store.root
    previous = _previous_sha(store)
    plan = store.read_json(PLAN_FILE)
    recorded = plan["tasks"] if plan is not None else None
    if previous is not None and not overwrite:
        if previous != config_sha:
            raise RunDirError(
                f"{out} holds a run of a different config (sha256 {previous[:12]}..., this one "
                f"{config_sha[:12]}...); pass --overwrite to replace it or choose another -o"
            )
        changes = plan_changes(recorded or [], tasks)
        if changes:
            shown = "; ".join(changes[:5]) + (
                f"; and {len(changes) - 5} more" if len(changes) > 5 else ""
            )
            raise RunDirError(
                f"{out} holds a run over other inputs ({len(changes)} changed: {shown}); pass "
                "--overwrite to start over or choose another -o"
            )
        manifest = store.read_json("manifest.json")
        if manifest is not None and manifest.get("status") == "complete":
            return "complete"
        return "resume"
    remove_owned_entries(store)
    store.write_json(PLAN_FILE, {"tasks": _plan(tasks)})
    store.write_json(f"_work/{RUN_FILE}", {"config_sha256": config_sha})
    return "fresh"


def sum_counts(seg_stats: list[list[dict[str, Any]]]) -> dict[str, Any]:
    """Per-source counts over all segments: input from segment 0, drops from every
    segment, kept and repeated from the last one."""
    by_source: dict[str, dict[str, Any]] = {}
    last = len(seg_stats) - 1
    for k, stats_list in enumerate(seg_stats):
        for stats in stats_list:
            for src, c in stats["by_source"].items():
                acc = by_source.setdefault(
                    src,
                    {
                        "input": 0,
                        "kept": 0,
                        "repeated": 0,
                        "dropped": Counter(),
                        "events": Counter(),
                    },
                )
                if k == 0:
                    acc["input"] += c["input"]
                acc["dropped"].update(c["dropped"])
                if k == last:
                    acc["kept"] += c["kept"]
                    acc["repeated"] += c["repeated"]
            for src in stats["by_source"]:  # a task reads one source
                by_source[src]["events"].update(stats.get("events", {}))
    total = {"input": 0, "kept": 0, "repeated": 0, "dropped": Counter()}
    for acc in by_source.values():
        total["input"] += acc["input"]
        total["kept"] += acc["kept"]
        total["repeated"] += acc["repeated"]
        total["dropped"].update(acc["dropped"])
    plain = {
        src: {**acc, "dropped": dict(sorted(acc["dropped"].items())), "events": dict(acc["events"])}
        for src, acc in sorted(by_source.items())
    }
    return {
        "by_source": plain,
        "total": {**total, "dropped": dict(sorted(total["dropped"].items()))},
    }


def decoding_warnings(
    config: PipelineConfig, tasks: list[InputTask], decoding: dict[str, dict[str, Any] | None]
) -> list[str]:
    """One line per input file that was probably read in the wrong encoding: undecodable
    under ``encoding: auto``, or with more than a small share of records holding bytes its
    codec could not decode (see ``TaskReader.decoding_report``), with the setting to change."""
    index = {s.name: i for i, s in enumerate(config.inputs)}
    lines = []
    for task in tasks:
        report = decoding.get(task.task_id)
        if not report or not report["suspect"]:
            continue
        key = f"inputs[{index[task.source]}].encoding"
        if report["decided_by"] == "undecodable":
            lines.append(
                f"{task.path}: decodes under no candidate encoding; its {report['records']} "
                f"records were dropped as invalid_encoding (set {key} to the file's codec)"
            )
            continue
        if report.get("suspect_reason") == "cjk_double_byte":
            lines.append(
                f"{task.path}: its bytes are CJK double-byte text (GBK, Big5...) but were read "
                f"as {report['encoding']}: its {report['records']} records are probably "
                f"mojibake (set {key} to auto or its codec, e.g. gb18030, big5)"
            )
            continue
        lines.append(
            f"{task.path}: {report['invalid_records']} of {report['records']} records held bytes "
            f"invalid in {report['encoding']} (repaired with U+FFFD or dropped); the file is "
            f"probably in another encoding: set {key} to auto or its codec (e.g. gb18030, big5)"
        )
    return lines


def check_accounting(counts: dict[str, Any], records_in_output: int, max_error_rate: float) -> None:
    """The identity every run must satisfy.

    Raises:
        AccountingError: ``input != kept + sum(dropped)`` for a source, the output holds a
            different number of records than kept + repeated, or a source's ``error:*``
            drops exceed ``max_error_rate``.
    """
    problems = []
    for src, c in counts["by_source"].items():
        dropped = sum(c["dropped"].values())
        if c["input"] != c["kept"] + dropped:
            problems.append(
                f"source {src}: input {c['input']} != kept {c['kept']} + dropped {dropped}"
            )
        errors = sum(n for reason, n in c["dropped"].items() if reason.startswith("error:"))
        if c["input"] and errors / c["input"] > max_error_rate:
            detail = {r: n for r, n in c["dropped"].items() if r.startswith("error:")}
            problems.append(
                f"source {src}: {errors} of {c['input']} records failed ({detail}), above "
                f"max_error_rate {max_error_rate}"
            )
    expected = counts["total"]["kept"] + counts["total"]["repeated"]
    if records_in_output != expected:
        problems.append(
            f"output holds {records_in_output} records, expected kept+repeated {expected}"
        )
    if problems:
        raise AccountingError("; ".join(problems))


def versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for dist in (
        "dataforge",
        "ray",
        "mosaicml-streaming",
        "pyarrow",
        "numpy",
        "sentencepiece",
        "jieba",
        "rjieba",
        "kenlm",
        "datasketch",
        "torch",
    ):
        try:
            found[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return found


def check_inputs_unchanged(tasks: list[InputTask]) -> None:
    """An input rewritten while the run read it would mix two versions in one output."""
    for task in tasks:
        try:
            size, mtime_ns = fs.size_and_mtime(task.path)
        except OSError as exc:
            raise RunFailed(
                f"input {task.path} disappeared during the run ({exc.strerror or exc})"
            ) from None
        if (size, mtime_ns) != (task.bytes, task.mtime_ns):
            raise RunFailed(
                f"input {task.path} changed during the run (bytes {task.bytes} -> "
                f"{size}); rerun with --overwrite once the inputs are final"
            )


def stage_report(config, seg_stats, barrier_summaries) -> list[dict[str, Any]]:
    """Per stage of ``config``: its op, ``seconds`` spent in it inside the tasks (wall,
    summed over tasks, so actor-seconds), ``cpu_seconds`` of CPU those calls used (thread
    CPU time), and the barrier's summary (dedup clusters, sampling mixture)."""
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
