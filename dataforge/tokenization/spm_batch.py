"""Sentencepiece ids of a batch of strings, by the fastest exact means at hand: the native
BPE encoder (:mod:`dataforge.tokenization.native_bpe`) where it is built and fits the
model, each distinct word once for spaced text (:mod:`dataforge.tokenization.distinct`),
else one ``sp.encode`` call. All give sentencepiece's ids; the project tokenizer and the
LM's ``sentencepiece`` segmentation both encode through it."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from dataforge.tokenization.distinct import (
    encode_distinct,
    few_spaces,
    sentencepiece_words,
    splits_at_spaces,
    worth_it,
)
from dataforge.tokenization.native_bpe import NativeBPE
from dataforge.tokenization.spm_proto import parse_model

__all__ = ["BatchEncoder"]


class BatchEncoder:
    """Encodes string batches for one sentencepiece model.

    Args:
        sp: the loaded ``SentencePieceProcessor``.
        model_proto: its serialized model (what it was loaded from).
        num_threads: ``sp.encode``'s threads where sentencepiece encodes.
        native, by_words: allow the native encoder / word-by-word encoding (both on by
            default, each used only where it gives sentencepiece's ids; off: the plain
            sentencepiece path, for comparisons).
    """

    def __init__(
        self,
        sp,
        model_proto: bytes,
        num_threads: int = -1,
        *,
        native: bool = True,
        by_words: bool = True,
    ) -> None:
        proto = parse_model(model_proto)
        self._native = NativeBPE.for_proto(proto) if native else None
        self._sp_words = sentencepiece_words(sp, num_threads)
        self._by_words = by_words and splits_at_spaces(proto)

    @property
    def native(self) -> bool:
        """Whether the native BPE encoder is used."""
        return self._native is not None

    def encode_words(self, words: pa.Array) -> tuple[np.ndarray, np.ndarray]:
        """Ids (int32) of all strings of ``words`` and the number of each one's ids."""
        if self._native is not None:
            return self._native.encode_words(words)
        return self._sp_words(words)

    def encode(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Like :meth:`encode_words`, for texts: spaced batches word by word."""
        array = pa.array(texts, pa.string())
        if self._by_words and not few_spaces(texts) and worth_it(array):
            return encode_distinct(self.encode_words, array)
        return self.encode_words(array)
