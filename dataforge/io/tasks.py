"""Input tasks: one input file of one source, or one split of it (the unit of work, commit
and resume), planned from the pipeline's sources, and the bytes each one reads."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import BinaryIO, Protocol

from dataforge.io.files import match_files
from dataforge.io.streams import open_binary, open_byte_range
from dataforge.typed_config import ConfigError

__all__ = ["InputTask", "open_task", "plan_input_tasks"]


@dataclass(frozen=True)
class InputTask:
    """One input file of one source, or one split of it; the unit of work, commit and
    resume. A split (:mod:`dataforge.io.splits`) numbers its records from ``first_record``
    so that ids are those of the whole file."""

    task_id: str
    source: str
    path: str
    relpath: str
    bytes: int
    """Size of the whole file."""
    mtime_ns: int = 0
    """Modification time at planning; with the real path and size, what a resume checks."""
    offset: int = 0
    """Line files: byte offset of the split's first line."""
    length: int | None = None
    """Line files: bytes in the split (None: to the end of the file)."""
    first_record: int = 0
    """Lines (or parquet rows) of the file before the split."""
    row_groups: tuple[int, ...] | None = None
    """Parquet: the split's row groups (None: all)."""
    known_ids: tuple[str, ...] = ()
    """Ids that an earlier split of the file holds: records with them are ``duplicate_id``."""


class _NamedPath(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def path(self) -> str: ...


class PlannedInputs(Protocol):
    """What planning reads of the pipeline config (:class:`dataforge.config.PipelineConfig`,
    which sits above io)."""

    @property
    def inputs(self) -> Sequence[_NamedPath]: ...
    def locate(self, path: str) -> str: ...


def plan_input_tasks(config: PlannedInputs) -> list[InputTask]:
    """Expand every source's path/glob (local or a URI) into sorted tasks
    (:func:`~dataforge.io.files.match_files`).

    Raises:
        ConfigError: a source's path matches no file, or two sources match the same file.
        StorageError: a URI's storage cannot be reached.
    """
    tasks = []
    owner: dict[str, str] = {}
    for s_idx, source in enumerate(config.inputs):
        try:
            files = match_files(config.locate(source.path))
        except FileNotFoundError:
            raise ConfigError(
                f"inputs[{s_idx}] ({source.name}): path {source.path!r} matches no file"
            ) from None
        for f_idx, file in enumerate(files):
            if file.path in owner:
                raise ConfigError(
                    f"inputs[{s_idx}] ({source.name}): file {file.path} is also read by source "
                    f"{owner[file.path]!r}; a file may belong to one source only"
                )
            owner[file.path] = source.name
            tasks.append(
                InputTask(
                    task_id=f"{s_idx:03d}-{f_idx:06d}",
                    source=source.name,
                    path=file.path,
                    relpath=file.relpath,
                    bytes=file.bytes,
                    mtime_ns=file.mtime_ns,
                )
            )
    return tasks


def open_task(task: InputTask) -> BinaryIO:
    """The task's bytes: the whole (decompressed) file, or the split's byte range."""
    if task.length is None:
        return open_binary(task.path)
    return open_byte_range(task.path, task.offset, task.length)
