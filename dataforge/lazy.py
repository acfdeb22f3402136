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

__all__ = ["lazy_exports"]


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
