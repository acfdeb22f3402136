"""The dedup methods by name (a new method: its module, and one line here)."""

from __future__ import annotations

from dataforge.ops.dedup.exact import ExactMethod
from dataforge.ops.dedup.method import DedupMethod
from dataforge.ops.dedup.minhash import MinHashMethod
from dataforge.ops.dedup.simhash import SimHashMethod

__all__ = ["METHODS"]

METHODS: dict[str, type[DedupMethod]] = {
    cls.name: cls for cls in (ExactMethod, MinHashMethod, SimHashMethod)
}
