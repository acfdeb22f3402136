"""The filesystem seam: inputs, outputs, models and tokenizers are local paths or URIs.

A *location* is a local path or a URI. ``s3://bucket/key`` goes to pyarrow's
``S3FileSystem`` with the endpoint and region of the pipeline's ``storage:`` section, else
the standard environment (``AWS_ENDPOINT_URL``, ``AWS_REGION``); credentials always come
from the environment (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ...). Other schemes
pyarrow knows (``gs://``, ``hdfs://``, ``file://``) go through ``FileSystem.from_uri``; a
scheme pyarrow does not know uses fsspec when a package for it is installed. Local paths
keep Python's own file objects (their speed is what the readers were measured with).

Every storage failure becomes :class:`StorageError`, one line naming the location and the
cause (unreachable endpoint, access denied, missing bucket, unknown scheme).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import functools
import glob
import os
import re
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.fs as pafs

__all__ = [
    "FileEntry",
    "StorageConfig",
    "StorageError",
    "cache_dir_setting",
    "check_location",
    "configure",
    "describe",
    "exists",
    "filesystem",
    "glob_uri",
    "is_uri",
    "join",
    "open_input_file",
    "open_input_stream",
    "redact_urls",
    "remote_in_use",
    "s3_endpoint",
    "s3_region",
    "scratch_dir",
    "size_and_mtime",
    "storage_errors",
]

_LOCAL = pafs.LocalFileSystem()
_READ_BUFFER = 8 << 20
_CREDENTIAL_VARS = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
)


@dataclasses.dataclass(frozen=True)
class StorageConfig:
    """Object storage (``s3://`` URIs). Credentials come only from the standard environment
    (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``), never from YAML,
    so they never land in ``manifest.json``."""

    endpoint_url: str | None = None
    """S3-compatible endpoint, e.g. ``http://127.0.0.1:9000`` (default: ``AWS_ENDPOINT_URL``)."""
    region: str | None = None
    """Default: ``AWS_REGION`` / ``AWS_DEFAULT_REGION``, else ``us-east-1``."""
    cache_dir: str | None = None
    """Local cache for models and tokenizers given as URIs, copied once per node
    (default: ``DATAFORGE_CACHE_DIR``, else ``~/.cache/dataforge``)."""

    def __post_init__(self) -> None:
        url = self.endpoint_url
        if url is not None and not (url.startswith("http://") or url.startswith("https://")):
            raise ValueError(
                f"endpoint_url {redact_urls(url)!r} must start with http:// or https://"
            )
        if url is not None and redact_urls(url) != url:
            raise ValueError(
                f"endpoint_url {redact_urls(url)!r} holds credentials; they come only from "
                "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, never from the pipeline file"
            )


_URL_CREDENTIALS = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@]+@")


def redact_urls(text: str) -> str:
    """``text`` with the credentials of every URL in it replaced: ``https://user:secret@host``
    becomes ``https://***@host``. Applied to every message that may quote an endpoint."""
    return _URL_CREDENTIALS.sub(r"\1***@", text)


_settings = StorageConfig()


class StorageError(OSError):
    """A location that cannot be used; the message is one line naming it and the cause,
    with the credentials of any URL in it redacted (:func:`redact_urls`)."""

    def __init__(self, message: object) -> None:
        super().__init__(redact_urls(str(message)))


@dataclass(frozen=True)
class FileEntry:
    """One file matched by :func:`glob_files`."""

    path: str
    """The URI."""
    relpath: str
    """Relative to the pattern's fixed prefix (part of derived record ids)."""
    size: int
    mtime_ns: int


def configure(storage: StorageConfig) -> None:
    """Use ``storage`` (the pipeline's ``storage:`` section) for every location opened in
    this process; the driver and each worker call it with the run's config."""
    global _settings
    _settings = storage


def is_uri(location: str | os.PathLike) -> bool:
    return "://" in str(location)


def join(base: str, *parts: str) -> str:
    """``base/part/...`` for a local path or a URI."""
    if is_uri(base):
        return "/".join([base.rstrip("/"), *parts])
    return os.path.join(base, *parts)


def cache_dir_setting() -> str | None:
    """``storage.cache_dir`` of the configured pipeline (see :mod:`dataforge.io.node_cache`)."""
    return _settings.cache_dir


