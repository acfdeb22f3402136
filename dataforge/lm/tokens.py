"""Tokenizing normalized lines into the space-separated pieces KenLM reads.

KenLM models see each token id rendered as a decimal string (``"17 4 2093"``): ids are
what the project tokenizer returns, they never contain whitespace, and rendering them is a
table lookup done in Arrow over the whole batch (no per-token Python).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["PieceTokenizer", "TokenRenderer", "load_tokenizer"]


@runtime_checkable
class PieceTokenizer(Protocol):
    """The part of :class:`dataforge.tokenization.Tokenizer` the LM code uses."""

    vocab_size: int
    fingerprint: str

    def encode_batch(self, texts: list[str]) -> list[list[int]]: ...


def load_tokenizer(path: str | Path) -> PieceTokenizer:
    """Load the project tokenizer from its directory (``tokenizer.json`` + ``spm.model``).

    Raises:
        FileNotFoundError, ValueError: from :meth:`Tokenizer.load` (missing or incompatible dir).
    """
    from dataforge.tokenization import Tokenizer  # deferred: loads sentencepiece/jieba

    return Tokenizer.load(path)


class TokenRenderer:
    """Encodes lines with a tokenizer and renders the ids as KenLM input strings."""

    def __init__(self, tokenizer: PieceTokenizer) -> None:
        self.tokenizer = tokenizer
        self._id_strings = pa.array([str(i) for i in range(tokenizer.vocab_size)], pa.string())

    def render(self, lines: Sequence[str]) -> tuple[list[str], np.ndarray]:
        """Tokenize ``lines`` (non-empty, normalized) into KenLM sentences.

        Returns:
            ``(sentences, num_tokens)``: ``sentences[i]`` is the ids of ``lines[i]`` joined
            by single spaces; ``num_tokens[i]`` (int64) how many ids it has. Uses the
            tokenizer's ``encode_batch_flat`` (values, offsets) when it has one.
        """
        if not lines:
            return [], np.zeros(0, np.int64)
        flat, offsets = self._encode_flat(list(lines))
        num_tokens = np.diff(offsets)
        if flat.size and (flat.min() < 0 or flat.max() >= len(self._id_strings)):
            raise ValueError(
                f"tokenizer returned ids outside [0, {len(self._id_strings)}): "
                f"min {flat.min()}, max {flat.max()}"
            )
        pieces = pa.ListArray.from_arrays(
            pa.array(offsets.astype(np.int32)), self._id_strings.take(pa.array(flat))
        )
        return pc.binary_join(pieces, " ").to_pylist(), num_tokens

    def _encode_flat(self, lines: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Ids of all lines as one array plus ``len(lines) + 1`` offsets."""
        encode_flat = getattr(self.tokenizer, "encode_batch_flat", None)
        if encode_flat is not None:  # the project tokenizer's Arrow-layout fast path
            values, offsets = encode_flat(lines)
            return np.asarray(values, np.int64), np.asarray(offsets, np.int64)
        ids = self.tokenizer.encode_batch(lines)
        lengths = np.fromiter(map(len, ids), np.int64, count=len(ids))
        offsets = np.zeros(len(ids) + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        flat = np.fromiter(itertools.chain.from_iterable(ids), np.int64, count=int(offsets[-1]))
        return flat, offsets
