"""Pipeline YAML -> typed, frozen dataclasses.

Loading follows :mod:`dataforge.typed_config` (safe YAML with YAML 1.2 numbers, strict
typed coercion): unknown keys and op names are errors that list the valid choices, and each
op's parameters are checked against that op's own ``Config`` dataclass (its
``__post_init__`` enforces cross-field rules). Errors are :class:`ConfigError` naming the
file and key path.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import typing
from pathlib import Path
from typing import Any, Literal

from dataforge.io.fs import StorageConfig
from dataforge.io.input_config import INPUT_FORMATS, InputConfig, ReadConfig
from dataforge.io.mds_index import MAX_SHARD_BYTES
from dataforge.typed_config import (
    ConfigError,
    apply_overrides,
    check_choices,
    check_range,
    from_mapping,
    parse_size,
    read_yaml_file,
    to_plain,
)

__all__ = [
    "INPUT_FORMATS",
    "ConfigError",
    "InputConfig",
    "OutputConfig",
    "PipelineConfig",
    "RayConfig",
    "ReadConfig",
    "StageConfig",
    "StorageConfig",
    "apply_overrides",
    "config_sha256",
    "from_mapping",
    "load_pipeline",
    "to_plain",
]


OutputFormat = Literal["mds", "parquet", "jsonl"]
OUTPUT_FORMATS: tuple[str, ...] = typing.get_args(OutputFormat)
# MDS compression families and their levels (``zstd:7``), as streaming's codec table has them.
MDS_COMPRESSION_LEVELS = {
    "br": range(0, 12), "bz2": range(1, 10), "gz": range(0, 10), "snappy": range(0),
    "zstd": range(1, 23),
}  # fmt: skip
PARQUET_COMPRESSIONS = ("none", "snappy", "gzip", "brotli", "lz4", "zstd")
# Shard hashes streaming can verify (hashlib's fixed-size digests and xxhash).
SHARD_HASHES = (
    "md5", "sha1", "sha224", "sha256", "sha384", "sha512", "sha3_224", "sha3_256", "sha3_384",
    "sha3_512", "blake2b", "blake2s", "xxh32", "xxh64", "xxh128", "xxh3_64", "xxh3_128",
)  # fmt: skip
MIN_SHARD_BYTES = 1 << 10


def _check_compression(fmt: str, compression: str | None) -> None:
    if compression is None or fmt == "jsonl":  # jsonl parts are written uncompressed
        return
    if fmt == "parquet":
        if compression.lower() not in PARQUET_COMPRESSIONS:
            raise ValueError(
                f"output.compression={compression!r}; valid for parquet: "
                f"{', '.join(PARQUET_COMPRESSIONS)}, or null"
            )
        return
    family, _, level = compression.partition(":")
    levels = MDS_COMPRESSION_LEVELS.get(family)
    ok = levels is not None and (
        not level or (level.isdigit() and len(levels) and int(level) in levels)
    )
    if not ok:
        choices = ", ".join(
            f"{f}" + (f"[:{r.start}-{r.stop - 1}]" if len(r) else "")
            for f, r in MDS_COMPRESSION_LEVELS.items()
        )
        raise ValueError(f"output.compression={compression!r}; valid for mds: {choices}, or null")


MIN_WORKER_MEMORY = 1 << 20
"""Smallest ``ray.memory_per_worker`` (1 MiB): below it a spilled run would hold a few
hundred records and a merge would be mostly file overhead."""


@dataclasses.dataclass(frozen=True)
class RayConfig:
    """Where and how wide to run."""

    address: str | None = None
    """None: start embedded local Ray; ``auto`` or ``host:port``: join that cluster."""
    num_cpus: int | None = None
    """CPUs of embedded Ray, or worker processes of ``executor: local`` (default: all
    detected); a joined cluster has its own."""
    object_store_memory: int | None = None
    """Bytes for embedded Ray's object store (default: Ray's)."""
    actors: int | None = None
    """Size of the run's actor pool, shared by all segments (default: the cluster's CPUs
    over ``cpus_per_actor``)."""
    cpus_per_actor: float = 1.0
    max_task_retries: int = 2
    memory_per_worker: int | float | str | None = None
    """Memory a worker's share of a global stage may hold (its planner's record keys)
    before it spills to disk: bytes, or a size like ``1.5GB``, ``512MB``, ``2GiB`` (kept
    as bytes). Default, when the run starts: ``executor: local``, half this machine's
    memory over its worker processes; Ray, the cluster's ``memory`` resource over the
    pool's actors."""

    def __post_init__(self) -> None:
        check_choices(self)
        if self.memory_per_worker is not None:
            size = parse_size("ray.memory_per_worker", self.memory_per_worker)
            if size < MIN_WORKER_MEMORY:
                raise ValueError(
                    f"ray.memory_per_worker={self.memory_per_worker!r} is {size} bytes; "
                    f"valid: at least 1MiB ({MIN_WORKER_MEMORY} bytes)"
                )
            object.__setattr__(self, "memory_per_worker", size)  # frozen: normalised once
        check_range("ray.num_cpus", self.num_cpus, 1)
        # Ray refuses an object store under 75 MiB.
        check_range("ray.object_store_memory", self.object_store_memory, 75 * 1024 * 1024)
        check_range("ray.actors", self.actors, 1)
        check_range("ray.max_task_retries", self.max_task_retries, 0, 100)
        if not self.cpus_per_actor > 0 or self.cpus_per_actor > 1024:
            raise ValueError(f"ray.cpus_per_actor={self.cpus_per_actor!r}; valid range: >0 to 1024")


