"""Which files an input path names, and what each one's id prefix is.

One rule for every reader of documents (the pipeline's planner, ``lm train``,
``tokenizer train``): a path or glob (``**`` recursive) expands to its regular files in
sorted order; each file's ``relpath`` is its path relative to the glob's fixed prefix
directory (the basename when the pattern names one file), and a derived record id is
``<source>/<relpath>:<line>``.

A file name that is not UTF-8 is read all the same: its ``path`` keeps the bytes (Python's
surrogate escapes; the run's JSON files write them as ``\\udcXX`` escapes that read back
to the same name), and its ``relpath``, which ids are made of, shows each byte that is not
UTF-8 as ``\\xNN`` (:func:`printable_name`), so an id is always valid text.
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from pathlib import Path

from dataforge.io.fs import glob_uri, is_uri
from dataforge.io.globbing import expand_glob

__all__ = [
    "MatchedFile",
    "glob_root",
    "match_files",
    "printable_name",
]


@dataclass(frozen=True)
class MatchedFile:
    """One file of an input path: real path, id-forming relative path, size, mtime."""

    path: str
    relpath: str
    bytes: int
    mtime_ns: int = 0


def printable_name(name: str) -> str:
    """``name`` with each byte that was not UTF-8 (a surrogate escape) as ``\\xNN``."""
    return os.fsencode(name).decode("utf-8", "backslashreplace")


def glob_root(pattern: str) -> Path:
    """The directory a glob's matches are relative to: its longest prefix without magic."""
    fixed = []
    for part in Path(pattern).parts:
        if glob.has_magic(part):
            break
        fixed.append(part)
    root = Path(*fixed) if fixed else Path(".")
    return root if root.is_dir() else root.parent


def match_files(pattern: str) -> list[MatchedFile]:
    """The regular files ``pattern`` (a path or recursive glob, local or a URI) matches,
    sorted, each real file once (:func:`~dataforge.io.globbing.expand_glob`: symlinked or
    looping folders never repeat a file); ``path`` is the real path (or the URI).

    Raises:
        FileNotFoundError: nothing matches.
        StorageError: a URI's storage cannot be used (unreachable, denied, no bucket).
    """
    if is_uri(pattern):
        found = [MatchedFile(e.path, e.relpath, e.size, e.mtime_ns) for e in glob_uri(pattern)]
        if not found:
            raise FileNotFoundError(f"input {pattern!r} matches no file")
        return found
    files = expand_glob(pattern)
    if not files:
        raise FileNotFoundError(f"input {pattern!r} matches no file")
    root = glob_root(pattern)
    matched = []
    for file, real, stat in files:
        relpath = (
            Path(file).relative_to(root).as_posix()
            if Path(file).is_relative_to(root)
            else Path(file).name
        )
        matched.append(MatchedFile(real, printable_name(relpath), stat.st_size, stat.st_mtime_ns))
    return matched
