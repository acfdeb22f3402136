"""One writer per run directory on object storage: a lease object with an expiry.

Object stores have no file locks, but S3 (and compatible servers) have conditional writes,
which make a lease safe without a clock shared by the writers' machines:

- **acquire**: ``PUT OUT/_lease.json`` with ``If-None-Match: *`` creates it only if absent.
  If present and its ``expires`` time has passed, ``PUT ... If-Match: <its ETag>`` takes it
  over; two writers racing to take over cannot both win, since the first PUT changes the ETag.
  A lease that has not expired is taken over the same way when its holder ran on this
  host and that process is gone (a run killed a moment ago need not wait out its lease).
- **renew**: a thread rewrites it every ``ttl/3`` seconds with ``If-Match`` on our last ETag.
  Each request is bounded (connect and read timeouts of ``ttl/12``, two attempts: at most
  ``ttl/3``), so a frozen endpoint cannot hold a renewal past the expiry. A conflict means
  someone took it over; a storage fault is retried. :meth:`verify` raises once the lease is
  lost, or once it has gone unrenewed so long that less than ``ttl/6`` of it is left: the
  writer stops before another could take it over. The runtime calls it before each commit
  step and before every write of its :class:`~dataforge.rundir.store.RunStore`.
- **release**: delete it, if it is still ours. :func:`release_lock` makes that best-effort
  while another error propagates, so the run's own error reaches the user.

Expiry compares the writer's wall clock with the reader's, so clocks must agree to well
within ``ttl`` (60 s by default): NTP-level skew is fine.
"""

from __future__ import annotations

import datetime
import json
import os
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from dataforge.io.fs import StorageError, filesystem, s3_endpoint, s3_region

__all__ = [
    "LEASE_NAME",
    "LeaseHeldError",
    "LeaseLostError",
    "ObjectLease",
    "acquire_object_lease",
    "lease_client_config",
    "release_lock",
]

LEASE_NAME = "_lease.json"
_CONFLICT = {"PreconditionFailed", "ConditionalRequestConflict", "412", "409"}


class LeaseHeldError(RuntimeError):
    """Another live writer holds the run directory."""


class LeaseLostError(StorageError):
    """Our lease was taken over, or went unrenewed so long that the writer stopped before it
    expired (a storage error: the run fails with its one line)."""


_LIVE_IDS: set[str] = set()
"""Ids of the leases this process holds now (a lease of this pid not in it was left by an
earlier run in this process whose release failed)."""


def lease_client_config(ttl_s: float):
    """botocore ``Config`` for the lease client: two attempts of at most ``ttl/12`` to
    connect and ``ttl/12`` per read, so one call ends within ``ttl/3`` (plus the retry's
    backoff, under a second) and a renewal fails well before the lease expires."""
    from botocore.config import Config

    step = max(ttl_s / 12, 0.5)
    return Config(
        connect_timeout=step,
        read_timeout=step,
        retries={"total_max_attempts": 2, "mode": "standard"},
    )


def _client(ttl_s: float):
    import boto3

    # A session of its own: boto3's default session keeps the credentials it resolved
    # first, and the lease must use the ones in force now, as the data's filesystem does.
    return boto3.session.Session().client(
        "s3",
        endpoint_url=s3_endpoint(),
        region_name=s3_region(),
        config=lease_client_config(ttl_s),
    )