@dataclasses.dataclass(frozen=True)
class StageConfig:
    """One stage: the op name, its typed parameters, and where it runs."""

    op: str
    params: Any
    batch_size: int | None = None
    """Rows per call of this op (default: ``read.batch_rows``)."""

    def to_plain(self) -> dict[str, Any]:
        """The YAML view: ``op``, the op's parameters, then runtime keys."""
        out = {"op": self.op, **to_plain(self.params)}
        if self.batch_size is not None:
            out["batch_size"] = self.batch_size
        return out


@dataclasses.dataclass(frozen=True)
class OutputConfig:
    path: str
    format: OutputFormat = "mds"
    compression: str | None = "zstd"
    """MDS: ``zstd`` or null; parquet: any codec pyarrow knows."""
    size_limit: int = 1 << 26
    """MDS shard size limit in bytes (before compression)."""
    hashes: tuple[str, ...] = ("xxh64",)
    rejects: bool = False
    """Also write dropped records with their reason under ``rejects/``."""
    split_by_source: bool = False
    """Write ``mds/<source>/`` sub-datasets (one MDS stream per source)."""
    keep_work: bool = False
    """Keep ``_work/`` after success (debugging)."""

    def __post_init__(self) -> None:
        check_choices(self)
        if not self.path:
            raise ValueError("output.path must not be empty")
        _check_compression(self.format, self.compression)
        check_range("output.size_limit", self.size_limit, MIN_SHARD_BYTES, MAX_SHARD_BYTES)
        unknown = [h for h in self.hashes if h not in SHARD_HASHES]
        if unknown:
            raise ValueError(f"output.hashes {unknown} unknown; valid: {', '.join(SHARD_HASHES)}")


@dataclasses.dataclass(frozen=True)
class PipelineConfig:
    name: str
    inputs: tuple[InputConfig, ...]
    output: OutputConfig
    stages: tuple[StageConfig, ...] = ()
    seed: int = 0
    executor: Literal["ray", "local"] = "ray"
    """Where tasks run: ``ray`` (Ray actors: embedded, or the cluster of ``ray.address``)
    or ``local`` (forked worker processes on this machine, no Ray)."""
    ray: RayConfig = RayConfig()
    read: ReadConfig = ReadConfig()
    storage: StorageConfig = StorageConfig()
    max_error_rate: float = 0.001
    """Fraction of records per source that may end as ``error:<kind>`` before the run fails."""
    base_dir: str = "."
    """Directory of the pipeline file; relative paths resolve against it (not in YAML)."""

    def __post_init__(self) -> None:
        names = [i.name for i in self.inputs]
        if not names:
            raise ValueError("a pipeline needs at least one input")
        if len(set(names)) != len(names):
            raise ValueError(f"input names must be unique: {names}")
        if not 0.0 <= self.max_error_rate <= 1.0:
            raise ValueError(f"max_error_rate must be in [0, 1]: {self.max_error_rate}")

    def resolve(self, path: str) -> Path:
        """A local path from the YAML, resolved against the pipeline file's directory."""
        p = Path(path).expanduser()
        return p if p.is_absolute() else Path(self.base_dir) / p

    def locate(self, path: str) -> str:
        """A path or URI from the YAML: a URI (``s3://...``) unchanged, a local path resolved
        against the pipeline file's directory."""
        return path if "://" in path else str(self.resolve(path))


