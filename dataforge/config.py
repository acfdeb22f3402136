"""Pipeline YAML -> typed, frozen dataclasses.

Loading is strict: ``yaml.safe_load`` only (a ``!!python/...`` tag is refused), unknown
keys and op names are errors that list the valid choices, and each op's parameters are
checked against that op's own ``Config`` dataclass (its ``__post_init__`` enforces
cross-field rules). Errors are :class:`ConfigError` naming the file and key path.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import types
import typing
from pathlib import Path
from typing import Any, Literal

import yaml

__all__ = [
    "ConfigError",
    "InputConfig",
    "OutputConfig",
    "PipelineConfig",
    "RayConfig",
    "ReadConfig",
    "StageConfig",
    "apply_overrides",
    "config_sha256",
    "from_mapping",
    "load_pipeline",
    "to_plain",
]


class ConfigError(ValueError):
    """A pipeline file (or override) that does not describe a valid pipeline."""


INPUT_FORMATS = ("jsonl", "parquet", "txt")
MIN_SPLIT_BYTES = 1024
OUTPUT_FORMATS = ("mds", "parquet", "jsonl")


@dataclasses.dataclass(frozen=True)
class InputConfig:
    """One named source."""

    name: str
    path: str
    """File path or glob; relative paths resolve against the pipeline file's directory."""
    format: Literal["jsonl", "parquet", "txt"] = "jsonl"
    """``jsonl`` also reads ``.jsonl.gz`` and ``.jsonl.zst`` (by suffix)."""
    lang: str = "en"
    text_key: str = "text"
    id_key: str | None = None
    """Key holding a stable id; None derives ``<source>/<relpath>:<line>``."""
    meta_keys: tuple[str, ...] = ()
    """Input keys copied into the record's ``meta``."""
    txt_unit: Literal["line", "file", "paragraph"] = "line"
    """For ``txt``: one document per line, per file, or per blank-line-separated paragraph."""

    def __post_init__(self) -> None:
        if not self.name or "/" in self.name:
            raise ValueError(f"input name must be non-empty without '/': {self.name!r}")
        if self.format not in INPUT_FORMATS:
            raise ValueError(f"format {self.format!r}; valid: {', '.join(INPUT_FORMATS)}")


@dataclasses.dataclass(frozen=True)
class ReadConfig:
    """Reader limits shared by all sources."""

    batch_rows: int = 1000
    """Records per batch handed to the ops."""
    max_doc_chars: int = 1_000_000
    """Longer documents are dropped with reason ``too_long`` without being held in memory."""
    invalid_utf8: Literal["replace", "drop"] = "replace"
    """``replace``: U+FFFD and count ``invalid_utf8_replaced``; ``drop``: reason ``invalid_utf8``."""
    split_bytes: int | None = 128 << 20
    """Uncompressed JSONL/txt files larger than this are split into tasks of about this
    many bytes at line boundaries, parquet files by row groups; null: one task per file.
    Compressed files are always one task. The output does not depend on it."""

    def __post_init__(self) -> None:
        if self.batch_rows < 1 or self.max_doc_chars < 1:
            raise ValueError("batch_rows and max_doc_chars must be >= 1")
        if self.split_bytes is not None and self.split_bytes < MIN_SPLIT_BYTES:
            raise ValueError(
                f"split_bytes must be null (no splits) or >= {MIN_SPLIT_BYTES}: {self.split_bytes}"
            )


@dataclasses.dataclass(frozen=True)
class RayConfig:
    """Where and how wide to run."""

    address: str | None = None
    """None: start embedded local Ray; ``auto`` or ``host:port``: join that cluster."""
    num_cpus: int | None = None
    """CPUs for embedded Ray (default: all detected)."""
    object_store_memory: int | None = None
    """Bytes for embedded Ray's object store (default: Ray's)."""
    actors: int | None = None
    """Actor-pool size of each segment (default: the cluster's CPUs)."""
    cpus_per_actor: float = 1.0
    max_task_retries: int = 2


@dataclasses.dataclass(frozen=True)
class StageConfig:
    """One stage: the op name, its typed parameters, and where it runs."""

    op: str
    params: Any
    batch_size: int | None = None
    """Rows per call of this op (default: ``read.batch_rows``)."""


@dataclasses.dataclass(frozen=True)
class OutputConfig:
    path: str
    format: Literal["mds", "parquet", "jsonl"] = "mds"
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
        if self.format not in OUTPUT_FORMATS:
            raise ValueError(f"format {self.format!r}; valid: {', '.join(OUTPUT_FORMATS)}")


