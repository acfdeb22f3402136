"""One writer per run directory on object storage: a lease object with an expiry.

Object stores have no file locks, but S3 (and compatible servers) have conditional writes,
which make a lease safe without a clock shared by the writers' machines:

- **acquire**: ``PUT OUT/_lease.json`` with ``If-None-Match: *`` creates it only if absent.
  If present and its ``expires`` time has passed, ``PUT ... If-Match: <its ETag>`` takes it
  over; two writers racing to take over cannot both win, since the first PUT changes the ETag.
- **renew**: a thread rewrites it every ``ttl/3`` seconds with ``If-Match`` on our last ETag;
  if that fails someone took it over (we stalled past the expiry), and :meth:`verify` raises
  at the runtime's next check, before anything else is committed.
- **release**: delete it, if it is still ours.

Expiry compares the writer's wall clock with the reader's, so clocks must agree to well
within ``ttl`` (60 s by default): NTP-level skew is fine.
"""

from __future__ import annotations

import datetime
import json
import os
import socket
import threading
import time
import uuid
from typing import Any

from dataforge.io.fs import StorageError, filesystem, s3_endpoint, s3_region

__all__ = ["LEASE_NAME", "LeaseHeldError", "LeaseLostError", "ObjectLease", "acquire_object_lease"]

LEASE_NAME = "_lease.json"
_CONFLICT = {"PreconditionFailed", "ConditionalRequestConflict", "412", "409"}


class LeaseHeldError(RuntimeError):
    """Another live writer holds the run directory."""


class LeaseLostError(RuntimeError):
    """Our lease expired and another writer took the run directory over."""


def _client():
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=s3_endpoint(),
        region_name=s3_region(),
        config=Config(connect_timeout=5, read_timeout=30, retries={"max_attempts": 2}),
    )


def _error_code(exc: Exception) -> str:
    response = getattr(exc, "response", None) or {}
    return str(response.get("Error", {}).get("Code", ""))


class ObjectLease:
    """The single-writer lease of one run directory ``root`` (an ``s3://`` URI)."""

    def __init__(self, root: str, ttl_s: float = 60.0) -> None:
        _, path = filesystem(root)
        self.uri = f"{root.rstrip('/')}/{LEASE_NAME}"
        self.bucket, _, prefix = path.partition("/")
        self.key = f"{prefix.rstrip('/')}/{LEASE_NAME}" if prefix else LEASE_NAME
        self.ttl_s = ttl_s
        started = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
        self.holder = {
            "id": uuid.uuid4().hex, "host": socket.gethostname(), "pid": os.getpid(),
            "started": started,
        }  # fmt: skip
        self.previous: dict[str, Any] | None = None
        """The holder of the expired lease this one took over, else None."""
        self._client = _client()
        self._etag: str | None = None
        self._lost: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _body(self) -> bytes:
        return json.dumps({**self.holder, "expires": time.time() + self.ttl_s}).encode()

    def _call(self, method: str, **kwargs: Any) -> dict[str, Any]:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return getattr(self._client, method)(Bucket=self.bucket, Key=self.key, **kwargs)
        except ClientError as exc:
            if _error_code(exc) in _CONFLICT | {"NoSuchKey", "404"}:
                raise
            raise StorageError(f"{self.uri}: {_error_code(exc)}: {exc}") from exc
        except BotoCoreError as exc:
            raise StorageError(f"{self.uri}: {exc}") from exc

    def acquire(self) -> ObjectLease:
        """Take the lease, or raise :class:`LeaseHeldError` naming the live holder."""
        from botocore.exceptions import ClientError

        try:
            self._etag = self._call("put_object", Body=self._body(), IfNoneMatch="*")["ETag"]
        except ClientError as exc:
            if _error_code(exc) not in _CONFLICT:
                raise
            current = self._call("get_object")
            held = json.loads(current["Body"].read())
            left = held.get("expires", 0) - time.time()
            if left > 0:
                raise LeaseHeldError(
                    f"{self.uri}: the run directory is being written by host {held.get('host')} "
                    f"pid {held.get('pid')} (lease valid {left:.0f} s more); one writer per "
                    "output"
                ) from None
            try:  # expired: take it over, unless another writer just did
                put = self._call("put_object", Body=self._body(), IfMatch=current["ETag"])
            except ClientError as again:
                raise LeaseHeldError(
                    f"{self.uri}: another writer took over the expired lease just now"
                ) from again
            self._etag = put["ETag"]
            self.previous = held
        self._thread = threading.Thread(target=self._renew_loop, daemon=True, name="lease")
        self._thread.start()
        return self

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.ttl_s / 3):
            try:
                self.renew()
            except (LeaseLostError, StorageError):
                return  # verify() reports it on the main thread

    def renew(self) -> None:
        """Extend the lease by ``ttl``.

        Raises:
            LeaseLostError: the lease object is no longer ours (or cannot be rewritten).
        """
        try:
            self._etag = self._call("put_object", Body=self._body(), IfMatch=self._etag)["ETag"]
        except Exception as exc:
            self._lost = f"{self.uri}: lease lost, another writer may own the output ({exc})"
            raise LeaseLostError(self._lost) from exc

    def verify(self) -> None:
        """Raise :class:`LeaseLostError` if the lease was lost; the runtime calls it before
        each commit step."""
        if self._lost:
            raise LeaseLostError(self._lost)

    def release(self) -> None:
        """Stop renewing and delete the lease object if it is still ours."""
        from botocore.exceptions import ClientError

        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._lost or self._etag is None:
            return
        try:
            held = json.loads(self._call("get_object")["Body"].read())
        except ClientError:
            return
        if held.get("id") == self.holder["id"]:
            self._call("delete_object")  # ours: the lease still names our holder id

    def __enter__(self) -> ObjectLease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def acquire_object_lease(root: str, ttl_s: float = 60.0) -> ObjectLease:
    """Hold the single-writer lease of the object-store run directory ``root``."""
    return ObjectLease(root, ttl_s).acquire()
