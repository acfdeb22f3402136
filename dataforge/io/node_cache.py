"""Models and tokenizers given as URIs: copied once per node into a local cache.

A KenLM model or a tokenizer directory is opened by libraries that want local files, so a
URI is fetched to ``<cache>/remote/<key>/<name>`` first. The key hashes the URI and the
listing (names, sizes, modification times): a changed object gets a new entry. An entry
appears atomically (downloaded beside, then renamed into place), so the actors of one node
that start together share one copy and never see a partial one.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

import pyarrow.fs as pafs

from dataforge.io.fs import StorageError, cache_dir_setting, filesystem, is_uri, storage_errors

__all__ = ["fetch_to_cache"]


def _cache_root() -> Path:
    configured = cache_dir_setting() or os.environ.get("DATAFORGE_CACHE_DIR")
    return Path(configured or Path.home() / ".cache" / "dataforge").expanduser() / "remote"


def fetch_to_cache(location: str, companions: tuple[str, ...] = ()) -> Path:
    """A local path for ``location``: itself if local, else a copy of the file or directory
    in this node's cache, made once. The cache entry is named by the URI and the listing
    (names, sizes, times), so a changed object is fetched again; it appears atomically
    (downloaded aside, then renamed), so concurrent actors of a node share one copy.

    Args:
        companions: suffixes of files fetched beside a file (``(".json",)``: its card).
    """
    if not is_uri(location):
        return Path(location)
    fs, path = filesystem(location)
    with storage_errors(location):
        info = fs.get_file_info(path)
        if info.type == pafs.FileType.NotFound:
            raise StorageError(f"{location}: not found")
        if info.type == pafs.FileType.File:
            files = [info] + [
                i
                for i in fs.get_file_info([path + suffix for suffix in companions])
                if i.type == pafs.FileType.File
            ]
        else:
            files = [
                i
                for i in fs.get_file_info(pafs.FileSelector(path, recursive=True))
                if i.type == pafs.FileType.File
            ]
        listing = "\n".join(f"{i.path}\t{i.size}\t{i.mtime_ns}" for i in files)
        key = hashlib.sha256(f"{location}\n{listing}".encode()).hexdigest()[:32]
        name = path.rstrip("/").rsplit("/", 1)[-1]
        dest = _cache_root() / key / name
        if dest.exists():
            return dest
        dest.parent.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=dest.parent.parent))
        try:
            for i in files:
                if info.type == pafs.FileType.File:  # the file and its companions, side by side
                    target = tmp / i.path.rsplit("/", 1)[-1]
                else:
                    target = tmp / name / i.path[len(path) :].lstrip("/")
                target.parent.mkdir(parents=True, exist_ok=True)
                with (
                    fs.open_input_stream(i.path, compression=None) as src,
                    open(target, "wb") as out,
                ):
                    shutil.copyfileobj(src, out, 1 << 20)
            try:
                os.rename(tmp, dest.parent)  # ours: tmp from mkdtemp; never replaces a full folder
            except OSError:
                if not dest.exists():  # not a lost race with another actor of this node
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)  # ours: made by mkdtemp above
    return dest
