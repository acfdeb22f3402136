"""The previous implementation of :mod:`dataforge.text.stats` (commit 7a636d5), kept as the
oracle: the rewrite must give identical statistics and decisions (``test_stats_rewrite.py``)
and ``benchmarks/ops_throughput.py`` prints its speed against this one.

Per-document text statistics over Arrow string arrays, vectorized over the batch.

What the quality rules measure (:func:`document_stats`): character classes, words,
stopwords, line and paragraph duplication, and Gopher-style word n-gram repetition.
Everything but word segmentation runs as Arrow kernels and numpy over the whole batch:
units (words, lines, paragraphs) are flattened with the index of their document, and
per-document sums are ``bincount``s over those indices.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["document_stats"]


_BULLET = r"^[\-*•●○◦▪▫■□►▸‣⁃∙➢➤✓✔–]"
_ELLIPSIS_END = r"(?:\.\.\.|…)$"
# C4/FineWeb terminal punctuation, plus the CJK forms that NFKC leaves alone.
_TERMINAL_PUNCT_END = r"[.!?\"'”’。！？」』…]$"
_NON_WORD_TOKEN = r"^[\s\p{P}\p{S}]*$"


def _byte_counts(strings: pa.Array, *classes: np.ndarray) -> list[np.ndarray]:
    """Per string, how many UTF-8 bytes fall in each 256-entry boolean byte class.

    One numpy pass over the Arrow data buffer; RE2 counting (``count_substring_regex``)
    is 10-30x slower when most characters match.
    """
    strings = strings.cast(pa.string()) if strings.type != pa.string() else strings
    offsets = np.frombuffer(strings.buffers()[1], dtype=np.int32)
    offsets = offsets[strings.offset : strings.offset + len(strings) + 1].astype(np.int64)
    data = strings.buffers()[2]
    data = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, np.uint8)
    out = []
    for table in classes:
        hits = np.concatenate(
            [[0], np.cumsum(table[data[offsets[0] : offsets[-1]]], dtype=np.int64)]
        )
        out.append(
            (hits[offsets[1:] - offsets[0]] - hits[offsets[:-1] - offsets[0]]).astype(np.float64)
        )
    return out


def _byte_class(*ranges: tuple[int, int]) -> np.ndarray:
    table = np.zeros(256, dtype=bool)
    for lo, hi in ranges:
        table[lo : hi + 1] = True
    return table


# After NFKC (the clean op) digits, spaces and full-width Latin are ASCII. Han: UTF-8 lead
# bytes of U+4000..U+9FFF (CJK unified ideographs). Letters: ASCII letters plus the lead
# bytes of non-ASCII letters (Latin-1 .. Arabic, CJK/Hangul), not of punctuation/symbols.
_SPACE_BYTES = _byte_class((9, 10), (13, 13), (32, 32))
_DIGIT_BYTES = _byte_class((0x30, 0x39))
_LATIN_BYTES = _byte_class((0x41, 0x5A), (0x61, 0x7A), (0xC3, 0xC9))
_HAN_BYTES = _byte_class((0xE4, 0xE9))
_LETTER_BYTES = _byte_class((0x41, 0x5A), (0x61, 0x7A), (0xC3, 0xDB), (0xE4, 0xED))


def _flat(lists: pa.Array) -> tuple[pa.Array, np.ndarray]:
    return pc.list_flatten(lists), pc.list_parent_indices(lists).to_numpy(False)


def _per_doc(parents: np.ndarray, n: int, weights: np.ndarray | None = None) -> np.ndarray:
    return np.bincount(parents, weights=weights, minlength=n).astype(np.float64)


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    return np.divide(num, den, out=np.zeros_like(num, dtype=np.float64), where=den > 0)


def _duplicates(units: pa.Array, parents: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Per doc: how many units repeat an earlier unit of the same doc, and their chars."""
    codes = pc.dictionary_encode(units).indices.to_numpy(False).astype(np.int64)
    lengths = pc.utf8_length(units).to_numpy(False).astype(np.float64)
    order = np.lexsort((np.arange(len(codes)), codes, parents))
    key_p, key_c = parents[order], codes[order]
    repeat = np.zeros(len(order), dtype=bool)
    repeat[1:] = (key_p[1:] == key_p[:-1]) & (key_c[1:] == key_c[:-1])
    dup_idx = order[repeat]
    return _per_doc(parents[dup_idx], n), _per_doc(parents[dup_idx], n, lengths[dup_idx])