def s3_endpoint() -> str | None:
    """The S3 endpoint URL in force (``storage.endpoint_url``, else the environment),
    without any ``user:secret@`` part: credentials come from the key variables, and a
    client that never sees them in the URL cannot echo them in an error."""
    url = (
        _settings.endpoint_url
        or os.environ.get("AWS_ENDPOINT_URL_S3")
        or os.environ.get("AWS_ENDPOINT_URL")
    )
    if not url:
        return url
    parts = urlparse(url)
    return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()


def s3_region() -> str:
    return (
        _settings.region
        or os.environ.get("AWS_REGION")
        or os.environ.get("AWS_DEFAULT_REGION")
        or "us-east-1"
    )


@functools.lru_cache(maxsize=8)
def _s3(endpoint: str | None, region: str, credentials: tuple) -> pafs.S3FileSystem:
    # ``credentials`` (the environment's) only keys the cache: pyarrow reads them itself.
    kwargs = {}
    if endpoint:
        url = urlparse(endpoint)
        kwargs = {"endpoint_override": url.netloc, "scheme": url.scheme}
    # Few, short retries: an unreachable endpoint or a wrong key must fail in seconds.
    return pafs.S3FileSystem(
        region=region,
        connect_timeout=5,
        request_timeout=60,
        retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=3),
        **kwargs,
    )


_REMOTE_USED: set[str] = set()


def remote_in_use() -> bool:
    """Whether this process has made a client of remote storage (S3 and the like): its
    connection pool and SDK threads must not be shared with a forked child
    (:mod:`dataforge.runtime.local_pool`)."""
    return bool(_REMOTE_USED)


def filesystem(location: str) -> tuple[pafs.FileSystem, str]:
    """The filesystem of ``location`` and the path within it.

    Raises:
        StorageError: no filesystem is installed for the URI's scheme.
    """
    location = str(location)
    if not is_uri(location):
        return _LOCAL, os.path.abspath(os.path.expanduser(location))
    scheme, _, rest = location.partition("://")
    if scheme != "file":
        _REMOTE_USED.add(scheme)
    if scheme == "s3":
        credentials = tuple(os.environ.get(k) for k in _CREDENTIAL_VARS)
        return _s3(s3_endpoint(), s3_region(), credentials), rest
    if scheme == "file":
        return _LOCAL, rest
    try:
        return pafs.FileSystem.from_uri(location)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError, OSError) as exc:
        arrow_error = str(exc).splitlines()[0]
    try:
        import fsspec

        return pafs.PyFileSystem(pafs.FSSpecHandler(fsspec.filesystem(scheme))), rest
    except (ImportError, ValueError) as exc:
        raise StorageError(
            f"{location}: no filesystem for scheme {scheme!r} is installed (pyarrow: "
            f"{arrow_error}; fsspec: {exc}); use s3://, a local path, or install its fsspec "
            "package"
        ) from None


def describe(location: str, exc: BaseException) -> str:
    """One line naming ``location`` and the cause of a storage failure (credentials in a
    URL redacted: :func:`redact_urls`)."""
    return redact_urls(_describe(location, " ".join(str(exc).split())))


def _describe(location: str, text: str) -> str:
    if any(k in text for k in ("NETWORK_CONNECTION", "Could not connect", "curlCode")):
        return f"{location}: cannot reach the storage endpoint {s3_endpoint() or '(AWS default)'}"
    if "NO_SUCH_BUCKET" in text or "bucket does not exist" in text.lower():
        return f"{location}: bucket {urlparse(location).netloc!r} does not exist"
    denied = ("ACCESS_DENIED", "INVALID_ACCESS_KEY", "SIGNATURE_DOES_NOT_MATCH", "403", "401")
    if any(k in text for k in denied):
        return (
            f"{location}: access denied (check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY): "
            f"{text[:160]}"
        )
    return f"{location}: {text[:240]}"


@contextmanager
def storage_errors(location: str) -> Iterator[None]:
    """Turn an OSError raised by a filesystem into a one-line :class:`StorageError`."""
    try:
        yield
    except StorageError:
        raise
    except OSError as exc:
        raise StorageError(describe(location, exc)) from exc


