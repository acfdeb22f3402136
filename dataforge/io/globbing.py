"""Input globs expanded to real files, each once.

``glob.glob(..., recursive=True)`` follows symlinked folders under ``**`` without noticing
a loop: ``sub/up -> ..`` yields every file once per level until the kernel's ELOOP (41
copies), and two such links make the walk exponential. Here ``**`` is walked with
``os.walk(followlinks=True)`` that enters each real folder once, and every match is
de-duplicated by its real path, so a file is planned once whatever the links. Matching
follows ``glob``'s rules: ``*``/``?``/``[...]`` within one name, ``**`` any number of
folders, and names starting with ``.`` only match a pattern part that starts with ``.``.

:func:`walk_reaches` answers whether that walk, following every link, enters a folder
(``validate`` refuses an output a source's glob would read).
"""

from __future__ import annotations

import glob
import os
import re
import stat
from pathlib import Path

__all__ = ["expand_glob", "may_match_below", "walk_reaches"]


def _part_matches(name: str, part: str) -> bool:
    return re.fullmatch(_part_regex(part), name) is not None


def _class_end(part: str, start: int) -> int:
    """Index of the ``]`` closing the ``[`` at ``start`` (glob's rules), else -1."""
    j = start + 1
    if j < len(part) and part[j] == "!":
        j += 1
    if j < len(part) and part[j] == "]":
        j += 1
    return part.find("]", j)


def _part_regex(part: str) -> str:
    """One pattern part as a regex over one name (``*`` and ``?`` never cross ``/``)."""
    out = [] if part.startswith(".") else [r"(?!\.)"]
    i = 0
    while i < len(part):
        c = part[i]
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[" and (end := _class_end(part, i)) > 0:
            body = part[i + 1 : end]
            negate = body.startswith("!")
            body = body[1:] if negate else body
            body = body.replace("\\", r"\\").replace("[", r"\[")
            if not negate and body.startswith("^"):
                body = "\\" + body
            out.append("[" + ("^" if negate else "") + body + "]")
            i = end
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def _pattern_regex(parts: list[str]) -> re.Pattern[str]:
    """The relative part of a pattern as one regex over ``/``-joined names: ``**`` is zero
    or more names, none hidden."""
    pieces = []
    for k, part in enumerate(parts):
        last = k == len(parts) - 1
        if part == "**":
            pieces.append(r"(?:(?!\.)[^/]*(?:/(?!\.)[^/]*)*)?" if last else r"(?:(?!\.)[^/]*/)*")
        else:
            pieces.append(_part_regex(part) + ("" if last else "/"))
    return re.compile("".join(pieces))


def _walk_recursive(root: Path, parts: list[str]) -> list[tuple[str, str]]:
    """(path, path with the folder's real path) of the files under ``root`` that match."""
    regex = _pattern_regex(parts)
    found = []
    seen_dirs: set[tuple[int, int]] = set()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        st = os.stat(dirpath)
        if (st.st_dev, st.st_ino) in seen_dirs:
            dirnames[:] = []  # a folder reached again through a link: its files are planned
            continue
        seen_dirs.add((st.st_dev, st.st_ino))
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        rel = os.path.relpath(dirpath, root)
        prefix = "" if rel == "." else rel + "/"
        real_dir = os.path.realpath(dirpath)
        found += [
            (os.path.join(dirpath, f), os.path.join(real_dir, f))
            for f in filenames
            if regex.fullmatch(prefix + f)
        ]
    return found


def _with_real_dirs(paths: list[str]) -> list[tuple[str, str]]:
    real_dirs: dict[str, str] = {}
    out = []
    for path in paths:
        head, name = os.path.split(path)
        if head not in real_dirs:
            real_dirs[head] = os.path.realpath(head or ".")
        out.append((path, os.path.join(real_dirs[head], name)))
    return out


def expand_glob(pattern: str) -> list[tuple[str, str, os.stat_result]]:
    """(path, real path, stat) of every regular file ``pattern`` matches, sorted by path,
    each real file once (the first path in that order)."""
    all_parts = Path(pattern).parts
    if "**" in all_parts:
        n_fixed = next(i for i, p in enumerate(all_parts) if glob.has_magic(p))
        root = Path(*all_parts[:n_fixed]) if n_fixed else Path(".")
        pairs = _walk_recursive(root, list(all_parts[n_fixed:])) if root.is_dir() else []
    else:
        pairs = _with_real_dirs(glob.glob(pattern))
    seen: set[str] = set()
    files = []
    for path, real in sorted(pairs):
        if os.path.islink(real):  # the folder is resolved; only the file itself may be a link
            real = os.path.realpath(real)
        if real in seen:
            continue
        try:
            st = os.stat(real)
        except OSError:  # a dangling link
            continue
        if stat.S_ISREG(st.st_mode):
            seen.add(real)
            files.append((path, real, st))
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


def _prefix_may_match(rest: tuple[str, ...], names: tuple[str, ...]) -> bool:
    """Whether a file below the folders ``names`` (relative to the pattern's fixed root)
    could match the pattern parts ``rest`` (``**``: any number of names, none hidden)."""
    if not rest:
        return False
    if rest[0] == "**":
        if _prefix_may_match(rest[1:], names):
            return True
        return bool(names) and not names[0].startswith(".") and _prefix_may_match(rest, names[1:])
    if not names:
        return True
    return _part_matches(names[0], rest[0]) and _prefix_may_match(rest[1:], names[1:])


def _leads_into(rest: tuple[str, ...], names: tuple[str, ...], real: str, target: str) -> bool:
    """Whether the walk, at folder ``names`` whose real path is ``real``, reads (or would
    read, once written) files in or below ``target``."""
    if real == target or Path(real).is_relative_to(target):
        return _prefix_may_match(rest, names)
    if Path(target).is_relative_to(real):
        return _prefix_may_match(rest, names + Path(target).relative_to(real).parts)
    return False


def walk_reaches(pattern: str, folder: str | Path) -> str | None:
    """The path through which the walk of ``pattern``, following symlinked folders (and
    dangling links, which lead there once their target exists), would read files in or
    below ``folder``; None if it never would. Compares real paths, walking only the
    folders the pattern can match."""
    parts = Path(pattern).parts
    n_fixed = next((i for i, p in enumerate(parts) if glob.has_magic(p)), len(parts))
    root = Path(*parts[:n_fixed]) if n_fixed else Path(".")
    rest = tuple(parts[n_fixed:])
    target = os.path.realpath(folder)
    if not rest or not root.is_dir():
        return None  # a plain path names one file: its real path is checked as an input
    seen_dirs: set[tuple[int, int]] = set()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        st = os.stat(dirpath)
        if (st.st_dev, st.st_ino) in seen_dirs:
            dirnames[:] = []
            continue
        seen_dirs.add((st.st_dev, st.st_ino))
        rel = os.path.relpath(dirpath, root)
        names = () if rel == "." else Path(rel).parts
        if _leads_into(rest, names, os.path.realpath(dirpath), target):
            return dirpath
        for name in filenames:
            path = os.path.join(dirpath, name)
            if os.path.islink(path) and not os.path.exists(path):
                if _leads_into(rest, (*names, name), os.path.realpath(path), target):
                    return path
        dirnames[:] = sorted(d for d in dirnames if _prefix_may_match(rest, (*names, d)))
    return None
