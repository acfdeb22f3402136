"""A writer for MosaicML MDS shards that does not import ``streaming``.

``import streaming`` loads torch and transformers (about 7 s per process here), which every
Ray actor of the final segment paid before writing its first record: on small machines
that start-up dominated the run. This writer produces the same bytes as
``streaming.MDSWriter`` (index entries and shard files; ``tests/io/test_mds_writer.py``
compares both byte for byte) for the encodings dataforge writes; any other compression
falls back to ``MDSWriter`` itself.

Shard layout (``MDSWriter.encode_joint_shard``): ``uint32 n | uint32 offsets[n+1] |
config JSON | samples``; a sample is ``uint32 size`` per variable-size column, then the
column payloads in sorted column order.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import xxhash

__all__ = ["MDSShardWriter", "supports"]

_SCALARS = {
    "int8": np.int8, "int16": np.int16, "int32": np.int32, "int64": np.int64,
    "uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32, "uint64": np.uint64,
    "float16": np.float16, "float32": np.float32, "float64": np.float64,
}  # fmt: skip
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


def _hash(algo: str, data: bytes) -> str:
    if algo.startswith("xxh"):
        return getattr(xxhash, algo)(data).hexdigest()
    return hashlib.new(algo, data).hexdigest()


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
                    "hashes": {a: _hash(a, raw) for a in self.hashes}}  # fmt: skip
        zip_info = None
        data, name = raw, raw_name
        if self.compression:
            import zstd  # the compressor streaming itself uses, for identical bytes

            data, name = zstd.compress(raw, self.level), f"{raw_name}.zstd"
            zip_info = {"basename": name, "bytes": len(data),
                        "hashes": {a: _hash(a, data) for a in self.hashes}}  # fmt: skip
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
