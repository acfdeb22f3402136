"""The object-store lease under faults (issue 31 case 7): a run's own error is reported,
not the lease's; a lease left by a dead process on this host is taken over at once; a
writer whose renewals hang stops before its lease expires.

S3 is the moto server of ``tests/storage/conftest.py`` (its fixtures are loaded here)."""

from __future__ import annotations

import importlib.util
import json
import select
import socket
import socketserver
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from chaos_kit import write_lines

from dataforge.config import load_pipeline
from dataforge.io.fs import StorageError
from dataforge.rundir.lease import (
    LEASE_NAME,
    LeaseHeldError,
    LeaseLostError,
    ObjectLease,
    acquire_object_lease,
)
from dataforge.rundir.store import RunStore
from dataforge.runtime.executors.local import LocalExecutor
from dataforge.runtime.failures import RunFailed
from dataforge.runtime.pipeline import run_pipeline

_spec = importlib.util.spec_from_file_location(
    "storage_conftest", Path(__file__).parents[1] / "storage" / "conftest.py"
)
_storage = sys.modules.setdefault("storage_conftest", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(_storage)
s3_server, s3, bucket = _storage.s3_server, _storage.s3, _storage.bucket


def _lease_record(s3, bucket: str, key: str) -> dict:
    return json.loads(s3.client().get_object(Bucket=bucket, Key=key)["Body"].read())


def _put_lease(s3, bucket: str, key: str, **holder) -> None:
    record = {"id": "old", "host": socket.gethostname(), "expires": time.time() + 600, **holder}
    s3.client().put_object(Bucket=bucket, Key=key, Body=json.dumps(record))


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_lease_of_a_dead_process_on_this_host_is_taken_over_at_once(s3, bucket: str) -> None:
    root = f"s3://{bucket}/out"
    dead = _dead_pid()
    _put_lease(s3, bucket, f"out/{LEASE_NAME}", pid=dead)
    lease = acquire_object_lease(root)
    try:
        assert lease.previous is not None and lease.previous["pid"] == dead
        record = _lease_record(s3, bucket, f"out/{LEASE_NAME}")
        assert (record["id"], record["host"]) == (lease.holder["id"], socket.gethostname())
    finally:
        lease.release()
    assert s3.keys(bucket, "out/") == []


def test_a_lease_left_by_this_process_is_taken_over_but_a_live_one_is_not(s3, bucket: str) -> None:
    import os

    root = f"s3://{bucket}/out"
    _put_lease(s3, bucket, f"out/{LEASE_NAME}", pid=os.getpid())  # an earlier run in here
    first = acquire_object_lease(root)
    try:
        with pytest.raises(LeaseHeldError, match=rf"pid {os.getpid()} \(lease valid"):
            acquire_object_lease(root)  # the first lease is live in this process
    finally:
        first.release()
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) as live:
        try:
            _put_lease(s3, bucket, f"out/{LEASE_NAME}", pid=live.pid)
            with pytest.raises(LeaseHeldError, match=rf"pid {live.pid} \(lease valid"):
                acquire_object_lease(root)
            _put_lease(s3, bucket, f"out/{LEASE_NAME}", pid=live.pid, host="elsewhere")
            with pytest.raises(LeaseHeldError, match=rf"host elsewhere pid {live.pid}"):
                acquire_object_lease(root)
        finally:
            live.kill()


def _fresh_key(s3) -> dict[str, str]:
    """A new IAM user and key (allowed everything), to revoke without touching the
    session's key."""
    import boto3

    iam = boto3.client(
        "iam", endpoint_url=s3.endpoint, region_name="us-east-1",
        aws_access_key_id=s3.env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=s3.env["AWS_SECRET_ACCESS_KEY"],
    )  # fmt: skip
    name = f"revoked-{time.monotonic_ns()}"
    iam.create_user(UserName=name)
    policies = iam.list_policies(Scope="Local")["Policies"]
    iam.attach_user_policy(UserName=name, PolicyArn=policies[0]["Arn"])
    key = iam.create_access_key(UserName=name)["AccessKey"]
    return {"user": name, "id": key["AccessKeyId"], "secret": key["SecretAccessKey"], "iam": iam}


def test_the_run_error_is_reported_when_the_lease_cannot_be_released(
    s3, bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, write_pipeline
) -> None:
    write_lines(tmp_path / "in" / "a.jsonl", ["hello world"])
    pipeline = write_pipeline(
        tmp_path,
        """
        name: revoked
        inputs: [{name: s, path: "in/*.jsonl", lang: en}]
        output: {path: out, format: jsonl}
        """,
    )
    key = _fresh_key(s3)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key["id"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", key["secret"])
    logged = []

    def log(message: str) -> None:
        logged.append(message)
        if message.startswith("starting run"):  # the lease is held: revoke the key now
            key["iam"].delete_access_key(UserName=key["user"], AccessKeyId=key["id"])

    with pytest.raises((RunFailed, StorageError)) as info:
        run_pipeline(load_pipeline(pipeline), f"s3://{bucket}/out", LocalExecutor(), log=log)
    assert LEASE_NAME not in str(info.value), info.value
    assert f"s3://{bucket}/out" in str(info.value)
    released = [m for m in logged if m.startswith("could not release the run's lock")]
    assert len(released) == 1 and LEASE_NAME in released[0], logged


class _FreezableProxy(socketserver.ThreadingTCPServer):
    """A TCP proxy to ``upstream``; once ``frozen`` is set it forwards nothing more and
    answers nothing (a frozen endpoint: connections accepted, requests never answered)."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.frozen = threading.Event()
        self.closing = threading.Event()
        super().__init__(("127.0.0.1", 0), _Pump)


class _Pump(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        server: _FreezableProxy = self.server  # type: ignore[assignment]
        with socket.create_connection(server.upstream) as up:
            ends = {self.request: up, up: self.request}
            while not server.closing.is_set():
                if server.frozen.is_set():
                    time.sleep(0.05)
                    continue
                ready, _, _ = select.select(list(ends), [], [], 0.05)
                for sock in ready:
                    data = sock.recv(65536)
                    if not data:
                        return
                    ends[sock].sendall(data)


def test_a_writer_whose_renewals_hang_stops_before_its_lease_expires(
    s3, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    host, port = s3.endpoint.removeprefix("http://").split(":")
    proxy = _FreezableProxy((host, int(port)))
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{proxy.server_address[1]}")
    ttl = 3.0
    lease = ObjectLease(f"s3://{bucket}/out", ttl_s=ttl).acquire()
    store = RunStore(f"s3://{bucket}/out")
    store.guard_writes(lease.verify)
    try:
        time.sleep(ttl / 2)  # at least one renewal went through
        expires = _lease_record(s3, bucket, f"out/{LEASE_NAME}")["expires"]
        proxy.frozen.set()
        while True:  # the runtime checks before each write; here, as often as it can
            try:
                lease.verify()
            except LeaseLostError as exc:
                stopped_at = time.time()
                message = str(exc)
                break
            assert time.time() < expires + ttl, "verify() never stopped the writer"
            time.sleep(0.02)
        assert stopped_at < expires, "the writer went on past its lease's expiry"
        assert message == (
            f"s3://{bucket}/out/{LEASE_NAME}: the lease could not be renewed within 2.5 s "
            "(ttl 3 s); stopped writing before it expires"
        )
        with pytest.raises(LeaseLostError, match="stopped writing"):
            store.write_json("manifest.json", {})  # every write of the run's store is guarded
    finally:
        proxy.closing.set()
        proxy.shutdown()
        lease.release()