class _Units(NamedTuple):
    """Non-empty lines (or paragraphs) of all docs, flattened."""

    units: pa.Array
    parents: np.ndarray
    count: np.ndarray
    duplicates: np.ndarray
    duplicate_chars: np.ndarray

    def matching(self, pattern: str, n_docs: int) -> np.ndarray:
        """Per doc, how many units match the regex ``pattern``."""
        hits = pc.match_substring_regex(self.units, pattern=pattern).to_numpy(False)
        return _per_doc(self.parents[hits], n_docs)


def _units(text: pa.Array, separator: str, n: int) -> _Units:
    units, parents = _flat(pc.split_pattern_regex(text, pattern=separator))
    units = pc.utf8_trim_whitespace(units)
    keep = pc.greater(pc.utf8_length(units), 0)
    units, parents = units.filter(keep), parents[keep.to_numpy(False)]
    return _Units(units, parents, _per_doc(parents, n), *_duplicates(units, parents, n))


_HASH_MULTIPLIERS = np.random.default_rng(20240601).integers(1, 2**63, size=21, dtype=np.uint64) | 1


def _ngram_stats(
    codes: np.ndarray, lengths: np.ndarray, parents: np.ndarray, n_docs: int, sizes: set[int]
) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """For each n-gram size, per doc: chars of the most frequent repeated n-gram times its
    count, and chars of the words covered by n-grams that occurred earlier in the doc.

    ``codes``/``lengths``/``parents``: word id, length and doc index of the flat words.
    """
    out = {size: (np.zeros(n_docs), np.zeros(n_docs)) for size in sizes}
    total = len(codes)
    with np.errstate(over="ignore"):
        # keys[i] hashes (doc, words i..i+size-1); extended by one word per size.
        keys = parents.astype(np.uint64) * _HASH_MULTIPLIERS[-1]
        window_chars = np.zeros(total)
        for size in range(1, min(max(sizes, default=0), total) + 1):
            j = size - 1
            keys = keys[: total - j] + codes[j:].astype(np.uint64) * _HASH_MULTIPLIERS[j]
            window_chars = window_chars[: total - j] + lengths[j:]
            if size in sizes:
                starts = np.flatnonzero(parents[: total - j] == parents[j:])
                out[size] = _repeats(
                    keys[starts], window_chars[starts], starts, parents, lengths, size, n_docs
                )
    return out


def _repeats(
    keys: np.ndarray,
    window_chars: np.ndarray,
    starts: np.ndarray,
    parents: np.ndarray,
    lengths: np.ndarray,
    size: int,
    n_docs: int,
) -> tuple[np.ndarray, np.ndarray]:
    top = np.zeros(n_docs)
    if len(keys) == 0:
        return top, np.zeros(n_docs)
    order = np.argsort(keys)
    k = keys[order]
    new_group = np.ones(len(order), dtype=bool)
    new_group[1:] = k[1:] != k[:-1]
    group_start = np.flatnonzero(new_group)
    counts = np.diff(np.append(group_start, len(order)))
    first = order[group_start[counts >= 2]]
    weighted = counts[counts >= 2] * window_chars[first]
    np.maximum.at(top, parents[starts[first]], weighted)
    # Words inside any later occurrence of an n-gram are covered (each word counted once);
    # the earliest occurrence is found per group, so the sort need not be stable.
    positions = starts[order]
    earliest = np.minimum.reduceat(positions, group_start)
    later = positions[positions != np.repeat(earliest, counts)]
    delta = np.zeros(len(parents) + 1, dtype=np.int64)
    np.add.at(delta, later, 1)
    np.add.at(delta, later + size, -1)
    covered = np.cumsum(delta[:-1]) > 0
    return top, _per_doc(parents[covered], n_docs, lengths[covered])


def _segment(text: pa.Array, segmenter: str) -> tuple[pa.Array, np.ndarray]:
    """Word tokens of every doc, flattened, with the doc index of each token."""
    if segmenter == "whitespace":
        # The same deterministic splitting as the rewrite (Arrow 26's utf8_split_whitespace
        # is not deterministic; see dataforge.text.stats.split_whitespace).
        from dataforge.text.stats import split_whitespace

        flat, parents = _flat(split_whitespace(text))
        # Leading/trailing whitespace yields empty tokens.
        nonempty = pc.greater(pc.utf8_length(flat), 0)
        return flat.filter(nonempty), parents[nonempty.to_numpy(False)]
    import rjieba

    tokens = pa.array([rjieba.cut(t) for t in text.to_pylist()], pa.list_(pa.string()))
    flat, parents = _flat(tokens)
    is_word = pc.invert(pc.match_substring_regex(flat, pattern=_NON_WORD_TOKEN))
    return flat.filter(is_word), parents[is_word.to_numpy(False)]


