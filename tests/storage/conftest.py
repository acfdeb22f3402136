"""A real S3-compatible server for the storage tests: moto's standalone server on
127.0.0.1 (a free port), started as a subprocess and stopped by PID.

Authentication is on (``INITIAL_NO_AUTH_ACTION_COUNT``): the first four requests create an
IAM user with an allow-all policy and its key, and every later request must be signed
with that key, so a wrong secret is refused as a real S3 would refuse it.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class S3Server:
    endpoint: str
    env: dict[str, str]
    """The standard variables a client needs (endpoint, region, the valid key)."""

    def client(self):
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            aws_access_key_id=self.env["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=self.env["AWS_SECRET_ACCESS_KEY"],
        )

    def upload_tree(self, local: Path, bucket: str, prefix: str) -> None:
        client = self.client()
        for path in sorted(p for p in local.rglob("*") if p.is_file()):
            client.upload_file(str(path), bucket, f"{prefix}/{path.relative_to(local).as_posix()}")

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        """Object keys under ``prefix``, less the empty ``dir/`` markers pyarrow's S3
        filesystem leaves (as the S3 console does) so that a directory outlives its files."""
        paginator = self.client().get_paginator("list_objects_v2")
        pages = paginator.paginate(Bucket=bucket, Prefix=prefix)
        keys = (o["Key"] for page in pages for o in page.get("Contents", []))
        return sorted(k for k in keys if not k.endswith("/"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_listening(port: int, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"moto server exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"moto server not listening on {port} after {timeout} s")


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    import boto3

    port = _free_port()
    log = tmp_path_factory.mktemp("moto") / "server.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            env={**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "4"},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        _wait_listening(port, proc)
        endpoint = f"http://127.0.0.1:{port}"
        iam = boto3.client(
            "iam", endpoint_url=endpoint, region_name="us-east-1",
            aws_access_key_id="bootstrap", aws_secret_access_key="bootstrap",
        )  # fmt: skip
        iam.create_user(UserName="dataforge")
        allow_all = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*",
                                                             "Resource": "*"}]}  # fmt: skip
        arn = iam.create_policy(PolicyName="all", PolicyDocument=json.dumps(allow_all))
        iam.attach_user_policy(UserName="dataforge", PolicyArn=arn["Policy"]["Arn"])
        key = iam.create_access_key(UserName="dataforge")["AccessKey"]
        yield S3Server(
            endpoint,
            {
                "AWS_ENDPOINT_URL": endpoint,
                "AWS_REGION": "us-east-1",
                "AWS_ACCESS_KEY_ID": key["AccessKeyId"],
                "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"],
            },
        )
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def s3(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> S3Server:
    """The server, with its endpoint and key in this process's environment (Ray workers and
    CLI subprocesses started by the test inherit them)."""
    for name, value in s3_server.env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    return s3_server


@pytest.fixture
def bucket(s3: S3Server, request: pytest.FixtureRequest) -> str:
    """A fresh bucket for one test."""
    name = "t-" + "".join(c for c in request.node.name.lower() if c.isalnum())[:40]
    s3.client().create_bucket(Bucket=name)
    return name
