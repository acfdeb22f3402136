"""YAML as dataforge reads it: ``yaml.SafeLoader`` with YAML 1.2 floats, refusing
duplicate keys, deep nesting and alias bombs; one-line errors naming file and line."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from dataforge.typed_config.errors import ConfigError, short_repr

__all__ = [
    "MAX_YAML_DEPTH",
    "MAX_YAML_NODES",
    "YamlLoader",
    "YamlRefused",
    "load_yaml",
    "read_yaml_file",
    "yaml_error_line",
]

MAX_YAML_NODES = 100_000
"""Nodes a YAML document may hold once its aliases are expanded; a config has hundreds,
and a few aliased lists nested 6 deep ("billion laughs") expand to millions."""
MAX_YAML_DEPTH = 100
"""Nesting a YAML document (or a ``--set`` key path) may reach; PyYAML composes nodes
recursively, so about 300 levels exhaust Python's stack."""


class YamlRefused(yaml.MarkedYAMLError):
    """YAML that parses but that dataforge refuses (limits, duplicate keys); its ``problem``
    is the whole explanation."""


class YamlLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that reads YAML 1.2 floats (``1e-6``, ``1E+3``, ``.5``) and
    refuses duplicate keys, deep nesting and alias bombs (:class:`YamlRefused`)."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._depth += 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                mark = self.peek_event().start_mark
                raise YamlRefused(problem=_too_deep(), problem_mark=mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def compose_mapping_node(self, anchor: Any) -> Any:
        node = super().compose_mapping_node(anchor)
        _refuse_duplicate_keys(self, node)
        return node

    def compose_document(self) -> Any:
        node = super().compose_document()
        _refuse_expansion(node)
        return node


def _too_deep() -> str:
    return f"nesting deeper than {MAX_YAML_DEPTH} levels (limit)"


def _refuse_duplicate_keys(loader: YamlLoader, node: yaml.MappingNode) -> None:
    """Scalar keys are compared as the values they construct to (``1`` and ``0x1`` are
    the same key); merge keys (``<<``) and complex keys are left to the constructor."""
    seen: dict[Any, yaml.Node] = {}
    for key_node, _ in node.value:
        construct = loader.yaml_constructors.get(key_node.tag)
        if not isinstance(key_node, yaml.ScalarNode) or construct is None:
            continue
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        try:
            first = seen.setdefault(construct(loader, key_node), key_node)
        except (TypeError, ValueError, yaml.YAMLError):
            continue  # an unhashable or invalid key: construction reports it
        if first is not key_node:
            raise YamlRefused(
                problem=f"duplicate key {short_repr(key_node.value)} "
                f"(first at line {first.start_mark.line + 1})",
                problem_mark=key_node.start_mark,
            )


def _refuse_expansion(root: yaml.Node | None) -> None:
    """Count the nodes and depth of ``root`` with aliases expanded, without expanding
    them (each distinct node is measured once); refuse a recursive alias."""
    if root is None:
        return
    measured: dict[int, tuple[int, int]] = {}  # id(node) -> (expanded nodes, depth)
    open_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        children = _child_nodes(node)
        if children_done:
            open_nodes.discard(id(node))
            size = 1 + sum(measured[id(c)][0] for c in children)
            depth = 1 + max((measured[id(c)][1] for c in children), default=0)
            measured[id(node)] = (size, depth)
            problem = (
                f"aliases expand to more than {MAX_YAML_NODES} nodes (limit)"
                if size > MAX_YAML_NODES
                else _too_deep() + " once aliases are expanded"
                if depth > MAX_YAML_DEPTH
                else None
            )
            if problem:
                raise YamlRefused(problem=problem, problem_mark=node.start_mark)
            continue
        if id(node) in measured:
            continue
        open_nodes.add(id(node))
        stack.append((node, True))
        for child in children:
            if id(child) in open_nodes:
                raise YamlRefused(problem="recursive alias", problem_mark=child.start_mark)
            if id(child) not in measured:
                stack.append((child, False))


def _child_nodes(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


# The float resolver of YAML 1.2's core schema plus YAML 1.1's ``1_000.5`` separators, which
# PyYAML users already rely on. The first characters list decides which scalars are tried.
_FLOAT_12 = re.compile(
    r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
    |[-+]?\.[0-9_]+(?:[eE][-+]?[0-9]+)?
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""",
    re.X,
)
YamlLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:float"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
YamlLoader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT_12, list("-+0123456789."))


def load_yaml(text: str) -> Any:
    """Parse YAML text with :class:`YamlLoader`.

    Raises:
        yaml.YAMLError: invalid YAML, or :class:`YamlRefused` (see :class:`YamlLoader`);
            an integer too long for Python to convert is one too.
    """
    try:
        return yaml.load(text, Loader=YamlLoader)  # noqa: S506 - YamlLoader is a SafeLoader
    except ValueError as exc:  # int() of a scalar past sys.get_int_max_str_digits()
        raise yaml.YAMLError(str(exc).partition(";")[0]) from exc


def yaml_error_line(where: str, exc: yaml.YAMLError) -> str:
    """One line for a YAML error: ``where:LINE: problem``."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    at = f"{where}:{mark.line + 1}" if mark is not None else where
    if isinstance(exc, YamlRefused):
        return f"{at}: {exc.problem}"
    problem = getattr(exc, "problem", None) or str(exc)
    context = getattr(exc, "context", None)
    detail = f"{problem} ({context})" if context else problem
    return f"{at}: invalid YAML (only plain YAML is accepted, no python tags): {detail}"


def read_yaml_file(path: str | Path, what: str) -> Any:
    """Read and parse a YAML file; ``what`` names it in errors (``"pipeline file"``).

    Raises:
        ConfigError: the file cannot be read or is not valid (safe) YAML, or it exceeds
            the limits of :class:`YamlLoader`; the message names the file and line.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read {what}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: {what} is not UTF-8 (byte {exc.start})") from exc
    try:
        return load_yaml(text)
    except yaml.YAMLError as exc:
        raise ConfigError(yaml_error_line(str(path), exc)) from exc
