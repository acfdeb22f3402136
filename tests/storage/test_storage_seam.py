"""The filesystem seam, the run store and the lease against a real S3 server (moto)."""

from __future__ import annotations

import gzip
import json
import time
from pathlib import Path

import pytest

from dataforge.io import fs
from dataforge.io.files import match_files
from dataforge.rundir.lease import LEASE_NAME, LeaseHeldError, LeaseLostError, ObjectLease
from dataforge.rundir.store import RunStore


def test_glob_matches_like_local_glob(s3, bucket: str, tmp_path: Path) -> None:
    files = {"a.jsonl": b"1\n", "sub/b.jsonl": b"22\n", "sub/deep/c.jsonl": b"333\n",
             "sub/c.txt": b"x", "other.jsonl.gz": gzip.compress(b"4\n")}  # fmt: skip
    for rel, data in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(data)
    s3.upload_tree(tmp_path, bucket, "in")
    for pattern in ("*.jsonl", "**/*.jsonl", "sub/*.jsonl", "sub/**", "*.jsonl*", "a.jsonl"):
        remote = match_files(f"s3://{bucket}/in/{pattern}")
        local = match_files(str(tmp_path / pattern))
        assert [(e.relpath, e.bytes) for e in remote] == [(e.relpath, e.bytes) for e in local]
        fixed = pattern.rsplit("/", 1)[0] + "/" if "/" in pattern else ""
        fixed = "" if "*" in fixed else fixed
        assert all(e.path == f"s3://{bucket}/in/{fixed}{e.relpath}" for e in remote)
    with pytest.raises(FileNotFoundError):
        match_files(f"s3://{bucket}/in/none/*.jsonl")
    # streams come back byte for byte (no decompression by extension)
    with fs.open_input_stream(f"s3://{bucket}/in/other.jsonl.gz") as f:
        assert gzip.decompress(f.read()) == b"4\n"


def test_bad_locations_fail_with_one_line_naming_them(s3, bucket: str, monkeypatch) -> None:
    fs.check_location(f"s3://{bucket}/out")  # reachable, bucket exists
    cases = {
        "s3://no-such-bucket-x/out": "bucket 'no-such-bucket-x' does not exist",
        "zz://host/path": "no filesystem for scheme 'zz' is installed",
    }
    for uri, expected in cases.items():
        with pytest.raises(fs.StorageError) as info:
            fs.check_location(uri)
        assert str(info.value).startswith(f"{uri}: ") and expected in str(info.value)
        assert "\n" not in str(info.value)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
    with pytest.raises(fs.StorageError, match=rf"^s3://{bucket}/out: access denied"):
        fs.check_location(f"s3://{bucket}/out")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # discard port: refused
    with pytest.raises(
        fs.StorageError, match="cannot reach the storage endpoint http://127.0.0.1:9"
    ):
        fs.check_location(f"s3://{bucket}/out")


def test_run_store_commit_protocol_on_s3(s3, bucket: str, tmp_path: Path) -> None:
    store = RunStore(f"s3://{bucket}/run")
    assert not store.local and store.names() == []
    with store.staging("seg0/t1") as tmp:
        (tmp / "out").mkdir()
        (tmp / "out" / "shard.mds").write_bytes(b"abc")
        (tmp / "stats.json").write_text("{}")
        store.commit_dir(tmp, "seg0/t1")
    assert not tmp.exists()  # staging is removed
    store.write_json("seg0/t1.done", {"rows": 3})
    assert store.read_json("seg0/t1.done") == {"rows": 3}
    assert store.read_json("seg0/t2.done") is None
    assert store.names("seg0") == ["t1", "t1.done"]
    # a re-commit replaces the whole part (no stale file of an earlier attempt survives)
    with store.staging("seg0/t1") as tmp:
        (tmp / "stats.json").write_text("{}")
        store.commit_dir(tmp, "seg0/t1")
    assert s3.keys(bucket, "run/seg0/t1/") == ["run/seg0/t1/stats.json"]
    # move_dir is idempotent: a rerun after a kill between copy and delete finishes it
    with store.staging("seg0/t3") as tmp:
        (tmp / "a").write_bytes(b"1")
        store.commit_dir(tmp, "seg0/t3/out")
    store.move_dir("seg0/t3/out", "mds/t3")
    store.move_dir("seg0/t3/out", "mds/t3")
    assert s3.keys(bucket, "run/mds/") == ["run/mds/t3/a"]
    assert not store.exists("seg0/t3/out")
    with store.local_file("mds/t3/a") as local:
        assert local.read_bytes() == b"1"
    store.remove("seg0")
    assert store.names() == ["mds", "seg0"] or store.names() == ["mds"]
    assert s3.keys(bucket, "run/seg0/") in ([], ["run/seg0/t3/out.moved"])


def test_lease_is_exclusive_renewed_and_taken_over_when_expired(s3, bucket: str) -> None:
    root = f"s3://{bucket}/leased"
    first = ObjectLease(root, ttl_s=1.5).acquire()
    with pytest.raises(LeaseHeldError, match=rf"^{root}/{LEASE_NAME}: the run directory is being"):
        ObjectLease(root, ttl_s=1.5).acquire()
    time.sleep(2.0)  # longer than the ttl: only renewal keeps it
    with pytest.raises(LeaseHeldError):
        ObjectLease(root, ttl_s=1.5).acquire()
    first.release()
    assert s3.keys(bucket, "leased/") == []
    # a crashed writer's lease (never renewed) is taken over once it expires
    client = s3.client()
    stale = {"id": "dead", "host": "h", "pid": 1, "expires": time.time() - 1}
    client.put_object(Bucket=bucket, Key=f"leased/{LEASE_NAME}", Body=json.dumps(stale))
    second = ObjectLease(root, ttl_s=30).acquire()
    held = json.loads(client.get_object(Bucket=bucket, Key=f"leased/{LEASE_NAME}")["Body"].read())
    assert held["id"] == second.holder["id"]
    # someone overwrote our lease (we stalled past expiry): the next renewal notices
    client.put_object(Bucket=bucket, Key=f"leased/{LEASE_NAME}", Body=json.dumps(stale))
    with pytest.raises(LeaseLostError):
        second.renew()
    with pytest.raises(LeaseLostError):
        second.verify()
    second.release()