def document_stats(
    text: pa.Array,
    segmenter: str = "whitespace",
    stopwords: tuple[str, ...] | None = None,
    ngram_sizes: set[int] | frozenset[int] = frozenset(),
) -> dict[str, np.ndarray]:
    """The measures of every document in ``text`` (float64 arrays, one value per doc).

    Keys: chars, cjk_fraction, digit_fraction, words, mean_word_length,
    symbol_word_ratio, alpha_words_fraction, stopwords (distinct stopwords found, only when
    ``stopwords`` is given), bullet_lines_fraction, ellipsis_lines_fraction,
    terminal_punct_lines_fraction,
    duplicate_lines_fraction, duplicate_line_chars_fraction, duplicate_paragraphs_fraction,
    duplicate_paragraph_chars_fraction, and per n in ``ngram_sizes``
    ``top_<n>gram_fraction`` / ``dup_<n>gram_fraction`` (word characters in the most
    frequent repeated n-gram times its count / in repeated n-grams, as shares of ``chars``).
    """
    n = len(text)

    chars = pc.utf8_length(text).to_numpy(False).astype(np.float64)
    m: dict[str, np.ndarray] = {"chars": chars}
    spaces, digits, han, latin = _byte_counts(
        text, _SPACE_BYTES, _DIGIT_BYTES, _HAN_BYTES, _LATIN_BYTES
    )
    m["cjk_fraction"] = _ratio(han, han + latin)
    m["digit_fraction"] = _ratio(digits, chars - spaces)
    symbols = sum(pc.count_substring(text, s).to_numpy(False) for s in ("#", "...", "…"))

    words, parents = _segment(text, segmenter)
    word_lengths = pc.utf8_length(words).to_numpy(False).astype(np.float64)
    m["words"] = _per_doc(parents, n)
    word_chars = _per_doc(parents, n, word_lengths)
    m["mean_word_length"] = _ratio(word_chars, m["words"])
    m["symbol_word_ratio"] = _ratio(symbols.astype(np.float64), m["words"])
    has_letter = _byte_counts(words, _LETTER_BYTES)[0] > 0
    m["alpha_words_fraction"] = _ratio(_per_doc(parents[has_letter], n), m["words"])
    if stopwords is not None:
        lower = pc.utf8_lower(words)
        stop_idx = pc.index_in(lower, value_set=pa.array(stopwords, pa.string()))
        stop_idx = pc.fill_null(stop_idx, -1).to_numpy(False).astype(np.int64)
        hit = stop_idx >= 0
        pairs = np.unique(parents[hit].astype(np.int64) * 1000 + stop_idx[hit])
        m["stopwords"] = _per_doc(pairs // 1000, n)

    lines = _units(text, r"\n", n)
    m["bullet_lines_fraction"] = _ratio(lines.matching(_BULLET, n), lines.count)
    m["ellipsis_lines_fraction"] = _ratio(lines.matching(_ELLIPSIS_END, n), lines.count)
    m["terminal_punct_lines_fraction"] = _ratio(lines.matching(_TERMINAL_PUNCT_END, n), lines.count)
    m["duplicate_lines_fraction"] = _ratio(lines.duplicates, lines.count)
    m["duplicate_line_chars_fraction"] = _ratio(lines.duplicate_chars, chars)
    paragraphs = _units(text, r"\n\s*\n", n)
    m["duplicate_paragraphs_fraction"] = _ratio(paragraphs.duplicates, paragraphs.count)
    m["duplicate_paragraph_chars_fraction"] = _ratio(paragraphs.duplicate_chars, chars)

    codes = pc.dictionary_encode(words).indices.to_numpy(False).astype(np.int64)
    for size, (top, covered) in _ngram_stats(codes, word_lengths, parents, n, ngram_sizes).items():
        # Shares of all characters, as in Gopher (and datatrove): whitespace and punctuation
        # count in the denominator, not in the n-grams.
        m[f"top_{size}gram_fraction"] = _ratio(top, chars)
        m[f"dup_{size}gram_fraction"] = _ratio(covered, chars)
    return m
