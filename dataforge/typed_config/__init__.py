"""Typed configuration: YAML -> frozen dataclasses, shared by the pipeline and the trainer.

One set of rules for every config file dataforge reads (pipelines, tokenizer specs, trainer
configs, loader settings):

* YAML is read by :class:`YamlLoader`: ``yaml.SafeLoader`` (a ``!!python/...`` tag is
  refused) with YAML 1.2 numbers. PyYAML follows YAML 1.1, where ``1e-6`` and ``1E+3``
  (no dot) are strings; here they are floats, as in YAML 1.2, JSON and Python. It also
  refuses what a hostile file uses to exhaust memory or the stack: a document whose
  aliases expand past :data:`MAX_YAML_NODES` nodes, nesting deeper than
  :data:`MAX_YAML_DEPTH`, recursive aliases; and a duplicate mapping key (YAML forbids
  it; PyYAML keeps the last one silently). Every error is one line of bounded length.
* :func:`from_mapping` builds a dataclass strictly: unknown keys, missing required keys
  and values of the wrong type are :class:`ConfigError` naming the key path (a key the
  dataclass lists in its ``moved_keys`` class attribute, ``old -> new key path``, is refused
  naming its new place); the
  dataclass's own ``__post_init__`` enforces cross-field rules (its ``ValueError`` becomes
  a ``ConfigError`` with the path). Nested dataclasses, ``Literal``, unions, lists, tuples
  and ``dict[K, V]`` are coerced recursively, so a nested value is checked at load time.
* :func:`apply_overrides` applies ``--set a.b.c=value`` (value parsed as YAML).
* :func:`to_plain` is the JSON-ready view used to dump a resolved config; an object may
  shape its own view with a ``to_plain()`` method.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from collections.abc import Callable, Iterable
from typing import Any, Literal

import yaml

from dataforge.typed_config.errors import ConfigError, check_range, short_repr
from dataforge.typed_config.yaml_files import (
    MAX_YAML_DEPTH,
    MAX_YAML_NODES,
    YamlLoader,
    load_yaml,
    read_yaml_file,
    yaml_error_line,
)

__all__ = [
    "check_range",
    "ConfigError",
    "MAX_YAML_DEPTH",
    "MAX_YAML_NODES",
    "YamlLoader",
    "apply_overrides",
    "check_choices",
    "choice_field",
    "from_mapping",
    "load_yaml",
    "parse_size",
    "read_yaml_file",
    "short_repr",
    "to_plain",
    "yaml_error_line",
]


SIZE_UNITS = {
    "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
    "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40,
}  # fmt: skip
"""Units of a size (case-insensitive): decimal (``KB`` = 1000 bytes) and binary (``KiB``)."""
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([A-Za-z]*)\s*$")
SIZE_FORMAT = "a number of bytes or a number and a unit, like 512MB, 1.5GB or 2GiB"


def parse_size(key: str, value: int | float | str) -> int:
    """Bytes of a size written as a whole number of bytes (``1e9`` too) or a number and a
    unit of :data:`SIZE_UNITS` (``1.5GB``, ``512MB``, ``2GiB``), rounded down to bytes.

    Raises:
        ValueError: anything else, naming ``key`` and the format.
    """
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    match = _SIZE.match(value) if isinstance(value, str) else None
    unit = match.group(2).upper() or "B" if match else ""
    if not match or unit not in SIZE_UNITS:
        raise ValueError(f"{key}={short_repr(value)} is not a size; valid: {SIZE_FORMAT}")
    return int(float(match.group(1)) * SIZE_UNITS[unit])


def from_mapping(cls: type, raw: Any, where: str) -> Any:
    """Build dataclass ``cls`` from a mapping, strictly: unknown keys, missing required
    keys and wrong types are :class:`ConfigError` naming ``where`` and the key; a key of
    ``cls.moved_keys`` (old name -> new key path) is refused naming its new place."""
    if isinstance(raw, cls):
        return raw
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(
            f"{where}: expected a mapping, got {type(raw).__name__} {short_repr(raw)}"
        )
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = set(raw) - set(fields)
    moved = getattr(cls, "moved_keys", {})
    renamed = sorted(unknown & set(moved))
    if renamed:
        raise ConfigError(f"{where}: " + "; ".join(f"{k}: moved to {moved[k]}" for k in renamed))
    if unknown:
        raise ConfigError(
            f"{where}: unknown key(s) {short_repr(sorted(map(str, unknown)))}; "
            f"valid: {sorted(fields)}"
        )
    kwargs = {}
    for name, field in fields.items():
        if name in raw:
            kwargs[name] = coerce(hints[name], raw[name], f"{where}.{name}")
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            raise ConfigError(f"{where}: missing required key {name!r}")
    try:
        return cls(**kwargs)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{where}: {exc}") from exc


def coerce(tp: Any, value: Any, where: str) -> Any:
    """Check ``value`` against type hint ``tp`` (recursively) and return it typed.

    Raises:
        ConfigError: the value does not fit; the message names ``where``.
    """
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        return _coerce_union(args, value, where)
    if origin is Literal:
        if value not in args:
            raise ConfigError(
                f"{where}: {short_repr(value)} is not valid; valid: {', '.join(map(repr, args))}"
            )
        return value
    if dataclasses.is_dataclass(tp):
        return from_mapping(tp, value, where)
    if origin in (tuple, list):
        if isinstance(value, str) or not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {short_repr(value)}")
        item_type = args[0] if args else Any
        items = [coerce(item_type, v, f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {short_repr(value)}")
        key_t, val_t = args if args else (Any, Any)
        return {coerce(key_t, k, where): coerce(val_t, v, f"{where}.{k}") for k, v in value.items()}
    return _coerce_scalar(tp, value, where)


def _coerce_union(args: tuple[Any, ...], value: Any, where: str) -> Any:
    if value is None and type(None) in args:
        return None
    errors = []
    for arg in args:
        if arg is type(None):
            continue
        try:
            return coerce(arg, value, where)
        except ConfigError as exc:
            errors.append(str(exc))
    raise ConfigError(
        errors[0] if len(errors) == 1 else f"{where}: {short_repr(value)} matches none of {args}"
    )


def _coerce_scalar(tp: Any, value: Any, where: str) -> Any:
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where}: expected a number, got {short_repr(value)}")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected an integer, got {short_repr(value)}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true or false, got {short_repr(value)}")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string, got {short_repr(value)}")
        return value
    return value


def choice_field(default: str, choices: Callable[[], Iterable[str]]) -> Any:
    """A ``str`` dataclass field whose valid values are a registry's names, read when
    :func:`check_choices` runs (so that a name registered later is valid too)."""
    return dataclasses.field(default=default, metadata={"choices": choices})


def check_choices(obj: Any) -> None:
    """Check every ``Literal`` field of dataclass instance ``obj`` against its choices, and
    every :func:`choice_field` against its registry.

    For ``__post_init__``: :func:`from_mapping` already checks a ``Literal`` when a config
    is loaded, and this keeps code that builds a config directly to the same rule, so the
    choices are written once, in the ``Literal`` (or the registry).

    Raises:
        ValueError: a value is not one of its field's choices (the message lists them).
    """
    hints = typing.get_type_hints(type(obj))
    for field in dataclasses.fields(obj):
        tp = hints[field.name]
        if typing.get_origin(tp) is Literal:
            valid = typing.get_args(tp)
        elif "choices" in field.metadata:
            valid = tuple(field.metadata["choices"]())
        else:
            continue
        value = getattr(obj, field.name)
        if value not in valid:
            choices = ", ".join(map(repr, valid))
            raise ValueError(f"{field.name}={short_repr(value)} is not valid; valid: {choices}")


def apply_overrides(raw: dict[str, Any], overrides: list[str], where: str) -> dict[str, Any]:
    """Apply ``--set a.b.c=value`` overrides (value parsed as YAML; list indices allowed:
    ``stages.2.threshold=0.7``)."""
    for item in overrides:
        key, sep, value_text = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set {short_repr(item)}: expected key.path=value")
        if key.count(".") >= MAX_YAML_DEPTH:
            raise ConfigError(
                f"--set {short_repr(key)}: key path deeper than {MAX_YAML_DEPTH} levels (limit)"
            )
        try:
            value = load_yaml(value_text)
        except yaml.YAMLError as exc:
            line = yaml_error_line("value", exc)
            raise ConfigError(f"--set {short_repr(key)}: {line}") from exc
        _set_path(raw, key, value)
    return raw


def _set_path(raw: dict[str, Any], key: str, value: Any) -> None:
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


def to_plain(obj: Any) -> Any:
    """A JSON-ready view of a config (dataclasses -> dicts, tuples -> lists). An object with
    a ``to_plain()`` method gives its own view (e.g. a pipeline stage flattens its op's
    parameters next to ``op``)."""
    own = getattr(obj, "to_plain", None)
    if callable(own) and not isinstance(obj, type):
        return own()
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_plain(v) for v in obj]
    if isinstance(obj, dict):
        return {str(k): to_plain(v) for k, v in obj.items()}
    return obj
