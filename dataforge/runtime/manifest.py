"""Run-directory bookkeeping: resume decisions, accounting identity, the manifest.

Layout of ``OUT/``: ``manifest.json`` (written last, atomically), ``mds/`` (or
``parquet/``, ``jsonl/``), ``rejects/``, ``<barrier op>/`` audit output, and ``_work/``
(committed parts and markers; removed after success unless ``output.keep_work``).
"""

from __future__ import annotations

import platform
from collections import Counter
from importlib import metadata
from typing import Any

from dataforge.io.lease import LEASE_NAME
from dataforge.io.run_store import RunStore

__all__ = [
    "AccountingError",
    "RunDirError",
    "check_accounting",
    "prepare_run_dir",
    "sum_counts",
    "versions",
]

RUN_FILE = "run.json"


class RunDirError(ValueError):
    """OUT holds something this run must not touch (another config, a foreign dir)."""


class AccountingError(RuntimeError):
    """The run's counts do not add up, or too many records failed."""


def prepare_run_dir(store: RunStore, config_sha: str, overwrite: bool) -> str:
    """Decide what to do with ``OUT``: ``"fresh"``, ``"resume"`` or ``"complete"``.

    A directory from the same config is resumed (or reported complete); one from another
    config, or a non-empty directory that is not a dataforge run, is refused unless
    ``overwrite`` (and a foreign non-empty directory is refused even then).
    """
    work_run = f"_work/{RUN_FILE}"
    present = [n for n in store.names() if n != LEASE_NAME]
    if present:
        run = store.read_json(work_run)
        manifest = store.read_json("manifest.json")
        if run is not None:
            previous = run.get("config_sha256")
        elif manifest is not None:
            previous = manifest.get("config_sha256")
        else:
            raise RunDirError(
                f"{store.root} is not empty and is not a dataforge run directory; choose another -o"
            )
        if previous == config_sha and not overwrite:
            if manifest is not None and manifest.get("status") == "complete":
                return "complete"
            return "resume"
        if not overwrite:
            raise RunDirError(
                f"{store.root} holds a run of a different config (sha256 {str(previous)[:12]}..., "
                f"this one {config_sha[:12]}...); pass --overwrite to replace it or choose another -o"
            )
        for name in present:
            store.remove(name)
    store.write_json(work_run, {"config_sha256": config_sha})
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
            if k == 0:
                for src in stats["by_source"]:
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
