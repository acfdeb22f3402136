"""An MDS dataset's ``index.json`` and shard files, checked before a byte is decoded.

Everything here treats the dataset as hostile: the index must have the shape
``streaming`` writes (every key, type and count checked), a shard path must be a plain
relative name that stays inside the dataset directory after symlinks are resolved, a
``pkl`` column is refused (unpickling runs code), and a compressed shard is inflated only
up to the raw size its index entry declares (never what the zstd frame itself claims),
under an absolute cap. A path without an index is :class:`MDSFormatError` (not a
dataset, exit 2); anything malformed or unsafe is :class:`MDSCorruptError` (exit 1).
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path, PurePosixPath
from typing import Any

import zstandard

__all__ = [
    "MAX_INDEX_BYTES",
    "MAX_SHARD_BYTES",
    "MDSCorruptError",
    "MDSFormatError",
    "dataset_dir",
    "inflate_zstd",
    "parse_index",
    "read_index",
    "read_index_bytes",
    "shard_file",
]

MAX_INDEX_BYTES = 64 << 20
MAX_SHARD_BYTES = 1 << 31
"""The largest raw shard read, whatever an index says (a shard addresses samples with
uint32 offsets; dataforge writes ``output.size_limit`` <= this)."""


class MDSFormatError(ValueError):
    """A path that is not an MDS dataset, or one in a form this reader does not support."""


class MDSCorruptError(MDSFormatError):
    """An MDS dataset whose index or shards are malformed, inconsistent or unsafe."""


def dataset_dir(path: Path) -> Path:
    """The MDS directory of ``path``: itself, or ``path/mds`` for a run directory."""
    path = Path(path)
    if (path / "index.json").exists():
        return path
    if (path / "mds" / "index.json").exists():
        return path / "mds"
    if (path / "manifest.json").exists():
        raise MDSFormatError(
            f"{path}: run has no MDS index (failed, incomplete, or not MDS output)"
        )
    raise MDSFormatError(f"{path}: no index.json here or in {path / 'mds'}")


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _check_file_info(i: int, key: str, info: Any) -> None:
    where = f"shard {i}: {key}"
    if not isinstance(info, dict):
        raise MDSCorruptError(f"{where} must be a mapping, got {type(info).__name__}")
    name = info.get("basename")
    if not isinstance(name, str) or name in ("", ".") or name.endswith("/"):
        raise MDSCorruptError(f"{where}.basename {name!r} is not a file name")
    rel = PurePosixPath(name)
    if rel.is_absolute() or ".." in rel.parts or "\x00" in name:
        raise MDSCorruptError(f"shard {i}: path {name!r} escapes the dataset directory")
    if not _is_count(info.get("bytes")) or info["bytes"] > MAX_SHARD_BYTES:
        raise MDSCorruptError(
            f"{where}.bytes {info.get('bytes')!r}; valid: an integer 0 to {MAX_SHARD_BYTES}"
        )
    hashes = info.get("hashes", {})
    if not isinstance(hashes, dict) or not all(isinstance(v, str) for v in hashes.values()):
        raise MDSCorruptError(f"{where}.hashes must map algorithm names to hex digests")


def _check_shard(i: int, shard: Any) -> None:
    if not isinstance(shard, dict):
        raise MDSCorruptError(
            f"shard {i}: index entry must be a mapping, not {type(shard).__name__}"
        )
    if shard.get("format") != "mds":
        raise MDSFormatError(
            f"shard {i}: format {shard.get('format')!r} is not supported (only mds)"
        )
    names, encodings, sizes = (
        shard.get(k) for k in ("column_names", "column_encodings", "column_sizes")
    )
    if not (
        isinstance(names, list) and isinstance(encodings, list) and isinstance(sizes, list)
        and len(names) == len(encodings) == len(sizes)
        and all(isinstance(n, str) for n in names) and all(isinstance(e, str) for e in encodings)
        and all(s is None or (_is_count(s) and s > 0) for s in sizes)
    ):  # fmt: skip
        raise MDSCorruptError(
            f"shard {i}: column_names, column_encodings and column_sizes must be equal-length "
            "lists of names, encodings and positive sizes or null"
        )
    if "pkl" in encodings:
        raise MDSCorruptError(
            f"shard {i}: refusing a pkl column (unpickling can run arbitrary code)"
        )
    if not _is_count(shard.get("samples")):
        raise MDSCorruptError(f"shard {i}: samples {shard.get('samples')!r} is not a count >= 0")
    _check_file_info(i, "raw_data", shard.get("raw_data"))
    if shard.get("zip_data") is not None:
        _check_file_info(i, "zip_data", shard["zip_data"])
        if not isinstance(shard.get("compression"), str):
            raise MDSCorruptError(f"shard {i}: zip_data without a compression name")


def _check_names(shards: list[dict[str, Any]]) -> None:
    """Every file an index names is named once, and none is the index itself (a reader
    that inflates a shard into a cache would otherwise overwrite another file there)."""
    seen: dict[str, int] = {"index.json": -1}
    for i, shard in enumerate(shards):
        for key in ("raw_data", "zip_data"):
            info = shard.get(key)
            if not info:
                continue
            name = str(PurePosixPath(info["basename"]))
            if name in seen:
                other = "the index itself" if seen[name] < 0 else f"shard {seen[name]}"
                raise MDSCorruptError(f"shard {i}: {key}.basename {name!r} also names {other}")
            seen[name] = i


def parse_index(data: bytes, where: str) -> dict[str, Any]:
    """Parse and check the bytes of an ``index.json`` (``where`` names it in errors).

    Raises:
        MDSCorruptError: too large, not UTF-8 JSON, or any entry malformed or unsafe.
    """
    if len(data) > MAX_INDEX_BYTES:
        raise MDSCorruptError(f"{where}: index of {len(data)} bytes; at most {MAX_INDEX_BYTES}")
    try:
        index = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise MDSCorruptError(f"{where}: unreadable index ({type(exc).__name__}: {exc})") from None
    if not isinstance(index, dict) or not isinstance(index.get("shards"), list):
        raise MDSCorruptError(f"{where}: an MDS index is a mapping with a 'shards' list")
    try:
        for i, shard in enumerate(index["shards"]):
            _check_shard(i, shard)
        _check_names(index["shards"])
    except MDSFormatError as exc:
        raise type(exc)(f"{where}: {exc}") from None
    return index


def read_index(root: Path) -> dict[str, Any]:
    """Read ``root/index.json`` and check every entry (shape, counts, paths, no pkl).

    Raises:
        MDSCorruptError: unreadable, not UTF-8 JSON, or any entry malformed or unsafe.
    """
    return parse_index(read_index_bytes(root), str(Path(root) / "index.json"))


def read_index_bytes(root: Path) -> bytes:
    """The bytes of ``root/index.json``, a regular file of at most ``MAX_INDEX_BYTES``.

    Raises:
        MDSCorruptError: missing, not a regular file, too large or unreadable.
    """
    path = Path(root) / "index.json"
    try:
        if not path.is_file() or path.stat().st_size > MAX_INDEX_BYTES:
            raise MDSCorruptError(f"{path}: not a regular file of at most {MAX_INDEX_BYTES} bytes")
        return path.read_bytes()
    except OSError as exc:
        raise MDSCorruptError(f"{path}: unreadable index ({type(exc).__name__}: {exc})") from None


def shard_file(root: Path, basename: str) -> Path:
    """The shard file ``basename`` of dataset ``root``, refusing one that resolves (through
    any symlink) outside the dataset directory or is not a regular file.

    Raises:
        MDSCorruptError: escapes the dataset, or is missing or not a regular file.
    """
    real_root = Path(os.path.realpath(root))
    real = Path(os.path.realpath(Path(root) / basename))
    if not real.is_relative_to(real_root):
        raise MDSCorruptError(f"shard {basename!r} resolves outside the dataset directory")
    if not real.is_file():
        raise MDSCorruptError(f"shard {basename!r} is missing or not a regular file")
    return real


def inflate_zstd(data: bytes, raw_bytes: int, name: str) -> bytes:
    """Decompress a zstd shard to exactly ``raw_bytes`` (its index entry's raw size),
    reading at most one byte more: a frame that claims a bigger size is corruption, not an
    allocation."""
    limit = min(raw_bytes, MAX_SHARD_BYTES)
    chunks, total = [], 0
    try:
        with zstandard.ZstdDecompressor().stream_reader(
            io.BytesIO(data), read_across_frames=True
        ) as reader:
            while total <= limit:
                chunk = reader.read(min(1 << 20, limit + 1 - total))
                if not chunk:
                    break
                chunks.append(chunk)
                total += len(chunk)
    except zstandard.ZstdError as exc:
        raise MDSCorruptError(f"shard {name!r}: not valid zstd ({exc})") from None
    if total != raw_bytes:
        more = "more" if total > limit else f"{total}"
        raise MDSCorruptError(
            f"shard {name!r}: inflates to {more} bytes, index says raw size {raw_bytes}"
        )
    return b"".join(chunks)
