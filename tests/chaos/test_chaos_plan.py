"""Resume only what was planned, and every real file once (issue cases 3, 4)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from chaos_kit import assert_accounted, output_ids, run_local, snapshot, write_lines

from dataforge.config import ConfigError, load_pipeline
from dataforge.io.readers import plan_input_tasks
from dataforge.rundir.lock import RunDirError
from dataforge.runtime.executors.local import LocalExecutor
from dataforge.runtime.pipeline import run_pipeline


class _KilledAfter(LocalExecutor):
    """Commits the first ``n`` tasks of segment 0, then dies as a killed driver would."""

    def __init__(self, n: int) -> None:
        self.n = n

    def run_segment(self, config, segment, work_dir, tasks, log) -> None:
        super().run_segment(config, segment, work_dir, tasks[: self.n], log)
        raise KeyboardInterrupt("simulated kill")


@pytest.fixture
def twenty_files(tmp_path: Path, write_pipeline) -> Path:
    for f in range(20):
        write_lines(
            tmp_path / "in" / f"f{f + 10:02d}.jsonl", [f"file {f} doc {i}" for i in range(3)]
        )
    return write_pipeline(
        tmp_path,
        """
        name: twenty
        inputs: [{name: s, path: "in/*.jsonl"}]
        output: {path: out, size_limit: 4096}
        """,
    )


def test_resume_with_a_changed_input_set_is_refused(twenty_files: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        run_pipeline(load_pipeline(twenty_files), out, _KilledAfter(8), log=lambda m: None)
    plan = json.loads((out / "plan.json").read_text())["tasks"]
    assert len(plan) == 20 and all(t["mtime_ns"] > 0 and t["bytes"] > 0 for t in plan)
    write_lines(tmp_path / "in" / "a00.jsonl", ["sorts first"])  # shifts every task id
    changed = tmp_path / "in" / "f15.jsonl"
    changed.write_text(changed.read_text() + json.dumps({"text": "appended"}) + "\n")
    os.utime(changed, ns=(time.time_ns(), time.time_ns() + 10**9))
    before = snapshot(tmp_path / "in")
    with pytest.raises(RunDirError, match="over other inputs") as refused:
        run_local(twenty_files, out)
    message = str(refused.value)
    assert "added " in message and "a00.jsonl" in message and "changed " in message
    assert "f15.jsonl" in message and "--overwrite" in message and "\n" not in message
    assert snapshot(tmp_path / "in") == before
    # Restoring the inputs resumes; --overwrite starts over on the new set
    (tmp_path / "in" / "a00.jsonl").unlink()
    with pytest.raises(RunDirError, match="changed .*f15.jsonl"):
        run_local(twenty_files, out)
    write_lines(tmp_path / "in" / "a00.jsonl", ["sorts first"])
    manifest = run_local(twenty_files, out, overwrite=True)
    assert_accounted(manifest)
    reference = run_local(twenty_files, tmp_path / "reference")
    assert manifest["counts"] == reference["counts"] and manifest["counts"]["total"]["input"] == 62
    assert output_ids(out) == output_ids(tmp_path / "reference")


def test_resume_of_unchanged_inputs_matches_an_uninterrupted_run(
    twenty_files: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        run_pipeline(load_pipeline(twenty_files), out, _KilledAfter(8), log=lambda m: None)
    manifest = run_local(twenty_files, out)
    reference = run_local(twenty_files, tmp_path / "reference")
    assert output_ids(out) == output_ids(tmp_path / "reference") and len(output_ids(out)) == 60
    assert manifest["counts"] == reference["counts"]


def test_symlink_loops_never_repeat_a_file(tmp_path: Path, write_pipeline) -> None:
    write_lines(tmp_path / "in" / "sub" / "docs.jsonl", [f"doc {i}" for i in range(5)])
    write_lines(tmp_path / "in" / "top.jsonl", ["top doc"])
    (tmp_path / "in" / "sub" / "up").symlink_to("..")
    (tmp_path / "in" / "sub" / "up2").symlink_to("../..")  # two loops: exponential for glob
    (tmp_path / "in" / "alias.jsonl").symlink_to("top.jsonl")
    path = write_pipeline(
        tmp_path,
        """
        name: loops
        inputs: [{name: s, path: "in/**/*.jsonl"}]
        output: {path: out}
        """,
    )
    tasks = plan_input_tasks(load_pipeline(path))
    assert sorted(Path(t.path).name for t in tasks) == ["docs.jsonl", "top.jsonl"]
    manifest = run_local(path, tmp_path / "out")
    assert_accounted(manifest)
    assert manifest["counts"]["total"]["input"] == 6 and len(output_ids(tmp_path / "out")) == 6


def test_a_file_read_by_two_sources_is_refused(tmp_path: Path, write_pipeline) -> None:
    write_lines(tmp_path / "in" / "a.jsonl", ["one"])
    path = write_pipeline(
        tmp_path,
        """
        name: twice
        inputs: [{name: s1, path: "in/*.jsonl"}, {name: s2, path: "in/a.jsonl"}]
        output: {path: out}
        """,
    )
    with pytest.raises(ConfigError, match=r"inputs\[1\] \(s2\): file .*a.jsonl is also read by"):
        plan_input_tasks(load_pipeline(path))


def test_complete_run_with_changed_inputs_is_refused(twenty_files: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    run_local(twenty_files, out)
    touched = tmp_path / "in" / "f20.jsonl"
    os.utime(touched, ns=(time.time_ns(), time.time_ns() + 10**9))
    with pytest.raises(RunDirError, match=r"over other inputs \(1 changed: changed .*f20.jsonl"):
        run_local(twenty_files, out)


class _RewritesAnInput(LocalExecutor):
    """Appends to an input after segment 0, as a producer still writing it would."""

    def __init__(self, victim: Path) -> None:
        self.victim = victim

    def run_segment(self, config, segment, work_dir, tasks, log) -> None:
        super().run_segment(config, segment, work_dir, tasks, log)
        with open(self.victim, "a") as f:
            f.write(json.dumps({"text": "late"}) + "\n")


def test_input_changed_during_the_run_fails_it(twenty_files: Path, tmp_path: Path) -> None:
    from dataforge.runtime.failures import RunFailed

    victim = tmp_path / "in" / "f12.jsonl"
    with pytest.raises(RunFailed, match=r"input .*f12.jsonl changed during the run"):
        run_pipeline(load_pipeline(twenty_files), tmp_path / "out", _RewritesAnInput(victim),
                     log=lambda m: None)  # fmt: skip
    assert not (tmp_path / "out" / "manifest.json").exists()
