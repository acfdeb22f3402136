"""The pipeline on real Ray and on local workers: CLI end to end, a two-node cluster, SIGKILL,
interrupts and resume."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dataforge.config import load_pipeline
from dataforge.io.mds import iter_samples
from dataforge.runtime.executors.local import LocalExecutor
from dataforge.runtime.pipeline import run_pipeline

pytestmark = pytest.mark.ray

CLI = [sys.executable, "-m", "dataforge.cli"]


def cli(*args: str, env: dict | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*CLI, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def test_cli_run_on_local_ray_matches_in_process_run(pipeline_file: Path, tmp_path: Path) -> None:
    proc = cli(
        "run", str(pipeline_file), "-o", str(tmp_path / "ray"),
        "--set", "ray.num_cpus=2", "--set", "ray.actors=1",  # Ray at once, one actor
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "running on embedded local Ray" in proc.stderr
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["input"] == 22 and summary["kept"] == 21
    runtime = json.loads((tmp_path / "ray" / "manifest.json").read_text())["runtime"]
    assert runtime["executor"] == "ray" and runtime["tasks_on_driver"] == 0
    reference = tmp_path / "local"
    run_pipeline(load_pipeline(pipeline_file), reference, LocalExecutor(), log=lambda m: None)
    assert list(iter_samples(tmp_path / "ray")) == list(iter_samples(reference))
    inspect = cli("inspect", str(tmp_path / "ray"), "--verify", "--json", "--head", "1")
    assert inspect.returncode == 0
    report = json.loads(inspect.stdout)
    assert (
        report["samples"] == 21 and report["verify"]["ok"] and report["per_source"]["docs_en"] == 6
    )


def test_cli_main_called_by_a_program_that_imported_ray(
    pipeline_file: Path, tmp_path: Path
) -> None:
    """A program that imports Ray and then calls ``dataforge.cli.main(["run", ...])``: the
    CLI leaves ``RAY_AUTH_MODE`` as Ray read it at import, else the node it starts wants a
    token the driver does not send (the start stalled ~20 s on InvalidAuthToken)."""
    home = tmp_path / "home"
    (home / ".ray").mkdir(parents=True)
    (home / ".ray" / "auth_token").write_text("0123456789abcdef" * 4)  # token mode's trigger
    program = (
        "import sys, ray\n"
        "from dataforge.cli import main\n"
        f"sys.exit(main(['run', {str(pipeline_file)!r}, '-o', {str(tmp_path / 'out')!r}, "
        "'--set', 'ray.num_cpus=2', '--set', 'ray.actors=1']))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "RAY_AUTH_MODE"}
    proc = subprocess.run(
        [sys.executable, "-c", program],
        capture_output=True,
        text=True,
        timeout=300,
        env={**env, "HOME": str(home)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "InvalidAuthToken" not in proc.stderr and "running on embedded local Ray" in proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1])["kept"] == 21


def test_two_node_cluster(
    pipeline_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ray.cluster_utils import Cluster

    # The nodes inherit this process's environment: an in-process `dataforge run` of an
    # earlier test sets RAY_AUTH_MODE=token here, which would make this cluster require one.
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    cluster.add_node(num_cpus=1)
    try:
        cluster.wait_for_nodes()
        proc = cli(
            "run",
            str(pipeline_file),
            "-o",
            str(tmp_path / "cluster"),
            "--address",
            cluster.address,
            "--set",
            "ray.actors=2",
            # a cluster made by cluster_utils has no authentication; a token on this
            # machine (any earlier embedded run writes one) would make the driver use it
            env={"RAY_AUTH_MODE": "disabled"},
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert f"Ray cluster at {cluster.address}" in proc.stderr
        manifest = json.loads((tmp_path / "cluster" / "manifest.json").read_text())
        runtime = manifest["runtime"]
        assert runtime["nodes"] == 2 and runtime["tasks_on_driver"] == 0
        assert sum(runtime["tasks_by_node"].values()) == len(manifest["inputs"])  # one segment
    finally:
        cluster.shutdown()
    reference = tmp_path / "local"
    run_pipeline(load_pipeline(pipeline_file), reference, LocalExecutor(), log=lambda m: None)
    assert list(iter_samples(tmp_path / "cluster")) == list(iter_samples(reference))


def test_sigkill_mid_run_then_resume(tmp_path: Path, write_pipeline) -> None:
    corpus = tmp_path / "many"
    corpus.mkdir()
    for f in range(24):
        with open(corpus / f"f{f:02d}.jsonl", "w") as fh:
            for i in range(4000):
                fh.write(
                    json.dumps(
                        {"text": f"文件{f} 第{i}行：今天天气很好，我们去公园散步。"},
                        ensure_ascii=False,
                    )
                    + "\n"
                )
    path = write_pipeline(
        tmp_path,
        """
        name: killme
        inputs: [{name: s, path: "many/*.jsonl", lang: zh}]
        ray: {num_cpus: 1, actors: 1}
        output: {path: out/killme}
    """,
    )
    out = tmp_path / "out" / "killme"
    proc = subprocess.Popen(
        [*CLI, "run", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    deadline = time.time() + 300
    seg = out / "_work" / "seg0"
    while time.time() < deadline and len(list(seg.glob("*.done"))) < 2:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # the driver and everything it started
    proc.wait()
    committed = len(list(seg.glob("*.done")))
    assert 2 <= committed < 24, committed
    assert not (out / "manifest.json").exists() and not (out / "mds" / "index.json").exists()
    rerun = cli("run", str(path))
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert (
        f"{24 - committed} of 24 tasks to run" in rerun.stderr
        or "of 24 tasks to run" in rerun.stderr
    )
    reference = tmp_path / "ref"
    run_pipeline(load_pipeline(path), reference, LocalExecutor(), log=lambda m: None)
    assert list(iter_samples(out)) == list(iter_samples(reference))
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["counts"] == json.loads((reference / "manifest.json").read_text())["counts"]


def _run_until_a_task_commits(
    tmp_path: Path, write_pipeline, name: str, executor: str = "local"
) -> tuple[Path, Path, subprocess.Popen]:
    """``dataforge run`` (its own session) of 24 JSON-lines files of 4,000 short Chinese
    records, a run of a few seconds, returned once segment 0 has committed a task: the
    pipeline file, OUT and the process."""
    corpus = tmp_path / "many"
    corpus.mkdir()
    for f in range(24):
        lines = [
            json.dumps(
                {"text": f"文件{f} 第{i}行：今天天气很好，我们去公园散步。"}, ensure_ascii=False
            )
            for i in range(4000)
        ]
        (corpus / f"f{f:02d}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    path = write_pipeline(
        tmp_path,
        f"""
        name: {name}
        inputs: [{{name: s, path: "many/*.jsonl", lang: zh}}]
        executor: {executor}
        ray: {{num_cpus: 2}}
        output: {{path: out/{name}}}
    """,
    )
    out = tmp_path / "out" / name
    proc = subprocess.Popen(
        [*CLI, "run", str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        start_new_session=True, text=True,
    )  # fmt: skip
    seg = out / "_work" / "seg0"
    deadline = time.time() + 300
    while time.time() < deadline and not list(seg.glob("*.done")):
        time.sleep(0.02)
    return path, out, proc


def _rerun_resumes_to_the_in_process_output(path: Path, out: Path) -> None:
    rerun = cli("run", str(path))
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert f"resuming run '{out.name}'" in rerun.stderr
    reference = out.parent.parent / "ref"
    run_pipeline(load_pipeline(path), reference, LocalExecutor(), log=lambda m: None)
    assert list(iter_samples(out)) == list(iter_samples(reference))


def _session_members(sid: int) -> list[str]:
    """``pid command`` of the live (not zombie) processes of session ``sid``."""
    ps = subprocess.run(["ps", "-eo", "pid=,sid=,stat=,comm="], capture_output=True, text=True)
    members = []
    for line in ps.stdout.splitlines():
        pid, session, stat, comm = line.split(None, 3)
        if int(session) == sid and not stat.startswith("Z"):
            members.append(f"{pid} {comm}")
    return members


@pytest.mark.parametrize(
    ("sig", "status", "executor"),
    [
        (signal.SIGINT, 130, "ray"),
        (signal.SIGTERM, 143, "ray"),
        (signal.SIGINT, 130, "local"),
        (signal.SIGTERM, 143, "local"),
    ],
)
def test_interrupt_stops_the_workers_and_the_rerun_resumes(
    tmp_path: Path, write_pipeline, sig: signal.Signals, status: int, executor: str
) -> None:
    """Ctrl-C or SIGTERM to the driver alone: one line and 130 / 143, every process it
    started (Ray's or the local workers) gone, no complete-looking output, and the same
    command resumes to the in-process run's output."""
    path, out, proc = _run_until_a_task_commits(tmp_path, write_pipeline, "interrupted", executor)
    proc.send_signal(sig)  # the driver only, as a terminal's Ctrl-C or `kill` would
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == status, stderr[-3000:]
    if sig == signal.SIGINT:
        assert stderr.strip().splitlines()[-1].startswith(f"interrupted: {out} holds no complete")
    assert "Traceback" not in stderr
    assert not (out / "manifest.json").exists()
    if executor == "local":  # the workers cancel their tasks: nothing half-built
        assert list(out.rglob("*.tmp-*")) == []
    deadline = time.time() + 30  # Ray's processes (same session; workers have their own
    while _session_members(proc.pid) and time.time() < deadline:  # process groups) are gone
        time.sleep(0.2)
    assert _session_members(proc.pid) == [], "processes of the interrupted run still alive"
    _rerun_resumes_to_the_in_process_output(path, out)


def test_a_killed_driver_takes_its_local_workers_with_it(tmp_path: Path, write_pipeline) -> None:
    """SIGKILL to the driver alone (no handler runs): its worker processes die with it
    (``PR_SET_PDEATHSIG``), no task commits after the kill, and the rerun resumes."""
    path, out, proc = _run_until_a_task_commits(tmp_path, write_pipeline, "killed")
    seg = out / "_work" / "seg0"
    assert len(_session_members(proc.pid)) == 3  # the driver and its two workers
    proc.kill()
    proc.communicate()
    deadline = time.time() + 10
    while _session_members(proc.pid) and time.time() < deadline:
        time.sleep(0.05)
    assert _session_members(proc.pid) == [], "a worker outlived its driver"
    committed = sorted(p.name for p in seg.glob("*.done"))
    time.sleep(1.0)
    assert sorted(p.name for p in seg.glob("*.done")) == committed
    assert not (out / "manifest.json").exists()
    _rerun_resumes_to_the_in_process_output(path, out)


def test_a_local_worker_killed_alone_fails_the_run_and_the_rerun_resumes(
    tmp_path: Path, write_pipeline
) -> None:
    """One of the local workers killed (as the OOM killer would): the run fails in one line
    naming the task and the worker, commits nothing of that task, leaves no process behind,
    and the same command resumes to the in-process run's output."""
    path, out, proc = _run_until_a_task_commits(tmp_path, write_pipeline, "oom")
    workers = subprocess.run(
        ["ps", "-o", "pid=", "--ppid", str(proc.pid)], capture_output=True, text=True
    ).stdout.split()
    assert len(workers) == 2, workers
    os.kill(int(workers[0]), signal.SIGKILL)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 1, stderr[-3000:]
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in stderr
    assert re.search(
        rf"error: run failed: task \S+: local worker process {workers[0]} died \(killed by "
        r"signal 9\); nothing of the task was committed",
        errors[0],
    ), errors
    assert not (out / "manifest.json").exists()
    deadline = time.time() + 10
    while _session_members(proc.pid) and time.time() < deadline:
        time.sleep(0.05)
    assert _session_members(proc.pid) == []
    _rerun_resumes_to_the_in_process_output(path, out)


@pytest.mark.parametrize("executor", ["ray", "local"])
def test_truncated_input_fails_the_run_naming_the_file(
    tmp_path: Path, write_pipeline, executor: str
) -> None:
    import zstandard

    data = b"".join(json.dumps({"text": f"doc {i}"}).encode() + b"\n" for i in range(2000))
    (tmp_path / "cut.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(data)[:-9])
    path = write_pipeline(
        tmp_path,
        """
        name: cut
        inputs: [{name: s, path: "cut.jsonl.zst"}]
        executor: EXECUTOR
        ray: {num_cpus: 1, max_task_retries: 0}
        output: {path: out/cut}
    """.replace("EXECUTOR", executor),
    )
    proc = cli("run", str(path))
    assert proc.returncode == 1
    lines = proc.stderr.splitlines()
    assert len([line for line in lines if line.startswith("error:")]) == 1
    at = next(i for i, line in enumerate(lines) if line.startswith("error: run failed: task"))
    error, trace_line = lines[at : at + 2]
    assert error.startswith("error: run failed: task 000-000000 (") and "RayTask" not in error
    assert "cut.jsonl.zst" in error and "truncated" in error
    trace = Path(trace_line.removeprefix("full trace: "))
    assert trace.parent == tmp_path / "out" / "cut" / "logs" and "Traceback" in trace.read_text()
    assert not (tmp_path / "out" / "cut" / "manifest.json").exists()