@dataclasses.dataclass(frozen=True)
class PipelineConfig:
    name: str
    inputs: tuple[InputConfig, ...]
    output: OutputConfig
    stages: tuple[StageConfig, ...] = ()
    seed: int = 0
    ray: RayConfig = RayConfig()
    read: ReadConfig = ReadConfig()
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
        """A path from the YAML, resolved against the pipeline file's directory."""
        p = Path(path).expanduser()
        return p if p.is_absolute() else Path(self.base_dir) / p


_PIPELINE_KEYS = {"name", "inputs", "output", "stages", "seed", "ray", "read", "max_error_rate"}
_STAGE_RUNTIME_KEYS = {"op", "batch_size"}


def load_pipeline(path: str | Path, overrides: list[str] | None = None) -> PipelineConfig:
    """Read a pipeline YAML file (plus ``key.path=value`` overrides) into a PipelineConfig.

    Raises:
        ConfigError: unreadable file, YAML error, python tags, unknown keys or ops,
            wrong types, or a failed cross-field rule; the message names file and key.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read pipeline file: {exc.strerror}") from exc
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(
            f"{path}: invalid YAML (only plain YAML is accepted, no python tags): {exc}"
        ) from exc
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


def from_mapping(cls: type, raw: Any, where: str) -> Any:
    """Build dataclass ``cls`` from a mapping, strictly: unknown keys, missing required
    keys and wrong types are :class:`ConfigError` naming ``where`` and the key."""
    if isinstance(raw, cls):
        return raw
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping, got {type(raw).__name__} {raw!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = set(raw) - set(fields)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {sorted(unknown)}; valid: {sorted(fields)}")
    kwargs = {}
    for name, field in fields.items():
        if name in raw:
            kwargs[name] = _coerce(hints[name], raw[name], f"{where}.{name}")
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            raise ConfigError(f"{where}: missing required key {name!r}")
    try:
        return cls(**kwargs)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{where}: {exc}") from exc


def _coerce(tp: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(arg, value, where)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(
            errors[0] if len(errors) == 1 else f"{where}: {value!r} matches none of {args}"
        )
    if origin is Literal:
        if value not in args:
            raise ConfigError(
                f"{where}: {value!r} is not valid; valid: {', '.join(map(repr, args))}"
            )
        return value
    if dataclasses.is_dataclass(tp):
        return from_mapping(tp, value, where)
    if origin in (tuple, list):
        if isinstance(value, str) or not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        item_type = args[0] if args else Any
        items = [_coerce(item_type, v, f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {value!r}")
        key_t, val_t = args if args else (Any, Any)
        return {
            _coerce(key_t, k, where): _coerce(val_t, v, f"{where}.{k}") for k, v in value.items()
        }
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where}: expected a number, got {value!r}")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true or false, got {value!r}")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string, got {value!r}")
        return value
    return value


def apply_overrides(raw: dict[str, Any], overrides: list[str], where: str) -> dict[str, Any]:
    """Apply ``--set a.b.c=value`` overrides (value parsed as YAML; list indices allowed:
    ``stages.2.threshold=0.7``)."""
    for item in overrides:
        key, sep, value_text = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set {item!r}: expected key.path=value")
        try:
            value = yaml.safe_load(value_text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"--set {item!r}: value is not valid YAML: {exc}") from exc
        node: Any = raw
        parts = key.split(".")
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            if isinstance(node, list):
                if not part.isdigit() or int(part) >= len(node):
                    raise ConfigError(
                        f"--set {key}: {part!r} is not an index of a {len(node)}-item list"
                    )
                if last:
                    node[int(part)] = value
                else:
                    node = node[int(part)]
            elif isinstance(node, dict):
                if last:
                    node[part] = value
                else:
                    node = node.setdefault(part, {})
            else:
                raise ConfigError(f"--set {key}: {'.'.join(parts[:i])} is not a mapping or list")
    return raw


def to_plain(obj: Any) -> Any:
    """A JSON-ready view of a config (dataclasses -> dicts, tuples -> lists)."""
    if isinstance(obj, StageConfig):
        out = {"op": obj.op, **to_plain(obj.params)}
        if obj.batch_size is not None:
            out["batch_size"] = obj.batch_size
        return out
    if dataclasses.is_dataclass(obj):
        return {f.name: to_plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_plain(v) for v in obj]
    if isinstance(obj, dict):
        return {str(k): to_plain(v) for k, v in obj.items()}
    return obj


def config_sha256(config: PipelineConfig) -> str:
    """Hash of the resolved config that decides whether a run directory can be resumed.
    ``output.keep_work`` and ``ray`` placement do not change results and are excluded."""
    plain = to_plain(config)
    plain.pop("ray", None)
    plain.pop("base_dir", None)
    plain["output"].pop("keep_work", None)
    plain["output"].pop("path", None)  # the run directory is the identity, not part of it
    return hashlib.sha256(json.dumps(plain, sort_keys=True).encode()).hexdigest()