def _holder_is_gone(held: dict[str, Any]) -> bool:
    """Whether the holder of ``held`` ran on this host and that process is gone (or is
    this process, which no longer holds it). Another host's holder cannot be checked."""
    if held.get("host") != socket.gethostname():
        return False
    try:
        pid = int(held["pid"])
    except (KeyError, TypeError, ValueError):
        return False
    if pid == os.getpid():
        return held.get("id") not in _LIVE_IDS
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # alive, another user's
    return False


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
        self._client = _client(ttl_s)
        self._etag: str | None = None
        self._lost: str | None = None
        self._valid_until = 0.0  # monotonic time the lease we last wrote expires
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

    def _put(self, **condition: str) -> None:
        """Write our record under ``condition``; on success the lease is ours for ``ttl``
        from the moment the request was sent."""
        sent = time.monotonic()
        self._etag = self._call("put_object", Body=self._body(), **condition)["ETag"]
        self._valid_until = sent + self.ttl_s

    def acquire(self) -> ObjectLease:
        """Take the lease, or raise :class:`LeaseHeldError` naming the live holder."""
        from botocore.exceptions import ClientError

        try:
            self._put(IfNoneMatch="*")
        except ClientError as exc:
            if _error_code(exc) not in _CONFLICT:
                raise
            current = self._call("get_object")
            held = json.loads(current["Body"].read())
            left = held.get("expires", 0) - time.time()
            if left > 0 and not _holder_is_gone(held):
                raise LeaseHeldError(
                    f"{self.uri}: the run directory is being written by host {held.get('host')} "
                    f"pid {held.get('pid')} (lease valid {left:.0f} s more); one writer per "
                    "output"
                ) from None
            try:  # expired, or its holder is gone: take it over, unless another just did
                self._put(IfMatch=current["ETag"])
            except ClientError as again:
                raise LeaseHeldError(
                    f"{self.uri}: another writer took over the expired lease just now"
                ) from again
            self.previous = held
        _LIVE_IDS.add(self.holder["id"])
        self._thread = threading.Thread(target=self._renew_loop, daemon=True, name="lease")
        self._thread.start()
        return self

    def _renew_loop(self) -> None:
        wait = self.ttl_s / 3
        while not self._stop.wait(wait):
            try:
                self.renew()
                wait = self.ttl_s / 3
            except LeaseLostError:
                return  # verify() reports it on the main thread
            except StorageError:
                wait = self.ttl_s / 12  # a fault: retry soon; verify() stops the writer in time
                if self._expiring():
                    return

    def renew(self) -> None:
        """Extend the lease by ``ttl``.

        Raises:
            LeaseLostError: another writer rewrote the lease object.
            StorageError: the storage did not answer in time or refused (retried by the
                renewing thread while the lease lasts).
        """
        from botocore.exceptions import ClientError

        try:
            self._put(IfMatch=self._etag)
        except ClientError as exc:
            self._lost = f"{self.uri}: lease lost, another writer may own the output ({exc})"
            raise LeaseLostError(self._lost) from exc

    def _expiring(self) -> bool:
        """Whether less than ``ttl/6`` of the lease is left unrenewed (marks it lost)."""
        left = self._valid_until - time.monotonic()
        if self._lost is None and left < self.ttl_s / 6:
            self._lost = (
                f"{self.uri}: the lease could not be renewed within {self.ttl_s * 5 / 6:g} s "
                f"(ttl {self.ttl_s:g} s); stopped writing before it expires"
            )
        return self._lost is not None

    def verify(self) -> None:
        """Raise :class:`LeaseLostError` if the lease was lost or is about to expire
        unrenewed; the runtime calls it before each commit step and each write."""
        if self._expiring():
            raise LeaseLostError(self._lost)

    def release(self) -> None:
        """Stop renewing and delete the lease object if it is still ours.

        Raises:
            StorageError: the storage did not answer (the lease is left to expire).
        """
        from botocore.exceptions import ClientError

        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        _LIVE_IDS.discard(self.holder["id"])
        if self._lost or self._etag is None:
            return
        try:
            held = json.loads(self._call("get_object")["Body"].read())
        except ClientError:
            return
        if held.get("id") == self.holder["id"]:
            self._call("delete_object")
        self._etag = None

    def __enter__(self) -> ObjectLease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def acquire_object_lease(root: str, ttl_s: float = 60.0) -> ObjectLease:
    """Hold the single-writer lease of the object-store run directory ``root``."""
    return ObjectLease(root, ttl_s).acquire()


def release_lock(lock: Any, log: Callable[[str], None]) -> None:
    """Release ``lock`` (a lease or a local run lock). While another error propagates (call
    it from a ``finally``), a failure to release is logged, not raised, so that error and
    its trace reach the user; the lease is then left to expire or to be taken over."""
    propagating = sys.exc_info()[1]
    try:
        lock.release()
    except (StorageError, OSError) as exc:
        if propagating is None:
            raise
        log(f"could not release the run's lock while failing: {exc}")
