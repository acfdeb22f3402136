"""Sentencepiece BPE encoding of a whole batch in C++ (the compiled ``_spm_bpe``).

``SentencePieceProcessor.encode`` on a list crosses into C++ per text and hashes every
candidate pair of symbols as a string. :class:`NativeBPE` runs sentencepiece's BPE
algorithm step for step (same queue order, same stale-entry test, user-defined symbols
frozen, byte fallback) over the batch as one UTF-8 buffer, finding pairs in an integer
table built once from the model, with the GIL released: the same ids (tests compare it
with sentencepiece on real text and on generated strings).

Used where the model allows it exactly (:meth:`NativeBPE.for_proto`: a BPE model whose
normalizer keeps the text, no unused pieces); built by
``make spm-bpe`` (part of ``make test`` and ``make demo``). Without it callers use
sentencepiece itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dataforge.tokenization.spm_proto import keeps_text, parse_model

__all__ = ["NativeBPE", "available"]

try:
    from dataforge.tokenization import _spm_bpe
except ImportError:  # not built: sentencepiece encodes
    _spm_bpe = None

_SP_SPACE = "\u2581"


def available() -> bool:
    """Whether the extension is built (``make spm-bpe``)."""
    return _spm_bpe is not None


class NativeBPE:
    """A sentencepiece BPE model's encoder (see the module docstring); build it with
    :meth:`for_model`."""

    def __init__(self, model: object) -> None:
        self._model = model

    @classmethod
    def for_model(cls, model_proto: bytes) -> NativeBPE | None:
        """:meth:`for_proto` of a serialized ``ModelProto``."""
        return cls.for_proto(parse_model(model_proto)) if _spm_bpe is not None else None

    @classmethod
    def for_proto(cls, proto: Any) -> NativeBPE | None:
        """The native encoder of a parsed sentencepiece ``ModelProto``, or None where the
        extension is not built or the model needs what it does not do (another model type,
        a normalizer that changes text, unused pieces, not exactly one unknown piece)."""
        if _spm_bpe is None:
            return None
        from sentencepiece import sentencepiece_model_pb2 as model_pb2

        piece_type = model_pb2.ModelProto.SentencePiece
        if (
            proto.trainer_spec.model_type != model_pb2.TrainerSpec.BPE
            or not keeps_text(proto)
            or any(p.type == piece_type.UNUSED for p in proto.pieces)
        ):
            return None
        kind = {piece_type.NORMAL: 0, piece_type.USER_DEFINED: 1, piece_type.BYTE: 2}
        unknown = [i for i, p in enumerate(proto.pieces) if p.type == piece_type.UNKNOWN]
        if len(unknown) != 1:
            return None
        model = _spm_bpe.load(
            [p.piece for p in proto.pieces],
            [p.score for p in proto.pieces],
            bytes(kind.get(p.type, 3) for p in proto.pieces),
            unknown[0],
            proto.trainer_spec.byte_fallback,
        )
        return cls(model)

    def encode_flat(self, texts: Sequence[str] | pa.Array) -> tuple[np.ndarray, np.ndarray]:
        """Ids of all texts as one int32 array plus ``len(texts) + 1`` int64 offsets.

        Raises:
            pyarrow.ArrowInvalid: a text that is not valid Unicode (a lone surrogate).
        """
        array = texts if isinstance(texts, pa.Array) else pa.array(texts, pa.large_string())
        if not pa.types.is_large_string(array.type):
            array = array.cast(pa.large_string())
        n = len(array)
        if n == 0:
            return np.zeros(0, np.int32), np.zeros(1, np.int64)
        escaped = pc.replace_substring(array, " ", _SP_SPACE)  # the normalizer's one change
        _, offsets_buf, data_buf = escaped.buffers()
        offsets = np.frombuffer(offsets_buf, np.int64, n + 1, escaped.offset * 8)
        data = np.frombuffer(data_buf, np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
        out = np.empty(max(int(offsets[-1]), 1), np.int32)
        out_offsets = np.empty(n + 1, np.int64)
        count = _spm_bpe.encode(self._model, data, offsets, out, out_offsets)
        return out[:count].copy(), out_offsets

    def encode_words(self, words: pa.Array) -> tuple[np.ndarray, np.ndarray]:
        """:data:`dataforge.tokenization.distinct.WordEncoder`: ids and ids per string."""
        values, offsets = self.encode_flat(words)
        return values, np.diff(offsets)
