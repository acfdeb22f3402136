"""MosaicML MDS samples, written and read without importing ``streaming``.

The one place that knows the MDS byte layout: the sink writes with :class:`MDSShardWriter`,
``dataforge inspect`` and the tokenizer's run-directory input read with
:func:`iter_samples`, and the loader decodes single samples (:func:`decode_sample`) and
whole ``num_tokens`` columns (:func:`int_column`) from raw shard bytes.

Writing: ``import streaming`` loads torch and transformers (about 7 s per process here), which every
Ray actor of the final segment paid before writing its first record: on small machines
that start-up dominated the run. This writer produces the same bytes as
``streaming.MDSWriter`` (index entries and shard files; ``tests/io/test_mds_writer.py``
compares both byte for byte) for the encodings dataforge writes; any other compression
falls back to ``MDSWriter`` itself.

Shard layout (``MDSWriter.encode_joint_shard``): ``uint32 n | uint32 offsets[n+1] |
config JSON | samples``; a sample is ``uint32 size`` per variable-size column, then the
column payloads in sorted column order.

Reading checks the index and shard files first (:mod:`dataforge.io.mds_index`: shape,
paths inside the dataset, no ``pkl``, bounded inflation), then each shard's header against
its index entry, and each sample's column sizes against its bytes.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import xxhash

from dataforge.io.mds_index import (
    MDSCorruptError,
    MDSFormatError,
    dataset_dir,
    inflate_zstd,
    read_index,
    shard_file,
)

__all__ = [
    "MDSCorruptError",
    "MDSFormatError",
    "MDSShardWriter",
    "check_samples",
    "dataset_dir",
    "decode_sample",
    "decode_value",
    "int_column",
    "iter_samples",
    "iter_shard_samples",
    "read_index",
    "shard_bytes",
    "shard_hash",
    "shard_layout",
    "shard_offsets",
    "supports",
]

_SCALARS = {
    "int8": np.int8, "int16": np.int16, "int32": np.int32, "int64": np.int64,
    "uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32, "uint64": np.uint64,
    "float16": np.float16, "float32": np.float32, "float64": np.float64,
}  # fmt: skip
_FIXED_SCALARS = {"int32", "uint16", "uint32", "uint64", "int16", "uint8", "int8", "float32"}
_NDARRAY_DTYPES = {"uint8", "int8", "uint16", "int16", "float16", "uint32", "int32", "float32",
                   "uint64", "int64", "float64"}  # fmt: skip


def supports(columns: dict[str, str], compression: str | None) -> bool:
    """Whether this writer can produce these columns and compression."""
    if compression and compression.split(":")[0] != "zstd":
        return False
    for enc in columns.values():
        if enc in ("str", "bytes", "json", "int") or enc in _SCALARS:
            continue
        parts = enc.split(":")
        if parts[0] == "ndarray" and len(parts) == 2 and parts[1] in _NDARRAY_DTYPES:
            continue
        return False
    return True


def _encode(encoding: str, value: Any) -> bytes:
    if encoding == "str":
        return value.encode("utf-8")
    if encoding == "bytes":
        return bytes(value)
    if encoding == "json":
        return json.dumps(value.tolist() if isinstance(value, np.ndarray) else value).encode(
            "utf-8"
        )
    if encoding == "int":
        return np.int64(value).tobytes()
    if encoding in _SCALARS:
        return _SCALARS[encoding](value).tobytes()
    dtype = encoding.split(":")[1]
    arr = np.asarray(value)
    if arr.dtype.name != dtype:
        raise ValueError(f"wrong dtype for {encoding}: {arr.dtype.name}")
    if arr.size == 0 or arr.ndim == 0 or min(arr.shape) <= 0:
        raise ValueError(f"{encoding} cannot hold an empty or 0-d array")
    biggest = max(arr.shape)
    code, shape_dtype = ((0, np.uint8) if biggest < 1 << 8 else (1, np.uint16) if biggest < 1 << 16
                         else (2, np.uint32) if biggest < 1 << 32 else (3, np.uint64))  # fmt: skip
    return (
        bytes([(arr.ndim << 2) | code])
        + np.asarray(arr.shape, shape_dtype).tobytes()
        + arr.tobytes()
    )


def shard_hash(algo: str, data: bytes) -> str:
    """Hex digest of ``data`` with an MDS index hash name (``xxh64``, ``sha1``, ...)."""
    if algo.startswith("xxh") and hasattr(xxhash, algo):
        return getattr(xxhash, algo)(data).hexdigest()
    if algo in hashlib.algorithms_available:
        return hashlib.new(algo, data).hexdigest()
    raise MDSFormatError(f"hash {algo!r} is not supported")


class MDSShardWriter:
    """Write samples to ``out_dir`` as MDS shards plus ``index.json`` (local only)."""

    extra_bytes_per_sample = 4

    def __init__(
        self,
        out_dir: Path,
        columns: dict[str, str],
        *,
        compression: str | None,
        hashes: list[str],
        size_limit: int | None,
    ) -> None:
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        if os.listdir(self.out_dir):
            raise FileExistsError(f"{self.out_dir} is not empty")
        self.names = sorted(columns)
        self.encodings = [columns[n] for n in self.names]
        self.sizes = [_SCALARS[e]().nbytes if e in _SCALARS else 8 if e == "int" else None
                      for e in self.encodings]  # fmt: skip
        self.compression = compression or None
        self.level = int(compression.split(":")[1]) if compression and ":" in compression else 3
        self.hashes = list(hashes)
        self.size_limit = size_limit
        self.config = {
            "version": 2, "format": "mds", "compression": self.compression, "hashes": self.hashes,
            "size_limit": size_limit, "column_names": self.names,
            "column_encodings": self.encodings, "column_sizes": self.sizes,
        }  # fmt: skip
        self.config_data = json.dumps(self.config, sort_keys=True).encode("utf-8")
        self.shards: list[dict[str, Any]] = []
        self._reset()

    def _reset(self) -> None:
        self.samples: list[bytes] = []
        self.shard_size = 4 + 4 + len(self.config_data)

    def write(self, sample: dict[str, Any]) -> None:
        sizes, data = [], []
        for name, enc, size in zip(self.names, self.encodings, self.sizes, strict=True):
            datum = _encode(enc, sample[name])
            if size is None:
                sizes.append(len(datum))
            data.append(datum)
        encoded = np.array(sizes, np.uint32).tobytes() + b"".join(data)
        new_size = len(encoded) + self.extra_bytes_per_sample
        if self.size_limit and self.size_limit < self.shard_size + new_size:
            self._flush()
            self._reset()
        self.samples.append(encoded)
        self.shard_size += new_size

    def _flush(self) -> None:
        n = np.uint32(len(self.samples))
        offsets = np.array([0] + [len(s) for s in self.samples]).cumsum().astype(np.uint32)
        offsets += len(n.tobytes()) + len(offsets.tobytes()) + len(self.config_data)
        raw = n.tobytes() + offsets.tobytes() + self.config_data + b"".join(self.samples)
        raw_name = f"shard.{len(self.shards):05}.mds"
        raw_info = {"basename": raw_name, "bytes": len(raw),
                    "hashes": {a: shard_hash(a, raw) for a in self.hashes}}  # fmt: skip
        zip_info = None
        data, name = raw, raw_name
        if self.compression:
            import zstd  # the compressor streaming itself uses, for identical bytes

            data, name = zstd.compress(raw, self.level), f"{raw_name}.zstd"
            zip_info = {"basename": name, "bytes": len(data),
                        "hashes": {a: shard_hash(a, data) for a in self.hashes}}  # fmt: skip
        with open(self.out_dir / name, "wb") as f:
            f.write(data)
        self.shards.append({"samples": len(self.samples), "raw_data": raw_info,
                            "zip_data": zip_info, **self.config})  # fmt: skip

    def finish(self) -> None:
        """Flush the last shard and write ``index.json``."""
        if self.samples:
            self._flush()
            self._reset()
        with open(self.out_dir / "index.json", "w") as f:
            json.dump({"version": 2, "shards": self.shards}, f, sort_keys=True)


# -- reading ----------------------------------------------------------------------------


def shard_bytes(root: Path, shard: dict[str, Any]) -> bytes:
    """The raw (decompressed) bytes of index entry ``shard`` (checked by :func:`read_index`),
    exactly its declared raw size.

    Raises:
        MDSCorruptError: the file escapes the dataset, has another size, or inflates to
            another size than the index says.
        MDSFormatError: a compression this reader does not support.
    """
    raw_info, zip_info = shard["raw_data"], shard.get("zip_data")
    info = zip_info or raw_info
    path = shard_file(root, info["basename"])
    if path.stat().st_size != info["bytes"]:
        raise MDSCorruptError(
            f"shard {info['basename']!r} has {path.stat().st_size} bytes, index says {info['bytes']}"
        )
    data = path.read_bytes()
    if not zip_info:
        return data
    if shard["compression"].split(":")[0] != "zstd":
        raise MDSFormatError(f"compression {shard['compression']!r} is not supported")
    return inflate_zstd(data, raw_info["bytes"], zip_info["basename"])


def decode_value(encoding: str, data: bytes) -> Any:
    """One column value from its MDS bytes (scalars as Python numbers)."""
    if encoding == "str":
        return data.decode("utf-8")
    if encoding == "json":
        return json.loads(data.decode("utf-8"))
    if encoding.startswith("ndarray"):
        # MDS ndarray payloads carry a dtype/shape header unless the encoding fixes both.
        from streaming.base.format.mds.encodings import mds_decode

        return mds_decode(encoding, data)
    if encoding in ("int", "int64"):
        return int(np.frombuffer(data, np.int64)[0])
    if encoding == "float64":
        return float(np.frombuffer(data, np.float64)[0])
    if encoding in _FIXED_SCALARS:
        return np.frombuffer(data, np.dtype(encoding))[0].item()
    if encoding == "bytes":
        return data
    raise MDSFormatError(f"column encoding {encoding!r} is not supported")


def decode_sample(
    sample: bytes, layout: tuple[list, list, list], columns: tuple[str, ...] | None = None
) -> dict[str, Any]:
    """Decode one sample's bytes; ``layout`` is (column names, encodings, sizes) of its
    shard (a size is None for a variable-size column). ``columns`` limits what is decoded."""
    names, encodings, sizes = layout
    n_var = sum(1 for s in sizes if not s)
    var_sizes = iter(np.frombuffer(sample, np.uint32, n_var, 0).tolist())
    position = 4 * n_var
    record = {}
    for name, encoding, size in zip(names, encodings, sizes, strict=True):
        length = size or next(var_sizes)
        if position + length > len(sample):
            raise MDSCorruptError(f"column {name!r} runs past the end of its sample")
        if columns is None or name in columns:
            record[name] = decode_value(encoding, bytes(sample[position : position + length]))
        position += length
    return record


def shard_layout(shard: dict[str, Any]) -> tuple[list, list, list]:
    """(column names, encodings, sizes) of an index entry."""
    return shard["column_names"], shard["column_encodings"], shard["column_sizes"]


def shard_offsets(raw: bytes, samples: int) -> np.ndarray:
    """The sample offsets of a raw shard, checked: the header holds ``samples`` (its index
    entry's count), and the offsets rise within the shard.

    Raises:
        MDSCorruptError: a header that disagrees with the index or points outside.
    """
    if len(raw) < 8:
        raise MDSCorruptError(f"shard of {len(raw)} bytes has no header")
    n = int(np.frombuffer(raw, np.uint32, 1, 0)[0])
    if n != samples or len(raw) < 4 * (n + 2):
        raise MDSCorruptError(f"shard header says {n} samples, index says {samples}")
    offsets = np.frombuffer(raw, np.uint32, n + 1, 4).astype(np.int64)
    if offsets[0] < 4 * (n + 2) or offsets[-1] > len(raw) or np.any(np.diff(offsets) < 0):
        raise MDSCorruptError("shard header's sample offsets point outside the shard")
    return offsets


def check_samples(data: np.ndarray, offsets: np.ndarray, layout: tuple[list, list, list]) -> None:
    """Every sample of a raw shard (uint8 array, checked ``offsets``) is exactly its column
    sizes long, and fixed-size columns have their encoding's size: after this, column
    reads (:func:`int_column`, :func:`decode_sample`) stay inside their sample.

    Raises:
        MDSCorruptError: naming the first sample or column that disagrees.
    """
    names, encodings, sizes = layout
    for name, enc, size in zip(names, encodings, sizes, strict=True):
        width = 8 if enc == "int" else _SCALARS[enc]().nbytes if enc in _SCALARS else None
        if width is not None and size != width:
            raise MDSCorruptError(f"column {name!r} ({enc}) has size {size}, not {width}")
    n_var = sum(1 for s in sizes if not s)
    lengths = np.diff(offsets)
    short = np.flatnonzero(lengths < 4 * n_var)
    if short.size:
        raise MDSCorruptError(f"sample {int(short[0])}: too short for its column sizes")
    total = np.full(len(lengths), sum(s for s in sizes if s) + 4 * n_var, np.int64)
    if n_var and len(lengths):
        headers = offsets[:-1, None] + 4 * np.arange(n_var)[None, :]
        var = data[(headers[..., None] + np.arange(4)).reshape(-1)].view("<u4")
        total += var.reshape(-1, n_var).astype(np.int64).sum(axis=1)
    wrong = np.flatnonzero(total != lengths)
    if wrong.size:
        i = int(wrong[0])
        raise MDSCorruptError(
            f"sample {i}: columns sum to {int(total[i])} bytes, the sample has {int(lengths[i])}"
        )


def iter_shard_samples(raw: bytes, shard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every sample of one raw shard, in order.

    Raises:
        MDSCorruptError: a malformed header or a sample that does not decode.
    """
    offsets = shard_offsets(raw, shard["samples"])
    layout = shard_layout(shard)
    for i in range(len(offsets) - 1):
        try:
            yield decode_sample(raw[offsets[i] : offsets[i + 1]], layout)
        except MDSCorruptError as exc:
            raise MDSCorruptError(f"sample {i}: {exc}") from None
        except (ValueError, TypeError, UnicodeDecodeError, IndexError, StopIteration) as exc:
            raise MDSCorruptError(f"sample {i}: {type(exc).__name__}: {exc}") from None


def iter_samples(path: Path) -> Iterator[dict[str, Any]]:
    """Every sample of the dataset at ``path`` (run dir or MDS dir), in order.

    Raises:
        MDSFormatError: not a dataset; MDSCorruptError: a malformed index or shard
            (the message names the shard).
    """
    root = dataset_dir(path)
    for i, shard in enumerate(read_index(root)["shards"]):
        try:
            yield from iter_shard_samples(shard_bytes(root, shard), shard)
        except MDSCorruptError as exc:
            raise MDSCorruptError(f"{root}: shard {i}: {exc}") from None


def int_column(data: np.ndarray, layout: tuple[list, list, list], column: str) -> np.ndarray:
    """Values of ``int`` column ``column`` for every sample of a raw shard (uint8 array),
    gathered with numpy from the layout above, without decoding any other column."""
    names, encodings, sizes = layout
    if column not in names or encodings[names.index(column)] != "int":
        raise ValueError(
            f"column {column!r} is not an MDS 'int' column here: {dict(zip(names, encodings, strict=True))}"
        )
    n = int(data[:4].view(np.uint32)[0])
    offsets = data[4 : 4 * (n + 2)].view(np.uint32)[:n].astype(np.int64)
    var_cols = [i for i, s in enumerate(sizes) if not s]
    headers = offsets[:, None] + 4 * np.arange(len(var_cols))[None, :]
    var_sizes = (
        data[(headers[..., None] + np.arange(4)).reshape(-1)]
        .view(np.uint32)
        .reshape(n, len(var_cols))
    )
    position = offsets + 4 * len(var_cols)
    target = names.index(column)
    for i in range(target):
        position = position + (var_sizes[:, var_cols.index(i)] if not sizes[i] else sizes[i])
    raw = data[(position[:, None] + np.arange(8)).reshape(-1)]
    return raw.view("<i8").astype(np.int64)
