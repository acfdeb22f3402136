"""Ownership and one writer: --overwrite never deletes what dataforge did not write, the
output never overlaps an input, and two runs never share a run directory (issue cases 1, 2)."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from chaos_kit import assert_accounted, output_ids, run_local, snapshot, write_lines

from dataforge.cli import main
from dataforge.rundir.lock import LOCK_FILE, RunDirError, RunLockedError, acquire_run_lock
from dataforge.rundir.ownership import RUN_MARKER


def _victim_pipeline(tmp_path: Path, write_pipeline, output: str) -> Path:
    victim = tmp_path / "victim"
    write_lines(victim / "part-0000.jsonl", ["a first document", "a second document"])
    (victim / "manifest.json").write_text('{"source":"crawl"}\n')
    return write_pipeline(
        tmp_path,
        f"""
        name: victim
        inputs: [{{name: crawl, path: "victim/*.jsonl"}}]
        output: {{path: {output}}}
        """,
    )


def test_overwrite_never_deletes_an_input_folder(tmp_path: Path, write_pipeline, capsys) -> None:
    path = _victim_pipeline(tmp_path, write_pipeline, "victim")
    before = snapshot(tmp_path / "victim")
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "holds input file" in err[0] and "part-0000.jsonl" in err[0]
    for overwrite in (False, True):
        with pytest.raises(RunDirError, match="output .*victim"):
            run_local(path, tmp_path / "victim", overwrite=overwrite)
    # inside the folder a glob reads (the output could be read back), and above an input
    with pytest.raises(RunDirError, match="lies inside the folder that source 'crawl' reads"):
        run_local(path, tmp_path / "victim" / "out", ["inputs.0.path=victim/**/*.jsonl"])
    assert not (tmp_path / "victim" / "out").exists()
    with pytest.raises(RunDirError, match="holds input file .*part-0000.jsonl"):
        run_local(path, tmp_path, overwrite=True)
    assert snapshot(tmp_path / "victim") == before


def test_a_folder_that_is_not_a_run_is_never_touched(tmp_path: Path, write_pipeline) -> None:
    path = _victim_pipeline(tmp_path, write_pipeline, "elsewhere")
    foreign = tmp_path / "foreign"
    (foreign / "sub").mkdir(parents=True)
    (foreign / "manifest.json").write_text('{"config_sha256": "abc", "status": "complete"}')
    (foreign / "sub" / "notes.txt").write_text("mine")
    before = snapshot(foreign)
    for overwrite in (False, True):
        with pytest.raises(RunDirError, match="not a dataforge run directory"):
            run_local(path, foreign, overwrite=overwrite)
    assert snapshot(foreign) == before and sorted(os.listdir(foreign)) == ["manifest.json", "sub"]


def test_overwrite_removes_only_what_dataforge_wrote(tmp_path: Path, write_pipeline) -> None:
    path = _victim_pipeline(tmp_path, write_pipeline, "out")
    out = tmp_path / "out"
    run_local(path, out)
    (out / "my-notes.txt").write_text("keep me")
    with pytest.raises(RunDirError, match="different config"):
        run_local(path, out, ["seed=5"])
    manifest = run_local(path, out, ["seed=5"], overwrite=True)
    assert_accounted(manifest)
    assert (out / "my-notes.txt").read_text() == "keep me" and (out / RUN_MARKER).is_file()
    assert len(output_ids(out)) == 2


def test_lock_refuses_a_second_writer_and_names_the_holder(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    lock = acquire_run_lock(out)
    with pytest.raises(RunLockedError, match=rf"host \S+, pid {os.getpid()}, started 20\d\d-"):
        acquire_run_lock(out)
    lock.release()
    again = acquire_run_lock(out)
    assert again.previous is None  # a clean release leaves no holder behind
    again.release()


@pytest.mark.parametrize("left_behind", ["", "stale"])
def test_a_run_refused_as_the_winner_locks_names_the_winner(
    tmp_path: Path, left_behind: str
) -> None:
    """The race of two runs started together: the winner holds the lock but has not yet
    written its record (the file is empty, or still names a run that died). The refused
    run reads again until the record names the live winner."""
    out = tmp_path / "out"
    out.mkdir()
    dead = subprocess.Popen(["true"])  # a pid that no longer runs
    dead.wait()
    stale = {"host": socket.gethostname(), "pid": dead.pid, "started": "2026-01-01T00:00:00"}
    (out / LOCK_FILE).write_text(json.dumps(stale) if left_behind else "")
    fd = os.open(out / LOCK_FILE, os.O_RDWR)  # the winner: locked, record not yet written
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    record = {"host": socket.gethostname(), "pid": os.getpid(), "started": "2026-11-30T00:00:00"}

    def write_record() -> None:
        time.sleep(0.3)
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(record).encode(), 0)

    writer = threading.Thread(target=write_record)
    writer.start()
    try:
        with pytest.raises(RunLockedError, match=rf"pid {os.getpid()}, started 2026-11-30"):
            acquire_run_lock(out)
    finally:
        writer.join()
        os.close(fd)


def test_lock_of_a_killed_run_is_taken_over(tmp_path: Path, write_pipeline) -> None:
    path = _victim_pipeline(tmp_path, write_pipeline, "out")
    out = tmp_path / "out"
    out.mkdir()
    (out / RUN_MARKER).write_text('{"dataforge_run": 1}')
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; from pathlib import Path; "
         "from dataforge.rundir.lock import acquire_run_lock; "
         "acquire_run_lock(Path(sys.argv[1])); print('locked', flush=True); time.sleep(600)",
         str(out)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(RunLockedError, match=f"pid {holder.pid}"):
            run_local(path, out)
        assert sorted(os.listdir(out)) == [LOCK_FILE, RUN_MARKER]  # nothing written
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert json.loads((out / LOCK_FILE).read_text())["pid"] == holder.pid  # left behind
    logs: list[str] = []
    from dataforge.config import load_pipeline
    from dataforge.runtime.executors.local import LocalExecutor
    from dataforge.runtime.pipeline import run_pipeline

    manifest = run_pipeline(load_pipeline(path), out, LocalExecutor(), log=logs.append)
    assert any("no longer running (host" in m and f"pid {holder.pid}" in m for m in logs)
    assert manifest["status"] == "complete" and (out / LOCK_FILE).read_text() == ""


def test_concurrent_claims_of_one_empty_folder_all_succeed(tmp_path: Path) -> None:
    import threading

    from dataforge.rundir.ownership import claim_run_dir

    for attempt in range(200):
        out = tmp_path / f"out{attempt}"
        start, errors = threading.Barrier(4), []

        def claim(out: Path = out, start: threading.Barrier = start, errors: list = errors) -> None:
            start.wait()
            try:
                claim_run_dir(out)
            except RunDirError as exc:
                errors.append(exc)

        threads = [threading.Thread(target=claim) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == [] and os.listdir(out) == [RUN_MARKER]


def test_a_run_from_before_markers_is_adopted_only_when_it_is_one(tmp_path: Path) -> None:
    from dataforge.rundir.ownership import claim_run_dir

    legacy = {"config_sha256": "a" * 64, "versions": {"dataforge": "0.1.0"}, "status": "complete"}
    for extra, adopted in ((None, True), ("notes.txt", False)):
        out = tmp_path / f"old-{adopted}"
        (out / "mds").mkdir(parents=True)
        (out / "manifest.json").write_text(json.dumps(legacy))
        if extra:
            (out / extra).write_text("mine")
        if adopted:
            claim_run_dir(out)
            assert (out / RUN_MARKER).is_file()
        else:
            with pytest.raises(RunDirError, match="not a dataforge run directory"):
                claim_run_dir(out)
            assert not (out / RUN_MARKER).exists()