_PIPELINE_KEYS = {
    "name", "inputs", "output", "stages", "seed", "executor", "ray", "read", "storage",
    "max_error_rate",
}  # fmt: skip
_STAGE_RUNTIME_KEYS = {"op", "batch_size"}


def load_pipeline(path: str | Path, overrides: list[str] | None = None) -> PipelineConfig:
    """Read a pipeline YAML file (plus ``key.path=value`` overrides) into a PipelineConfig.

    Raises:
        ConfigError: unreadable file, YAML error, python tags, unknown keys or ops,
            wrong types, or a failed cross-field rule; the message names file and key.
    """
    path = Path(path)
    raw = read_yaml_file(path, "pipeline file")
    if not isinstance(raw, dict):
        raise ConfigError(
            f"{path}: the top level must be a mapping with keys {sorted(_PIPELINE_KEYS)}"
        )
    raw = apply_overrides(raw, overrides or [], str(path))
    return pipeline_from_mapping(raw, base_dir=str(path.resolve().parent), where=str(path))


def pipeline_from_mapping(
    raw: dict[str, Any], base_dir: str, where: str = "<config>"
) -> PipelineConfig:
    """Build a PipelineConfig from an already-parsed mapping."""
    unknown = set(raw) - _PIPELINE_KEYS
    if unknown:
        raise ConfigError(
            f"{where}: unknown key(s) {sorted(unknown)}; valid: {sorted(_PIPELINE_KEYS)}"
        )
    for key in ("name", "inputs", "output"):
        if key not in raw:
            raise ConfigError(f"{where}: missing required key {key!r}")
    if not isinstance(raw["inputs"], list):
        raise ConfigError(f"{where}: 'inputs' must be a list of sources")
    stages_raw = raw.get("stages") or []
    if not isinstance(stages_raw, list):
        raise ConfigError(f"{where}: 'stages' must be a list")
    fields = {k: v for k, v in raw.items() if k != "stages"}
    fields["inputs"] = [
        from_mapping(InputConfig, item, f"{where}: inputs[{i}]")
        for i, item in enumerate(raw["inputs"])
    ]
    stages = tuple(
        _stage_from_mapping(s, f"{where}: stages[{i}]") for i, s in enumerate(stages_raw)
    )
    try:
        base = from_mapping(PipelineConfig, {**fields, "stages": [], "base_dir": base_dir}, where)
        return dataclasses.replace(base, stages=stages)
    except ValueError as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(f"{where}: {exc}") from exc


def _stage_from_mapping(raw: Any, where: str) -> StageConfig:
    from dataforge.ops.base import OP_REGISTRY, op_class

    if not isinstance(raw, dict) or "op" not in raw:
        raise ConfigError(
            f"{where}: a stage is a mapping with an 'op' key; valid ops: {', '.join(sorted(OP_REGISTRY))}"
        )
    name = raw["op"]
    try:
        cls = op_class(name)
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from exc
    params = {k: v for k, v in raw.items() if k not in _STAGE_RUNTIME_KEYS}
    op_config = from_mapping(cls.Config, params, f"{where} ({name})")
    batch_size = raw.get("batch_size")
    if batch_size is not None and (not isinstance(batch_size, int) or batch_size < 1):
        raise ConfigError(f"{where}: batch_size must be a positive integer, got {batch_size!r}")
    return StageConfig(op=name, params=op_config, batch_size=batch_size)


def config_sha256(config: PipelineConfig) -> str:
    """Hash of the resolved config that decides whether a run directory can be resumed.
    ``output.keep_work`` and ``ray`` placement do not change results and are excluded."""
    plain = to_plain(config)
    plain.pop("ray", None)
    plain.pop("executor", None)  # both executors write the same bytes
    plain.pop("storage", None)  # where the bytes live does not change them
    plain.pop("base_dir", None)
    plain["output"].pop("keep_work", None)
    plain["output"].pop("path", None)  # the run directory is the identity, not part of it
    return hashlib.sha256(json.dumps(plain, sort_keys=True).encode()).hexdigest()
