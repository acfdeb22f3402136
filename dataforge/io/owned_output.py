"""Outputs a command writes at a path the user names (``-o``, ``--out``): what may be
replaced there, and how it is written.

A writer owns only what it made. An existing path is replaced only if it is this writer's
own previous output: a folder holding the output marker (``.dataforge-output``, written
into every folder made here) or a file the writer recognises by its content (``is_ours``).
Anything else (a user's file or folder, a device, a fifo, a symlink, a folder where a file
is expected) is refused with :class:`OutputPathError`, one line naming the path and what
to do, and left as it was.

Writes are atomic next to the target: a file goes to a temporary file in the same folder,
is flushed to disk and renamed over the target; a folder is built in a sibling temporary
folder and renamed into place, the old one (proved ours) moved aside first and then
removed. An interrupt or a failure at any point removes the temporary and leaves the
target as it was (or absent, between the two renames of a folder swap), never half
written. Temporaries are named ``.<name>.tmp-*``, so a kill never leaves anything that
looks complete.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

__all__ = [
    "OUTPUT_MARKER",
    "OutputPathError",
    "check_dir_target",
    "check_file_target",
    "is_owned_dir",
    "owned_dir",
    "write_file",
]

OUTPUT_MARKER = ".dataforge-output"


class OutputPathError(ValueError):
    """The output path holds something this writer did not make, or cannot hold output."""


def _refuse(path: Path, what: str, why: str) -> OutputPathError:
    return OutputPathError(
        f"{path}: {why}; {what} replaces only its own previous output: choose another path"
    )


def _check_parent(path: Path, what: str, make_parents: bool) -> None:
    parent = path.parent
    if parent.is_dir():
        return
    if parent.exists() or parent.is_symlink():
        raise OutputPathError(f"{path}: {parent} is not a folder; choose another path for {what}")
    if not make_parents:
        raise OutputPathError(
            f"{path}: folder {parent} does not exist; create it or choose another path for {what}"
        )
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a component is a file, or no permission
        raise OutputPathError(f"{path}: cannot create folder {parent} ({exc.strerror})") from None


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISLNK, "a symlink"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISFIFO, "a fifo"), (stat.S_ISSOCK, "a socket")):  # fmt: skip
        if test(mode):
            return name
    return "not a regular file"


def _existing_mode(path: Path, what: str, make_parents: bool) -> int | None:
    """The ``st_mode`` of ``path`` (not followed), or None when it is absent and its folder
    exists (made first with ``make_parents``)."""
    try:
        return os.lstat(path).st_mode
    except FileNotFoundError:
        _check_parent(path, what, make_parents)
        return None
    except NotADirectoryError:
        raise OutputPathError(
            f"{path}: {path.parent} is not a folder; choose another path"
        ) from None


def check_file_target(
    path: str | Path, what: str, is_ours: Callable[[Path], bool], make_parents: bool = False
) -> Path:
    """Check that ``what`` may write the file ``path``: absent, or a regular file
    ``is_ours`` recognises. Returns the path.

    Raises:
        OutputPathError: ``path`` is a folder, a symlink, a device, a fifo or a socket, a
            regular file that is not ours, or its folder is missing (``make_parents``
            False) or not a folder.
    """
    path = Path(path)
    mode = _existing_mode(path, what, make_parents)
    if mode is None:
        return path
    if not stat.S_ISREG(mode):
        raise _refuse(path, what, f"is {_kind(mode)}, not a file {what} wrote")
    if not is_ours(path):
        raise _refuse(path, what, f"exists and is not a file {what} wrote")
    return path


def write_file(
    path: str | Path,
    data: bytes | str,
    what: str,
    is_ours: Callable[[Path], bool],
    make_parents: bool = False,
) -> Path:
    """Write ``data`` (str: UTF-8) to ``path`` atomically, after
    :func:`check_file_target`. Returns the path.

    Raises:
        OutputPathError: see :func:`check_file_target`.
    """
    path = check_file_target(path, what, is_ours, make_parents)
    body = data.encode("utf-8") if isinstance(data, str) else data
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.tmp-", dir=path.parent)
    except OSError as exc:
        raise _cannot_write(path, exc) from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(body)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        check_file_target(path, what, is_ours)  # the path may have changed meanwhile
        os.replace(tmp, path)  # ours: tmp from mkstemp, path checked on the line above
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)  # ours: made by mkstemp above
        if isinstance(exc, OSError):  # a full disk, a read-only folder
            raise _cannot_write(path, exc) from None
        raise
    return path


def _cannot_write(path: Path, exc: OSError) -> OutputPathError:
    return OutputPathError(
        f"{path}: cannot write ({exc.strerror or exc}); free space, fix the permissions or "
        "choose another path"
    )


def is_owned_dir(path: Path) -> bool:
    """``path`` is a folder made by :func:`owned_dir` (it holds the output marker)."""
    marker = path / OUTPUT_MARKER
    return not marker.is_symlink() and marker.is_file()


def check_dir_target(
    path: str | Path,
    what: str,
    legacy: Callable[[Path], bool] | None = None,
    make_parents: bool = True,
) -> Path:
    """Check that ``what`` may write the folder ``path``: absent, empty, holding the
    output marker, or recognised by ``legacy`` (this writer's output from before
    markers). Returns the path.

    Raises:
        OutputPathError: ``path`` is not a folder (a file, a symlink, a device), or a
            non-empty folder this writer did not make.
    """
    path = Path(path)
    mode = _existing_mode(path, what, make_parents)
    if mode is None:
        return path
    if not stat.S_ISDIR(mode):
        raise _refuse(path, what, f"is {_kind(mode)}, not a folder {what} wrote")
    if is_owned_dir(path) or not any(path.iterdir()) or (legacy is not None and legacy(path)):
        return path
    raise _refuse(path, what, f"is a folder that {what} did not write (no {OUTPUT_MARKER})")


@contextlib.contextmanager
def owned_dir(
    path: str | Path,
    what: str,
    legacy: Callable[[Path], bool] | None = None,
    make_parents: bool = True,
) -> Iterator[Path]:
    """Build the folder ``path`` atomically: yields a sibling temporary folder (already
    holding the output marker) to fill; on a clean exit it replaces ``path`` (checked by
    :func:`check_dir_target` before and again at the swap), on any exception it is
    removed and ``path`` is left as it was.

    Raises:
        OutputPathError: see :func:`check_dir_target`.
    """
    path = check_dir_target(path, what, legacy, make_parents)
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
    except OSError as exc:
        raise _cannot_write(path, exc) from None
    try:
        tmp.chmod(0o755)
        (tmp / OUTPUT_MARKER).write_text(json.dumps({"dataforge_output": what}) + "\n", "utf-8")
        yield tmp
        _swap(tmp, check_dir_target(path, what, legacy))
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)  # ours: made by mkdtemp above
        raise


def _swap(new: Path, path: Path) -> None:
    """Put folder ``new`` at ``path`` (absent, empty, or checked to be ours)."""
    try:
        os.rename(new, path)  # ours: new from mkdtemp; path absent or empty (checked)
        return
    except OSError:
        if not path.is_dir() or not any(path.iterdir()):
            raise
    # rename(2) replaces only an empty folder: the old one (ours) is moved aside onto a
    # fresh empty folder of our own, the new one renamed in, then the old one removed.
    old = Path(tempfile.mkdtemp(prefix=f".{path.name}.old-", dir=path.parent))
    try:
        os.rename(path, old)  # ours: path checked by the caller, old the empty mkdtemp
    except BaseException:
        old.rmdir()  # ours: still the empty folder made above
        raise
    try:
        os.rename(new, path)  # ours: path moved aside just above
    except BaseException:
        os.rename(old, path)  # ours: putting the checked output back
        raise
    shutil.rmtree(old)  # ours: the checked output, under the name made above
