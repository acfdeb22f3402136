"""Sentencepiece over the distinct words of a batch: space-separated text encoded once per
word instead of once per occurrence.

A piece of a sentencepiece model holds U+2581 (a space) only at its start or in a piece
of spaces alone (``IsValidSentencePiece``; this module checks it on the model's
vocabulary, :func:`splits_at_spaces`), so no piece spans a non-space character followed
by a space: cutting a text before each space that follows a non-space gives words whose
encodings, concatenated, are the text's encoding (BPE merges, and unigram's Viterbi
path, stay inside a word). In English most words of a batch repeat (about one in five is
new in a batch of the demo's documents), so sentencepiece sees a fifth of the text.
Chinese has few spaces and its words are long runs of characters that rarely repeat whole:
:func:`worth_it` keeps such batches on the plain path, where this would cost more.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dataforge.tokenization.spm_proto import keeps_text

__all__ = [
    "MIN_SPACE_SHARE",
    "WordEncoder",
    "encode_distinct",
    "few_spaces",
    "sentencepiece_words",
    "splits_at_spaces",
    "worth_it",
]

MIN_SPACE_SHARE = 0.08
"""Spaces per character from which a batch is encoded word by word (English prose: ~0.15;
Chinese news: ~0.01)."""
_SP_SPACE = "\u2581"
_CUT = "\x1f"  # joins nothing: a text holding it stays on the plain path
_TEXT_PIECES = (1, 4)  # ModelProto.SentencePiece NORMAL, USER_DEFINED


def splits_at_spaces(proto: Any) -> bool:
    """Whether texts of the sentencepiece model (a parsed ``ModelProto``,
    :func:`dataforge.tokenization.spm_proto.parse_model`) encode word by word: its
    normalizer keeps the text (:func:`~dataforge.tokenization.spm_proto.keeps_text`) and
    no piece holds a space after another character (pieces of spaces alone aside)."""
    if not keeps_text(proto):
        return False
    for piece in proto.pieces:
        if piece.type not in _TEXT_PIECES:
            continue  # bytes, control and unknown pieces never match text
        rest = piece.piece.lstrip(_SP_SPACE)
        if rest and _SP_SPACE in rest:
            return False
    return True


def few_spaces(texts: Sequence[str], sample_chars: int = 1 << 14) -> bool:
    """Whether the start of a batch (its first ``sample_chars`` characters) has too few
    spaces for :func:`encode_distinct` to pay: a Chinese batch is told in microseconds,
    before any Arrow array is built."""
    sample: list[str] = []
    size = 0
    for text in texts:
        sample.append(text[: sample_chars - size])
        size += len(sample[-1])
        if size >= sample_chars:
            break
    joined = "".join(sample)
    return joined.count(" ") < MIN_SPACE_SHARE * len(joined)


def worth_it(texts: pa.Array) -> bool:
    """Whether ``texts`` (a string array) have enough spaces, and no cut character, for
    :func:`encode_distinct` to pay."""
    chars = pc.sum(pc.utf8_length(texts)).as_py() or 0
    if chars == 0:
        return False
    spaces = pc.sum(pc.count_substring(texts, " ")).as_py() or 0
    if spaces < MIN_SPACE_SHARE * chars:
        return False
    return not pc.any(pc.match_substring(texts, _CUT)).as_py()


WordEncoder = Callable[[pa.Array], tuple[np.ndarray, np.ndarray]]
"""Encodes a string array: (int32 ids of all strings, int64 number of ids of each)."""


def sentencepiece_words(sp, num_threads: int = -1) -> WordEncoder:
    """A :data:`WordEncoder` calling ``sp.encode`` (sentencepiece itself)."""

    def encode(words: pa.Array) -> tuple[np.ndarray, np.ndarray]:
        arrays = sp.encode(words.to_pylist(), out_type="numpy", num_threads=num_threads)
        lengths = np.fromiter(map(len, arrays), np.int64, count=len(arrays))
        if not arrays:
            return np.zeros(0, np.int32), lengths
        return np.concatenate(arrays).astype(np.int32, copy=False), lengths

    return encode


def encode_distinct(
    encode_words: WordEncoder, texts: Sequence[str] | pa.Array
) -> tuple[np.ndarray, np.ndarray]:
    """The ids each text encodes to, as one int32 array plus the number of ids of each
    text (int64), each distinct word encoded once by ``encode_words``.

    Only valid where :func:`splits_at_spaces` holds for the model and no text contains
    ``"\\x1f"`` (:func:`worth_it` checks it).
    """
    array = texts if isinstance(texts, pa.Array) else pa.array(texts, pa.string())
    if len(array) == 0:
        return np.zeros(0, np.int32), np.zeros(0, np.int64)
    cut = pc.replace_substring_regex(array, pattern=r"([^ ]) ", replacement="\\1" + _CUT + " ")
    words = pc.split_pattern(cut, _CUT)
    words_per_text = pc.list_value_length(words).to_numpy(zero_copy_only=False).astype(np.int64)
    encoded = pc.dictionary_encode(pc.list_flatten(words))
    codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    distinct_values, distinct_lengths = encode_words(encoded.dictionary)
    distinct_starts = np.cumsum(distinct_lengths) - distinct_lengths
    # Gather: occurrence k of the batch copies its word's ids to its place in the output.
    lengths = distinct_lengths[codes]
    ends = np.cumsum(lengths)
    shift = np.repeat(distinct_starts[codes] - (ends - lengths), lengths)
    values = distinct_values[np.arange(int(ends[-1]) if len(ends) else 0) + shift]
    word_ends = np.concatenate([[0], ends])[np.cumsum(words_per_text)]
    return values, np.diff(np.concatenate([[0], word_ends]))
