"""The protocol every dedup method implements, and what the planner needs from it.

A method turns normalized texts into one signature per document (``signatures``), a
signature into bucket keys (``bucket_keys``: documents that share a key are candidates),
and says how candidates are checked (``verified``: against the shingle sets of the texts,
see :mod:`dataforge.ops.dedup.verify`; ``signature_similarity`` for a record of an
``against`` run, whose text is gone). The op (:class:`dataforge.ops.dedup.Dedup`) and the
planner (``dataforge.ops.dedup.planner``) only talk to this interface; a new method
is one module with one subclass, one line in :mod:`dataforge.ops.dedup.registry`, and its
test.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dataforge.ops.dedup.shingles import ShingleSet

__all__ = ["BucketEntries", "DedupMethod"]


@dataclasses.dataclass(frozen=True)
class BucketEntries:
    """The index entries of a column of signatures."""

    rows: np.ndarray
    """Row numbers (in the column) of the documents with a signature."""
    keys: np.ndarray
    """``(len(rows), per_row)`` uint64 bucket keys."""
    fingerprints: np.ndarray | None = None
    """Per row, a value the index compares inside a bucket (SimHash), or None."""


class DedupMethod(abc.ABC):
    """One way of finding candidate duplicates. Subclasses set the class attributes."""

    name: ClassVar[str]
    uses_shingles: ClassVar[bool] = True
    """``signatures`` gets shingle sets (else the normalized code points)."""
    verified: ClassVar[bool] = True
    """Candidates are checked against the shingle sets of the texts (else: a shared
    bucket key is the decision, as for an exact hash)."""
    key_bits: ClassVar[int] = 64
    """Bits of a bucket key the index keeps (32: packed with the document key)."""

    def __init__(self, config: Any) -> None:
        self.config = config

    def problems(self) -> list[str]:
        """What ``dataforge validate`` should report before any work (missing packages)."""
        return []

    def signature_type(self) -> pa.DataType:
        return pa.uint64()

    def signature_params(self) -> dict[str, Any]:
        """Parameters beyond the shared normalization that change signature values."""
        return {}

    @abc.abstractmethod
    def signatures(self, shingles: ShingleSet | None, points: Any) -> np.ndarray:
        """Signature values per document (rows without shingles are nulled by the op)."""

    def values(self, signatures: pa.Array) -> tuple[np.ndarray, np.ndarray]:
        """``(rows with a signature, their values)`` of a signature column."""
        valid = pc.is_valid(signatures)
        rows = np.flatnonzero(valid.to_numpy(zero_copy_only=False))
        values = signatures.filter(valid).to_numpy(zero_copy_only=False).astype(np.uint64)
        return rows, values

    def bucket_keys(self, signatures: pa.Array) -> BucketEntries:
        rows, values = self.values(signatures)
        return BucketEntries(rows, values[:, None])

    def summary(self) -> dict[str, Any]:
        """Derived parameters worth reporting in the stage summary."""
        return {}

    def max_hamming(self) -> int | None:
        """Fingerprints in one bucket further apart than this are no candidates."""
        return None

    def screen_floor(self) -> float | None:
        """Candidates whose ``signature_similarity`` is below this are dropped before the
        texts are read (None: no screening)."""
        return None

    def signature_similarity(self, left: np.ndarray, right: np.ndarray) -> np.ndarray:
        """Similarity estimated from row-aligned signature values (for records whose
        text is not available); a pair is kept when it reaches ``threshold``."""
        return (np.asarray(left) == np.asarray(right)).astype(np.float64)
