"""Bad storage input, as a user meets it: one line naming the URI; exit 2 from ``validate``
(and from ``run``, which validates first), exit 1 when only the run can find out."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from dataforge.config import load_pipeline
from dataforge.rundir.lease import LEASE_NAME, LeaseHeldError
from dataforge.runtime.executors.local import LocalExecutor
from dataforge.runtime.pipeline import run_pipeline


def cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "dataforge.cli", *args],
        capture_output=True, text=True, timeout=300, env={**os.environ, **(env or {})},
    )  # fmt: skip


def _pipeline(tmp_path: Path, inputs: str, output: str, extra: str = "") -> Path:
    path = tmp_path / f"p{len(list(tmp_path.glob('p*.yaml')))}.yaml"
    path.write_text(
        textwrap.dedent(
            f"""\
            name: bad_storage
            inputs:
              - {{name: docs, path: "{inputs}", lang: en}}
            stages:
              - {{op: clean}}
            output: {{path: "{output}", format: jsonl}}
            """
        )
        + extra
    )
    return path


@pytest.fixture
def uploaded(s3, bucket: str, tmp_path: Path) -> str:
    s3.client().put_object(Bucket=bucket, Key="in/a.jsonl", Body=b'{"text": "hello world"}\n')
    return f"s3://{bucket}/in/*.jsonl"


def _one_error_line(proc: subprocess.CompletedProcess, code: int, *needles: str) -> str:
    assert proc.returncode == code, (proc.returncode, proc.stderr[-2000:])
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stderr[-2000:]
    for needle in needles:
        assert needle in errors[0], errors[0]
    return errors[0]


def test_validate_reports_each_bad_location(s3, bucket: str, uploaded: str, tmp_path) -> None:
    good_out = f"s3://{bucket}/out"
    ok = cli("validate", str(_pipeline(tmp_path, uploaded, good_out)))
    assert ok.returncode == 0, ok.stderr
    assert "1 files" in ok.stdout
    cases = [
        (_pipeline(tmp_path, "s3://missing-bucket-q/in/*.jsonl", good_out), {},
         ["s3://missing-bucket-q/in/*.jsonl", "bucket 'missing-bucket-q' does not exist"]),
        (_pipeline(tmp_path, uploaded, "s3://missing-bucket-q/out"), {},
         ["s3://missing-bucket-q/out", "does not exist"]),
        (_pipeline(tmp_path, uploaded, good_out), {"AWS_SECRET_ACCESS_KEY": "wrong"},
         [good_out, "access denied"]),
        (_pipeline(tmp_path, uploaded, good_out), {"AWS_ENDPOINT_URL": "http://127.0.0.1:9"},
         [good_out, "cannot reach the storage endpoint http://127.0.0.1:9"]),
        (_pipeline(tmp_path, "nosuchfs://host/in/*.jsonl", good_out), {},
         ["nosuchfs://host/in/*.jsonl", "no filesystem for scheme 'nosuchfs' is installed"]),
        (_pipeline(tmp_path, uploaded, good_out, "storage: {endpoint: http://x}\n"), {},
         ["storage", "unknown key(s) ['endpoint']", "endpoint_url"]),
    ]  # fmt: skip
    for pipeline, env, needles in cases:
        _one_error_line(cli("validate", str(pipeline), env=env), 2, *needles)
    # run validates first: the same problems stop it with exit 2 before any work
    pipeline, env, needles = cases[2]
    _one_error_line(cli("run", str(pipeline), env=env), 2, *needles)
    assert s3.keys(bucket, "out/") == []


def test_run_output_given_with_o_unreachable_stops_before_work(
    s3, bucket: str, uploaded: str, tmp_path
) -> None:
    pipeline = _pipeline(tmp_path, uploaded, str(tmp_path / "out"))
    proc = cli("run", str(pipeline), "-o", "s3://missing-bucket-q/run")
    _one_error_line(proc, 2, "s3://missing-bucket-q/run", "does not exist")
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
@pytest.mark.ray
def test_live_lease_refuses_a_second_writer_and_stale_one_is_taken_over(
    s3, bucket: str, uploaded: str, tmp_path
) -> None:
    pipeline = _pipeline(tmp_path, uploaded, f"s3://{bucket}/out")
    # another writer claimed the folder and holds the lease
    s3.client().put_object(Bucket=bucket, Key="out/.dataforge-run", Body=b'{"dataforge_run": 1}')
    lease = {"id": "other", "host": "elsewhere", "pid": 42, "expires": time.time() + 600}
    s3.client().put_object(Bucket=bucket, Key=f"out/{LEASE_NAME}", Body=json.dumps(lease))
    with pytest.raises(
        LeaseHeldError, match=rf"^s3://{bucket}/out/{LEASE_NAME}: .* host elsewhere pid 42"
    ):
        run_pipeline(load_pipeline(pipeline), f"s3://{bucket}/out", LocalExecutor())
    # nothing written, lease kept
    assert s3.keys(bucket, "out/") == ["out/.dataforge-run", f"out/{LEASE_NAME}"]
    lease["expires"] = time.time() - 5  # the other writer died long ago
    s3.client().put_object(Bucket=bucket, Key=f"out/{LEASE_NAME}", Body=json.dumps(lease))
    # Through the CLI on a fresh local Ray: its actors write the parts to S3.
    proc = cli("run", str(pipeline), "--address", "local")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert s3.keys(bucket, "out/") == [
        "out/.dataforge-run", "out/jsonl/000-000000/data.jsonl", "out/manifest.json",
        "out/plan.json",
    ]  # fmt: skip
    manifest = json.loads(
        s3.client().get_object(Bucket=bucket, Key="out/manifest.json")["Body"].read()
    )
    assert manifest["counts"]["total"] == {"input": 1, "kept": 1, "repeated": 0, "dropped": {}}
