"""Package names that load their module on first use (PEP 562 ``__getattr__``).

A package whose ``__init__`` re-exports names from heavy modules makes everyone who
imports any of its submodules (a CLI registering its subcommand) pay for all of them.
``__getattr__ = lazy_exports(__name__, {"Name": "package.module", ...})`` imports a name's
module the first time the name is looked up and keeps the value in the package.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports", "skip_pandas_probe"]


def lazy_exports(package: str, homes: Mapping[str, str]) -> Callable[[str], Any]:
    """The module ``__getattr__`` of ``package``: ``homes`` maps each exported name to the
    module that defines it. Call it from the package's ``__init__`` (which is in
    ``sys.modules`` by then)."""
    namespace = vars(sys.modules[package])

    def __getattr__(name: str) -> Any:
        if name not in homes:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(homes[name]), name)
        namespace[name] = value  # later lookups find it without calling this
        return value

    return __getattr__


class _NoPandas:
    """A finder that refuses ``pandas`` (for :func:`skip_pandas_probe` only)."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == "pandas":
            raise ImportError("pandas: not imported by pyarrow's implicit probe")


def skip_pandas_probe() -> None:
    """Keep pyarrow from importing pandas on its first ``pa.array`` call.

    pyarrow asks "is this a pandas object?" on every ``pa.array``/``pa.table`` and, the
    first time, imports pandas to answer (0.3-0.45 s per process, measured in the driver's
    dedup barrier and in each forked lane; dataforge never hands pyarrow a pandas object).
    Called before any such call, this makes that first probe find no pandas: pyarrow
    remembers the answer for its implicit checks only. An explicit conversion
    (``Table.to_pandas``, ``Table.from_pandas``) still imports pandas and works, and from
    then on pyarrow sees pandas as usual. A process that has pandas already is left alone.
    """
    if "pandas" in sys.modules:
        return
    import pyarrow as pa  # noqa: PLC0415 - only here

    finder = _NoPandas()
    sys.meta_path.insert(0, finder)
    try:
        pa.array([0])
    finally:
        sys.meta_path.remove(finder)
