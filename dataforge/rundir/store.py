"""The run directory ``OUT`` as the commit protocol sees it, on local disk or object storage.

The runtime commits with a handful of operations; each has a local and an object-store
form with the same guarantee (a reader never sees a half-written part as committed):

=================  ===================================  ====================================
operation          local filesystem                     object store (no rename)
=================  ===================================  ====================================
``staging``        hidden sibling dir (same filesystem) fresh local scratch dir
``commit_dir``     ``os.replace`` into place            delete the prefix, upload every file;
                                                        the caller's marker, written after,
                                                        is what makes it committed
``write_json``     temp file + fsync + rename           one PUT (objects appear whole)
``move_dir``       ``os.replace``                       server-side copy, a ``.moved`` marker,
                                                        then delete the source
=================  ===================================  ====================================

Paths given to a :class:`RunStore` are ``/``-separated and relative to ``OUT``. A store may
carry a write guard (:meth:`RunStore.guard_writes`: the run's lease check), called before
every write; it stays with the driver's store (a copy sent to a worker has none).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

import pyarrow.fs as pafs

from dataforge.io.fs import (
    StorageError,
    describe,
    filesystem,
    is_uri,
    join,
    scratch_dir,
    storage_errors,
)
from dataforge.io.sinks import json_bytes, write_json_atomic

__all__ = ["RunStore"]

_MOVED = ".moved"


class RunStore:
    """Files under one root (``OUT``), a local directory or an object-store prefix."""

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = str(root) if is_uri(root) else os.path.abspath(root)
        self.fs, self._base = filesystem(self.root)
        self.local = isinstance(self.fs, pafs.LocalFileSystem)
        self._guard: Callable[[], None] | None = None

    def guard_writes(self, check: Callable[[], None] | None) -> None:
        """Call ``check`` before every write (it raises to stop the writer: a lost lease)."""
        self._guard = check

    def _check(self) -> None:
        if self._guard is not None:
            self._guard()

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_guard": None}

    def __repr__(self) -> str:
        return f"RunStore({self.root!r})"

    def location(self, rel: str = "") -> str:
        """The full path or URI of ``rel``."""
        return join(self.root, rel) if rel else self.root

    def _path(self, rel: str) -> str:
        return f"{self._base.rstrip('/')}/{rel}" if rel else self._base

    def _info(self, rel: str) -> pafs.FileInfo:
        with storage_errors(self.location(rel)):
            return self.fs.get_file_info(self._path(rel))

    # -- reading ---------------------------------------------------------------------
    def exists(self, rel: str = "") -> bool:
        """Whether ``rel`` is a file, or a directory (object store: a non-empty prefix)."""
        return self._info(rel).type != pafs.FileType.NotFound

    def names(self, rel: str = "") -> list[str]:
        """Names directly under ``rel`` (empty if it does not exist)."""
        selector = pafs.FileSelector(self._path(rel), recursive=False, allow_not_found=True)
        with storage_errors(self.location(rel)):
            return sorted(i.base_name for i in self.fs.get_file_info(selector))

    def read_json(self, rel: str) -> Any | None:
        """The JSON document at ``rel``, or None if there is none."""
        if self.local:
            if not Path(self._path(rel)).is_file():
                return None
            return json.loads(self.read_bytes(rel))
        try:  # one request, not HEAD + GET: markers are read for every task
            with self.fs.open_input_stream(self._path(rel), compression=None) as f:
                return json.loads(f.read())
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StorageError(describe(self.location(rel), exc)) from exc

    def read_bytes(self, rel: str) -> bytes:
        with (
            storage_errors(self.location(rel)),
            self.fs.open_input_stream(self._path(rel), compression=None) as f,
        ):
            return f.read()

    def open_file(self, rel: str) -> BinaryIO:
        """A random-access reader (parquet, numpy)."""
        if self.local:
            return open(self._path(rel), "rb")  # noqa: SIM115 - the caller closes it
        return io.BytesIO(self.read_bytes(rel))

    @contextmanager
    def local_file(self, rel: str) -> Iterator[Path]:
        """A local path holding the file ``rel`` while the block runs (object store: a
        downloaded copy, removed after)."""
        if self.local:
            yield Path(self._path(rel))
            return
        scratch = scratch_dir("fetch")
        try:
            target = scratch / rel.rsplit("/", 1)[-1]
            with storage_errors(self.location(rel)):
                pafs.copy_files(
                    self._path(rel), str(target), source_filesystem=self.fs,
                    destination_filesystem=pafs.LocalFileSystem(),
                )  # fmt: skip
            yield target
        finally:
            shutil.rmtree(scratch, ignore_errors=True)  # ours: a fresh scratch_dir made above

    def download(self, rel: str, dest: Path) -> None:
        """Copy the file or directory ``rel`` to the local path ``dest``."""
        dest.parent.mkdir(parents=True, exist_ok=True)
        with storage_errors(self.location(rel)):
            pafs.copy_files(
                self._path(rel), str(dest), source_filesystem=self.fs,
                destination_filesystem=pafs.LocalFileSystem(),
            )  # fmt: skip

    # -- writing ---------------------------------------------------------------------
    def write_json(self, rel: str, obj: Any) -> None:
        """Write a JSON document that readers see whole or not at all."""
        self._check()
        if self.local:
            path = Path(self._path(rel))
            path.parent.mkdir(parents=True, exist_ok=True)
            write_json_atomic(path, obj)
            return
        data = json_bytes(obj)
        with (
            storage_errors(self.location(rel)),
            self.fs.open_output_stream(self._path(rel), compression=None) as f,
        ):
            f.write(data)

    def write_bytes(self, rel: str, data: bytes) -> None:
        """Write a small file that readers see whole or not at all."""
        self._check()
        if self.local:
            path = Path(self._path(rel))
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:8]}")
            try:
                tmp.write_bytes(data)
                os.replace(tmp, path)
            finally:
                tmp.unlink(missing_ok=True)
            return
        with (
            storage_errors(self.location(rel)),
            self.fs.open_output_stream(self._path(rel), compression=None) as f,
        ):
            f.write(data)

    def remove(self, rel: str) -> None:
        """Remove the file or directory ``rel`` (nothing if absent; a symlink is unlinked,
        never followed)."""
        self._check()
        if self.local:
            path = Path(self._path(rel))
            if path.is_symlink() or path.is_file():
                path.unlink()
            elif path.is_dir():
                shutil.rmtree(path)  # ours: likewise (_work, owned entries)
            return
        info = self._info(rel)
        with storage_errors(self.location(rel)):
            if info.type == pafs.FileType.File:
                self.fs.delete_file(self._path(rel))
            elif info.type == pafs.FileType.Directory:
                self.fs.delete_dir(self._path(rel))

    @contextmanager
    def staging(self, rel: str) -> Iterator[Path]:
        """A local directory to build ``rel`` in before :meth:`commit_dir`; removed after
        the block whatever happens."""
        if self.local:
            dest = Path(self._path(rel))
            dest.parent.mkdir(parents=True, exist_ok=True)
            tmp = dest.parent / f".{dest.name}.tmp-{uuid.uuid4().hex[:8]}"
            tmp.mkdir()
        else:
            tmp = scratch_dir(rel.replace("/", "_"))
        try:
            yield tmp
        finally:
            shutil.rmtree(tmp, ignore_errors=True)  # ours: made above (unique name, mkdir)

    def remove_stale_staging(self, rel: str) -> int:
        """Remove the staging directories of ``rel`` an attempt killed before its ``finally``
        left (``.<name>.tmp-*`` beside it; local run dirs only: elsewhere staging is scratch
        space). For work done once at a time, like a barrier's planning; returns how many."""
        self._check()
        if not self.local:
            return 0
        dest = Path(self._path(rel))
        stale = sorted(dest.parent.glob(f".{dest.name}.tmp-*")) if dest.parent.is_dir() else []
        for path in stale:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)  # ours: a staging dir of the claimed run dir (name above)
        return len(stale)

    def commit_dir(self, tmp: Path, rel: str) -> None:
        """Put the staged directory ``tmp`` at ``rel``, replacing what was there. On an object
        store this is not atomic: the caller's marker, written after, commits it."""
        self._check()
        if self.local:
            dest = Path(self._path(rel))
            if dest.exists():  # an earlier attempt got this far but died before its marker
                shutil.rmtree(dest)  # ours: a part of the claimed run dir an attempt left
            os.replace(tmp, dest)
            return
        self.remove(rel)
        with storage_errors(self.location(rel)):
            pafs.copy_files(
                str(tmp), self._path(rel), source_filesystem=pafs.LocalFileSystem(),
                destination_filesystem=self.fs,
            )  # fmt: skip

    def move_dir(self, src: str, dest: str) -> None:
        """Move directory ``src`` to ``dest``, idempotent under a kill at any point: rerun, it
        finishes the move (object store: copy, a ``<src>.moved`` marker, delete)."""
        self._check()
        if self.local:
            s, d = Path(self._path(src)), Path(self._path(dest))
            if s.exists():
                if d.exists():
                    shutil.rmtree(d)  # ours: a move of the claimed run dir a kill cut short
                d.parent.mkdir(parents=True, exist_ok=True)
                os.replace(s, d)
            return
        if self.exists(src + _MOVED):
            self.remove(src)
            return
        if not self.exists(src):
            return
        self.remove(dest)
        selector = pafs.FileSelector(self._path(src), recursive=True)
        with storage_errors(self.location(src)):
            for info in self.fs.get_file_info(selector):
                if info.type == pafs.FileType.File:
                    rel = info.path[len(self._path(src)) :].lstrip("/")
                    self.fs.copy_file(info.path, f"{self._path(dest)}/{rel}")
        self.write_json(src + _MOVED, {"to": dest})
        self.remove(src)

    def copy_file(self, src: str, dest: str) -> None:
        self._check()
        with storage_errors(self.location(src)):
            if self.local:
                Path(self._path(dest)).parent.mkdir(parents=True, exist_ok=True)
            self.fs.copy_file(self._path(src), self._path(dest))
