"""Input globs expanded to real files, each once.

``glob.glob(..., recursive=True)`` follows symlinked folders under ``**`` without noticing
a loop: ``sub/up -> ..`` yields every file once per level until the kernel's ELOOP (41
copies), and two such links make the walk exponential. Here ``**`` is walked with
``os.walk(followlinks=True)`` that enters each real folder once, and every match is
de-duplicated by its real path, so a file is planned once whatever the links. Matching
follows ``glob``'s rules: ``*``/``?``/``[...]`` within one name, ``**`` any number of
folders, and names starting with ``.`` only match a pattern part that starts with ``.``.
"""

from __future__ import annotations

import fnmatch
import glob
import os
from pathlib import Path

__all__ = ["expand_glob", "may_match_below"]


def _part_matches(name: str, part: str) -> bool:
    if name.startswith(".") and not part.startswith("."):
        return False
    return fnmatch.fnmatchcase(name, part)


def _matches(names: list[str], parts: list[str]) -> bool:
    if not parts:
        return not names
    if parts[0] == "**":  # zero or more names, none of them hidden
        return any(
            _matches(names[i:], parts[1:])
            for i in range(len(names) + 1)
            if not any(n.startswith(".") for n in names[:i])
        )
    return bool(names) and _part_matches(names[0], parts[0]) and _matches(names[1:], parts[1:])


def _walk_recursive(root: Path, parts: list[str]) -> list[str]:
    found = []
    seen_dirs: set[tuple[int, int]] = set()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        st = os.stat(dirpath)
        if (st.st_dev, st.st_ino) in seen_dirs:
            dirnames[:] = []  # a folder reached again through a link: its files are planned
            continue
        seen_dirs.add((st.st_dev, st.st_ino))
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        rel = Path(dirpath).relative_to(root).parts
        found += [os.path.join(dirpath, f) for f in filenames if _matches([*rel, f], parts)]
    return found


def expand_glob(pattern: str) -> list[tuple[str, str]]:
    """(path, real path) of every file ``pattern`` matches, sorted by path, each real
    file once (the first path in that order)."""
    all_parts = Path(pattern).parts
    if "**" in all_parts:
        n_fixed = next(i for i, p in enumerate(all_parts) if glob.has_magic(p))
        root = Path(*all_parts[:n_fixed]) if n_fixed else Path(".")
        paths = _walk_recursive(root, list(all_parts[n_fixed:])) if root.is_dir() else []
    else:
        paths = glob.glob(pattern)
    seen: set[str] = set()
    files = []
    for path in sorted(paths):
        real = os.path.realpath(path)
        if real not in seen and os.path.isfile(real):
            seen.add(real)
            files.append((path, real))
    return files


def may_match_below(pattern: str, folder: str | Path) -> bool:
    """Whether ``pattern`` could match a file inside ``folder`` (now or once files are
    written there), comparing real paths."""
    parts = Path(pattern).parts
    n_fixed = next((i for i, p in enumerate(parts) if glob.has_magic(p)), len(parts))
    root = Path(os.path.realpath(Path(*parts[:n_fixed]) if n_fixed else "."))
    real = Path(os.path.realpath(folder))
    if not real.is_relative_to(root):
        return False
    names, rest = real.relative_to(root).parts, parts[n_fixed:]
    for i, name in enumerate(names):
        if i < len(rest) and rest[i] == "**":
            return True
        # the pattern's last part names the file, which would lie above or at ``folder``
        if i >= len(rest) - 1 or not _part_matches(name, rest[i]):
            return False
    return len(rest) > len(names) or (not rest and not names)