def check_location(location: str) -> None:
    """Fail fast if ``location`` cannot be reached: its scheme has a filesystem, and for
    ``s3://`` the endpoint answers, the credentials are accepted and the bucket exists.

    Raises:
        StorageError: one line naming ``location`` and the cause.
    """
    if not is_uri(location):
        return
    fs, path = filesystem(location)
    if not isinstance(fs, pafs.S3FileSystem):
        return
    bucket = path.split("/", 1)[0]
    with storage_errors(location):
        # Listing (not HEAD) so that a wrong key and a missing bucket say which they are.
        fs.get_file_info(pafs.FileSelector(bucket, recursive=False))


def exists(location: str) -> bool:
    fs, path = filesystem(location)
    with storage_errors(location):
        return fs.get_file_info(path).type != pafs.FileType.NotFound


def size_and_mtime(location: str) -> tuple[int, int]:
    """Size in bytes and modification time (ns) of the file at ``location``.

    Raises:
        FileNotFoundError: there is no such file.
        StorageError: the storage cannot be used.
    """
    if not is_uri(location):
        stat = os.stat(location)
        return stat.st_size, stat.st_mtime_ns
    fs, path = filesystem(location)
    with storage_errors(location):
        info = fs.get_file_info(path)
    if info.type != pafs.FileType.File:
        raise FileNotFoundError(f"{location}: not found")
    return info.size, info.mtime_ns or 0


def open_input_stream(location: str) -> BinaryIO:
    """A sequential binary reader."""
    if not is_uri(location):
        return open(location, "rb")  # noqa: SIM115 - the caller closes it
    fs, path = filesystem(location)
    with storage_errors(location):
        # buffered: unbuffered, every small read of gzip or readline is one ranged GET
        return fs.open_input_stream(path, compression=None, buffer_size=_READ_BUFFER)


def open_input_file(location: str) -> BinaryIO:
    """A random-access binary reader (parquet)."""
    if not is_uri(location):
        return open(location, "rb")  # noqa: SIM115 - the caller closes it
    fs, path = filesystem(location)
    with storage_errors(location):
        return fs.open_input_file(path)


def _glob_regex(pattern: str) -> re.Pattern[str]:
    """``glob``'s rules on ``/``-separated keys: ``*`` and ``?`` stay within a component,
    ``**`` spans any number of them."""
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        else:
            chunk = re.match(r"[^*]+|\*", pattern[i:]).group(0)
            out.append("[^/]*" if chunk == "*" else fnmatch.translate(chunk)[4:-3])
            i += len(chunk)
    return re.compile("".join(out) + r"\Z")


def glob_uri(pattern: str) -> list[FileEntry]:
    """Files matching a URI path or glob (``*``, ``?``, ``[..]``, ``**``), sorted; a pattern
    without wildcards names one file. Local paths: :func:`dataforge.io.files.match_files`.

    Raises:
        StorageError: nothing matched because the storage cannot be used (bucket missing...).
    """
    fs, path = filesystem(pattern)
    scheme = pattern.split("://", 1)[0]
    parts = path.split("/")
    fixed = []
    for part in parts:
        if glob.has_magic(part):
            break
        fixed.append(part)
    entries = []
    with storage_errors(pattern):
        if len(fixed) == len(parts):
            info = fs.get_file_info(path)
            if info.type == pafs.FileType.File:
                entries.append(FileEntry(pattern, parts[-1], info.size, info.mtime_ns or 0))
        else:
            root = "/".join(fixed)
            regex = _glob_regex(path)
            selector = pafs.FileSelector(root, recursive=True, allow_not_found=True)
            for info in fs.get_file_info(selector):
                if info.type == pafs.FileType.File and regex.match(info.path):
                    rel = info.path[len(root) :].lstrip("/")
                    uri = f"{scheme}://{info.path}"
                    entries.append(FileEntry(uri, rel, info.size, info.mtime_ns or 0))
    if not entries:
        check_location(pattern)  # nothing matched: say so if the bucket itself is missing
    return sorted(entries, key=lambda e: e.path)


def scratch_dir(prefix: str) -> Path:
    """A fresh local directory for staging object-store writes (the caller removes it)."""
    root = Path(tempfile.gettempdir()) / "dataforge-staging"
    root.mkdir(parents=True, exist_ok=True)
    path = root / f"{prefix}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    path.mkdir()
    return path
