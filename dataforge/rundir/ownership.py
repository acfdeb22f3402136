"""Who may write a run directory, and what in it dataforge may remove.

A folder is a dataforge run only if it holds the run marker (``.dataforge-run``), written
when dataforge creates the run in an absent or empty folder. ``--overwrite`` removes only
the entries dataforge writes (:data:`OWNED_ENTRIES`), never a folder without the marker,
and the output may never be equal to, inside, or above an input (checked by ``validate``
and ``run`` before Ray starts).

One writer per run directory: a :class:`RunLock` held for the whole run, the ``flock`` of
:mod:`dataforge.rundir.lock` on local disks, a lease behind the same interface on object
storage (:func:`acquire_lock` picks; :class:`dataforge.rundir.lease.ObjectLease`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from dataforge.rundir.lease import acquire_object_lease
from dataforge.rundir.lock import (
    LOCK_FILE,
    RunDirError,
    RunLock,
    acquire_run_lock,
    describe_holder,
)
from dataforge.rundir.store import RunStore

__all__ = [
    "OWNED_ENTRIES",
    "RUN_MARKER",
    "acquire_lock",
    "claim_run_dir",
    "describe_takeover",
    "remove_owned_entries",
]

RUN_MARKER = ".dataforge-run"
MARKER_BODY = b'{"dataforge_run": 1}\n'
# Everything dataforge writes at the top of a run directory (the barrier ops add their audit
# folders, named after the op). The marker and the lock file stay through --overwrite.
OWNED_ENTRIES = (
    "manifest.json", "plan.json", "_work", "logs", "rejects", "mds", "parquet", "jsonl",
    "report.html", "dedup", "sample",
)  # fmt: skip


def describe_takeover(lock: RunLock) -> str | None:
    """A log line when ``lock`` was left behind by a run that is no longer running."""
    if lock.previous is None:
        return None
    return f"taking over the lock of a run that is no longer running ({describe_holder(lock.previous)})"


def claim_run_dir(store: RunStore | Path) -> None:
    """Make ``store`` (the run directory: a store, or a local path) a run directory, or
    check that it is one.

    An absent or empty folder is created and marked; a folder with the marker is accepted,
    and so is a complete or failed run of a dataforge from before markers (only dataforge's
    entries, a manifest with a config hash and dataforge's version), which is marked;
    anything else (a file, a folder of someone's data) is refused and left untouched.

    Raises:
        RunDirError: ``out`` is a file, or a non-empty folder without the run marker.
    """
    store = store if isinstance(store, RunStore) else RunStore(store)
    out = store.root
    if store.local and Path(out).exists() and not Path(out).is_dir():
        raise RunDirError(f"{out} is a file, not a run directory; choose another -o")
    if store.exists(RUN_MARKER):
        return
    path = Path(out)
    if store.local:
        # The marker may appear between the check above and this listing: a concurrent claim.
        present = (
            path.exists()
            and any(p.name not in (LOCK_FILE, RUN_MARKER) for p in path.iterdir())
            and not _is_unmarked_run(path)
        )
    else:
        present = bool(store.names())
    if present:
        raise RunDirError(
            f"{out} is not empty and is not a dataforge run directory (no {RUN_MARKER}); "
            "dataforge never writes into or removes such a folder: choose another -o"
        )
    if not store.local:  # object storage: the lease, taken next, decides who writes
        store.write_bytes(RUN_MARKER, MARKER_BODY)
        return
    path.mkdir(parents=True, exist_ok=True)
    # Exclusive create: a second run claiming the same empty folder at the same moment
    # finds the marker there (the lock then decides who writes).
    try:
        fd = os.open(path / RUN_MARKER, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return
    with os.fdopen(fd, "wb") as f:
        f.write(MARKER_BODY)


def _is_unmarked_run(out: Path) -> bool:
    """A run written before run markers existed: only dataforge's entries, and a manifest
    with a config hash and dataforge's version (a stray ``manifest.json`` is not enough)."""
    if any(p.name not in (*OWNED_ENTRIES, LOCK_FILE, RUN_MARKER) for p in out.iterdir()):
        return False
    try:
        manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    sha = manifest.get("config_sha256") if isinstance(manifest, dict) else None
    versions = manifest.get("versions") if isinstance(manifest, dict) else None
    return (
        isinstance(sha, str)
        and len(sha) == 64
        and isinstance(versions, dict)
        and "dataforge" in versions
    )


def remove_owned_entries(store: RunStore | Path) -> list[str]:
    """Remove what dataforge wrote in run directory ``store`` (``--overwrite``); anything
    else a user put there stays. Returns the names removed."""
    store = store if isinstance(store, RunStore) else RunStore(store)
    assert store.exists(RUN_MARKER), f"{store.root} is not a claimed run directory"
    removed = []
    for name in OWNED_ENTRIES:
        if store.exists(name) or (store.local and (Path(store.root) / name).is_symlink()):
            store.remove(name)  # ours: an owned entry of a marked run; links not followed
            removed.append(name)
    return removed


def acquire_lock(store: RunStore) -> RunLock:
    """The single-writer hold on ``store``: the ``flock`` of :func:`acquire_run_lock` on a
    local (or shared) filesystem, the lease of :mod:`dataforge.rundir.lease` on object storage."""
    if store.local:
        return acquire_run_lock(Path(store.root))
    return acquire_object_lease(store.root)
