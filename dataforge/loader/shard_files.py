"""The loader's only way to shard bytes: every file a stream's index names is checked
before ``streaming`` sees the stream, and every byte is read through a checked handle.

A dataset is hostile until checked. ``streaming.StreamingDataset`` decompresses and
downloads into ``local/<basename>`` with the names the index gives, so it is handed a
stream directory in the loader's cache that holds only a checked copy of ``index.json``
(:func:`dataforge.io.mds_index.parse_index`: shape, counts, names relative and inside,
no ``pkl``, every name once): it supplies the sample-id space and never reads or writes
a shard. Shards are made local here: a local dataset's raw shard is read where it is,
after its real path is proved inside the dataset; a compressed one is inflated into the
cache, bounded by the index's raw size; a remote one is downloaded into the cache with
streaming's own downloader. Before first use in a process a shard is checked: its size,
the index's hashes (unless ``verify_hashes`` is off), the header's sample count and offsets,
and every sample's column sizes. Reads are ``pread`` calls checked for short reads, not a
memory map: a shard truncated while open is a one-line error, not SIGBUS.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import numpy as np

from dataforge.io.mds import check_samples, shard_hash, shard_layout, shard_offsets
from dataforge.io.mds_index import (
    MAX_INDEX_BYTES,
    MDSCorruptError,
    MDSFormatError,
    inflate_zstd,
    parse_index,
    read_index_bytes,
    shard_file,
)

__all__ = ["ShardReader", "StreamFiles"]


class StreamFiles:
    """The checked index and shard files of one stream (``path``: a local directory or a
    remote URL), staged in the loader's stream directory ``local``."""

    def __init__(self, path: str, remote: bool, local: Path, verify_hashes: bool) -> None:
        self.path, self.remote, self.local = path, remote, Path(local)
        self.verify_hashes = verify_hashes
        self.src = None if remote else Path(path.removeprefix("file://")).expanduser()
        self._checked: dict[str, Path] = {}
        self._downloader: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_downloader": None}  # a client per process

    def stage_index(self) -> dict[str, Any]:
        """Check the stream's ``index.json`` and put its exact bytes in ``local``.

        Raises:
            FileNotFoundError: a local path without ``index.json``.
            MDSCorruptError: an index that is malformed or unsafe.
        """
        self.local.mkdir(parents=True, exist_ok=True)
        if self.remote:
            part = self._download("index.json", MAX_INDEX_BYTES)
            data, where = part.read_bytes(), f"{self.path.rstrip('/')}/index.json"
            part.unlink()
        else:
            if not (self.src / "index.json").exists():
                raise FileNotFoundError(
                    f"{self.src}: no index.json here; is this an MDS directory (OUT/mds)?"
                )
            data, where = read_index_bytes(self.src), str(self.src / "index.json")
        index = parse_index(data, where)
        if index.get("version") != 2:
            raise MDSFormatError(f"{where}: MDS index version {index.get('version')!r}; valid: 2")
        self._write("index.json", data)
        return index

    def raw_path(self, shard: dict[str, Any]) -> Path:
        """A checked local file holding the raw bytes of index entry ``shard``.

        Raises:
            MDSCorruptError: naming the shard file and what is wrong with it.
        """
        name = shard["raw_data"]["basename"]
        if name in self._checked:
            return self._checked[name]
        cached = self.local / name
        if cached.is_file() and not cached.is_symlink():
            path = cached  # written by this run after its check, never by the dataset
        elif not self.remote and os.path.lexists(self.src / name):
            path = shard_file(self.src, name)
            self._check_raw(_read_exact(path, shard["raw_data"], name), shard)
        else:
            path = self._stage_shard(shard)
        self._checked[name] = path
        return path

    def _stage_shard(self, shard: dict[str, Any]) -> Path:
        raw_info, zip_info = shard["raw_data"], shard.get("zip_data")
        info = zip_info or raw_info
        name = info["basename"]
        if self.remote:
            part = self._download(name, info["bytes"])
            try:
                data = _read_exact(part, info, name)
            finally:
                part.unlink()
        elif zip_info:
            data = _read_exact(shard_file(self.src, name), info, name)
        else:
            raise MDSCorruptError(f"shard {name!r} named by {self.src / 'index.json'} is missing")
        self._check_hashes(data, info, name)
        if zip_info:
            if shard["compression"].split(":")[0] != "zstd":
                raise MDSFormatError(
                    f"shard {name!r}: compression {shard['compression']!r}; valid: zstd"
                )
            data = inflate_zstd(data, raw_info["bytes"], name)
        self._check_raw(data, shard)
        return self._write(raw_info["basename"], data)

    def _check_hashes(self, data: bytes, info: dict[str, Any], name: str) -> None:
        if not self.verify_hashes:
            return
        for algo, expected in info.get("hashes", {}).items():
            try:
                digest = shard_hash(algo, data)
            except MDSFormatError as exc:
                raise MDSFormatError(f"shard {name!r}: {exc}") from None
            if digest != expected:
                raise MDSCorruptError(f"shard {name!r}: {algo} differs from the index's")

    def _check_raw(self, raw: bytes, shard: dict[str, Any]) -> None:
        name = shard["raw_data"]["basename"]
        self._check_hashes(raw, shard["raw_data"], name)
        try:
            offsets = shard_offsets(raw, shard["samples"])
            check_samples(np.frombuffer(raw, np.uint8), offsets, shard_layout(shard))
        except MDSCorruptError as exc:
            raise MDSCorruptError(f"shard {name!r}: {exc}") from None

    def _write(self, name: str, data: bytes) -> Path:
        """Write ``local/name`` atomically; ``name`` was checked relative and ``..``-free,
        and nothing in ``local`` is a symlink, so it stays inside (proved again here)."""
        target = self.local / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if not Path(os.path.realpath(target.parent)).is_relative_to(os.path.realpath(self.local)):
            raise MDSCorruptError(f"shard {name!r} would be written outside {self.local}")
        tmp = target.with_name(f".{target.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
            os.replace(tmp, target)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return target

    def _download(self, name: str, limit: int) -> Path:
        """Download ``<remote>/name`` to a fresh temporary file of ``local``."""
        from streaming.base.storage import CloudDownloader

        url = f"{self.path.rstrip('/')}/{name}"
        part = self.local / f".download-{os.getpid()}-{uuid.uuid4().hex[:8]}.part"
        try:
            if self._downloader is None:
                self._downloader = CloudDownloader.get(self.path)
            self._downloader.download(url, str(part))
        except Exception as exc:  # noqa: BLE001 - any client's error, named in one line
            part.unlink(missing_ok=True)
            raise OSError(f"{url}: download failed ({type(exc).__name__}: {exc})") from None
        if part.stat().st_size > limit:
            part.unlink()
            raise MDSCorruptError(f"{url}: {part.stat().st_size} bytes, more than {limit}")
        return part


def _read_exact(path: Path, info: dict[str, Any], name: str) -> bytes:
    """The bytes of ``path``, which must be exactly ``info['bytes']`` long (never more
    is read)."""
    with open(path, "rb") as f:
        data = f.read(info["bytes"] + 1)
    if len(data) != info["bytes"]:
        size = "more" if len(data) > info["bytes"] else str(len(data))
        raise MDSCorruptError(f"shard {name!r} has {size} bytes, index says {info['bytes']}")
    return data


class ShardReader:
    """Samples of one checked raw shard, read with ``pread``: a file that shrinks while
    open gives a one-line error naming it, where a memory map would raise SIGBUS."""

    def __init__(self, path: Path, shard: dict[str, Any]) -> None:
        self.name, self.size = shard["raw_data"]["basename"], shard["raw_data"]["bytes"]
        self.layout = shard_layout(shard)
        self.fd = os.open(path, os.O_RDONLY)
        try:
            n = shard["samples"]
            head = self.read(0, 4 * (n + 2))
            self.offsets = np.frombuffer(head, np.uint32, n + 1, 4).astype(np.int64)
            if self.offsets[-1] > self.size or np.any(np.diff(self.offsets) < 0):
                raise MDSCorruptError(f"shard {self.name!r} changed since it was checked")
        except BaseException:
            os.close(self.fd)
            raise

    def read(self, begin: int, length: int) -> bytes:
        """``length`` bytes at ``begin``, all of them or a one-line error."""
        data = os.pread(self.fd, length, begin)
        if len(data) != length:
            raise MDSCorruptError(
                f"shard {self.name!r} shrank while open: {os.fstat(self.fd).st_size} of its "
                f"{self.size} bytes are left"
            )
        return data

    def sample(self, index: int) -> bytes:
        begin = int(self.offsets[index])
        return self.read(begin, int(self.offsets[index + 1]) - begin)

    def whole(self) -> np.ndarray:
        return np.frombuffer(self.read(0, self.size), np.uint8)

    def close(self) -> None:
        os.close(self.fd)
