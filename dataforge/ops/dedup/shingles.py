"""Text normalization and vectorized shingle hashing shared by the dedup methods.

Every method hashes *shingles* of a normalized text: character n-grams (``char``), word
n-grams on whitespace-separated words (``word``) or on jieba words (``jieba``). ``auto``
picks ``char`` for Chinese (no spaces between words) and ``word`` otherwise.

Hashing is done for a whole batch at once, with no per-shingle Python loop: the batch's
normalized texts are joined and decoded into one array of code points, and any substring
``[s, e)`` gets the polynomial hash ``(H[e] - H[s]) * P^-s mod 2^64`` from one prefix-sum
array ``H[i] = sum_{k<i} (cp[k] + 1) * P^k`` (numpy's uint64 arithmetic wraps mod 2^64;
``P`` is odd so it is invertible). Word n-grams repeat the same trick one level up over the
sequence of word hashes. Every hash goes through the splitmix64 finalizer, so downstream
code may treat shingle hashes as uniform 64-bit values.

Where ``make dedup-verify`` built ``_shingles`` (``_shingles.cpp``), the same hashes come from
one rolling pass per document in C++ with the GIL released (two multiplications per
n-gram, no prefix sums, power tables or temporaries); the numpy code runs where it is not
built. Both give identical values (tested).

Bounded work: a text is cut to ``max_chars`` normalized characters, and a document with
more than ``max_shingles`` shingles keeps only its ``max_shingles`` smallest distinct shingle
hashes (a bottom-k sample: consistent across documents, so two copies of a 10 MB document
keep the same sample and still collide).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dataforge.text.forms import normalize_form

try:
    from dataforge.ops.dedup import _shingles
except ImportError:  # not built: the numpy code below
    _shingles = None

__all__ = [
    "SHINGLE_KINDS",
    "ShingleSet",
    "mix64",
    "normalize_texts",
    "normalized_code_points",
    "shingle_hashes",
    "shingle_kind_for",
    "text_hashes",
]

SHINGLE_KINDS = ("auto", "char", "word", "jieba")
_P = np.uint64(0x9E3779B97F4A7C15 | 1)
_P_INV = np.uint64(pow(int(_P), -1, 1 << 64))
_PUNCT = r"[\p{P}\p{S}]+"
_SPACE = r"[\s\p{Z}]+"


def mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64 finalizer over a uint64 array (a bijection that spreads every input bit)."""
    return _mix64_inplace(np.array(x, dtype=np.uint64))


def _mix64_inplace(x: np.ndarray) -> np.ndarray:
    """:func:`mix64` overwriting the uint64 array ``x`` (no temporaries of its size but one)."""
    tmp = np.empty_like(x)
    with np.errstate(over="ignore"):
        for shift, mult in ((30, 0xBF58476D1CE4E5B9), (27, 0x94D049BB133111EB)):
            np.right_shift(x, np.uint64(shift), out=tmp)
            x ^= tmp
            x *= np.uint64(mult)
        np.right_shift(x, np.uint64(31), out=tmp)
        x ^= tmp
    return x


def shingle_kind_for(shingle: str, lang: str) -> str:
    """The concrete shingle kind for a configured kind and a record language."""
    if shingle != "auto":
        return shingle
    return "char" if lang.split("-")[0].lower() in ("zh", "ja", "ko") else "word"


def normalize_texts(
    texts: pa.Array | pa.ChunkedArray | Sequence[str],
    *,
    nfkc: bool = True,
    lowercase: bool = True,
    strip: bool = True,
    keep_spaces: bool = True,
) -> pa.Array:
    """Normalize texts with Arrow kernels (no Python loop).

    Args:
        texts: the texts.
        nfkc: apply Unicode NFKC (full-width -> ASCII, compatibility forms).
        lowercase: Unicode lowercase.
        strip: remove punctuation and symbols (without a space: ``os.path`` and ``ospath``
            agree) and whitespace runs.
        keep_spaces: with ``strip``, replace each whitespace run by one space (word
            shingles need word boundaries) instead of removing it (char shingles).
    """
    arr = texts if isinstance(texts, (pa.Array, pa.ChunkedArray)) else pa.array(texts, pa.string())
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    arr = pc.fill_null(arr, "")
    if nfkc:
        arr = normalize_form(arr, "NFKC")
    if lowercase:
        arr = pc.utf8_lower(arr)
    if strip:
        arr = pc.replace_substring_regex(arr, _PUNCT, "")
        arr = pc.replace_substring_regex(arr, _SPACE, " " if keep_spaces else "")
        if keep_spaces:
            arr = pc.utf8_trim_whitespace(arr)
    return arr


class ShingleSet:
    """Shingle hashes of a batch: ``hashes[offsets[i]:offsets[i + 1]]`` belong to document i."""

    def __init__(self, hashes: np.ndarray, offsets: np.ndarray) -> None:
        self.hashes = hashes
        self.offsets = offsets

    @property
    def counts(self) -> np.ndarray:
        return np.diff(self.offsets)

    def doc_index(self) -> np.ndarray:
        """Document index of every hash."""
        return np.repeat(np.arange(len(self.offsets) - 1), self.counts)

    def take(self, rows: np.ndarray) -> ShingleSet:
        """The documents ``rows``, in that order (one vectorized gather)."""
        rows = np.asarray(rows, dtype=np.int64)
        counts = self.counts[rows]
        offsets = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        starts = np.repeat(self.offsets[rows] - offsets[:-1], counts)
        return ShingleSet(self.hashes[np.arange(offsets[-1]) + starts], offsets)

    @staticmethod
    def concat(sets: Sequence[ShingleSet]) -> ShingleSet:
        """The documents of ``sets`` one after another."""
        counts = np.concatenate([np.zeros(0, np.int64), *(s.counts for s in sets)])
        offsets = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        filled = [s.hashes for s in sets if len(s.hashes)]  # empty parts keep the dtype
        hashes = np.concatenate(filled) if filled else np.zeros(0, np.uint64)
        return ShingleSet(hashes, offsets)

    @staticmethod
    def empty(docs: int = 0) -> ShingleSet:
        """``docs`` documents without shingles."""
        return ShingleSet(np.zeros(0, np.uint64), np.zeros(docs + 1, np.int64))


_POWER_TABLES = (np.ones(1, dtype=np.uint64), np.ones(1, dtype=np.uint64))


def _powers(n: int) -> tuple[np.ndarray, np.ndarray]:
    """``P^i`` and ``P^-i`` for i < n (cached per process, grown by doubling). The two
    tables are one object, read once and replaced whole: threads of the driver's lane
    never see one table grown and the other not."""
    global _POWER_TABLES
    powers, inverses = _POWER_TABLES
    if len(powers) < n:
        size = max(n, 2 * len(powers))
        with np.errstate(over="ignore"):
            powers = np.full(size, _P, dtype=np.uint64)
            powers[0] = 1
            inverses = np.full(size, _P_INV, dtype=np.uint64)
            inverses[0] = 1
            powers = np.cumprod(powers, dtype=np.uint64)
            inverses = np.cumprod(inverses, dtype=np.uint64)
        _POWER_TABLES = (powers, inverses)
    return powers[:n], inverses[:n]


_GROUP_CODE_POINTS = 1 << 21
"""Code points hashed at a time. A range's hash does not depend on where the range lies,
so grouping does not change any hash; it bounds the power tables of :func:`_powers` (8
bytes per position, twice), which the verification texts of a large dedup barrier (tens
of millions of code points in one call) grew to ~0.5 GB and ~0.6 s per process."""


def _groups(cps: np.ndarray, offsets: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """``(code points, offsets)`` of each group of :func:`_doc_groups` (one group: the
    input as it is; always so with the compiled kernels, which need no power tables)."""
    if _shingles is not None:
        return [(cps, offsets)]
    bounds = _doc_groups(offsets)
    if len(bounds) <= 2:
        return [(cps, offsets)]
    return [
        (cps[offsets[a] : offsets[b]], offsets[a : b + 1] - offsets[a])
        for a, b in itertools.pairwise(bounds)
    ]


def _doc_groups(offsets: np.ndarray) -> list[int]:
    """Document boundaries ``[0, ..., len(offsets) - 1]`` of consecutive groups of at most
    :data:`_GROUP_CODE_POINTS` code points (a longer document is a group of its own)."""
    docs = len(offsets) - 1
    if docs <= 0 or offsets[-1] - offsets[0] <= _GROUP_CODE_POINTS:
        return [0, docs]
    bounds = [0]
    while bounds[-1] < docs:
        a = bounds[-1]
        b = int(np.searchsorted(offsets, offsets[a] + _GROUP_CODE_POINTS, side="right")) - 1
        bounds.append(min(max(b, a + 1), docs))
    return bounds


def _prefix_hash(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Prefix sums ``H`` and inverse powers for substring hashing over ``values``."""
    n = len(values)
    powers, inv = _powers(n + 1)
    prefix = np.zeros(n + 1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        np.cumsum(values * powers[:n], dtype=np.uint64, out=prefix[1:])
    return prefix, inv


def _range_hashes(prefix: np.ndarray, inv: np.ndarray, s: np.ndarray, e: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        raw = prefix[e]
        raw -= prefix[s]
        raw *= inv[s]
        # Mixing in the length keeps ranges of different lengths apart.
        length = (e - s).astype(np.uint64)
        length *= np.uint64(0xD6E8FEB86659FD93)
        raw ^= length
    return _mix64_inplace(raw)


def _ngram_ranges(starts: np.ndarray, lengths: np.ndarray, n: int) -> tuple[np.ndarray, ...]:
    """[s, e) of every n-gram of every segment; a non-empty segment shorter than n gives
    one range (the whole segment), an empty one gives none."""
    counts = np.where(lengths > 0, np.maximum(lengths - n + 1, 1), 0)
    total = int(counts.sum())
    first = np.cumsum(counts) - counts
    s = np.repeat(starts - first, counts)
    s += np.arange(total, dtype=s.dtype)
    e = np.repeat(np.minimum(lengths, n), counts)
    e += s
    return s, e, counts


def _code_points(texts: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """All texts as one uint64 code-point array (+1, so that no value is 0) and offsets.
    (uint32 would halve the bytes, but measured slower in benchmarks/dedup_speed.py: about
    30k more page faults per 3,000 documents, from the allocator's reuse of freed arrays.)"""
    lengths = pc.utf8_length(texts).to_numpy(zero_copy_only=False).astype(np.int64)
    joined = "".join(texts.to_pylist())
    cps = np.frombuffer(joined.encode("utf-32-le"), dtype=np.uint32).astype(np.uint64) + np.uint64(
        1
    )
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return cps, offsets


_CLASS_LIMIT = 0x110000  # all of Unicode; index = code point + 1
_UNSEEN = 255
_CLASSES = np.full(_CLASS_LIMIT + 1, _UNSEEN, dtype=np.uint8)


def _char_classes(cps: np.ndarray) -> np.ndarray:
    """uint8 per code point (+1): 1 = punctuation or symbol, 2 = whitespace, else 0.

    Classified with the same Arrow regexes as :func:`normalize_texts`, lazily: only code
    points never seen before in this process go through the regexes (a few thousand
    distinct characters in a whole corpus), the rest is one table lookup."""
    cls = _CLASSES[cps]
    unseen = cls == _UNSEEN
    if not unseen.any():
        return cls
    new = cps[unseen]
    if len(new):
        new = np.unique(new)
        points = (new - 1).astype(np.int64)
        points[(points >= 0xD800) & (points < 0xE000)] = ord("a")  # lone surrogates
        chars = pa.array(list(map(chr, points.tolist())), pa.string())
        punct = pc.match_substring_regex(chars, f"^{_PUNCT}$").to_numpy(zero_copy_only=False)
        space = pc.match_substring_regex(chars, f"^{_SPACE}$").to_numpy(zero_copy_only=False)
        _CLASSES[new] = np.where(space, 2, np.where(punct, 1, 0))
    return _CLASSES[cps]


def normalized_code_points(
    texts: pa.Array,
    *,
    nfkc: bool = True,
    lowercase: bool = True,
    strip: bool = True,
    keep_spaces: bool = True,
    max_chars: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """What :func:`normalize_texts` computes, as code points (+1) and offsets, with the
    punctuation/whitespace pass done in numpy (Arrow's Unicode regexes are 3x slower).
    ``max_chars`` cuts each text before stripping."""
    arr = texts.combine_chunks() if isinstance(texts, pa.ChunkedArray) else texts
    arr = pc.fill_null(arr, "")
    if nfkc:
        arr = normalize_form(arr, "NFKC")
    if lowercase:
        arr = pc.utf8_lower(arr)
    if max_chars is not None:
        arr = pc.utf8_slice_codeunits(arr, 0, max_chars)
    cps, offsets = _code_points(arr)
    if not strip or len(cps) == 0:
        return cps, offsets
    cls = _char_classes(cps)
    if not keep_spaces:
        keep = cls == 0
        return cps[keep], _kept_offsets(keep, offsets)
    keep = cls != 1
    offsets = _kept_offsets(keep, offsets)
    cps, space = cps[keep], cls[keep] == 2
    # Runs collapse to their first space; a space that starts the document goes too; then
    # a space left last in its document (like utf8_trim_whitespace).
    keep = ~space
    keep[1:] |= ~space[:-1]
    starts = offsets[:-1][offsets[:-1] < len(space)]
    keep[starts] = ~space[starts]
    offsets = _kept_offsets(keep, offsets)
    cps, space = cps[keep], space[keep]
    last = offsets[1:][offsets[1:] > offsets[:-1]] - 1
    keep = np.ones(len(cps), dtype=bool)
    keep[last] = ~space[last]
    cps[space] = ord(" ") + 1
    return cps[keep], _kept_offsets(keep, offsets)


def _kept_offsets(keep: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Document offsets after keeping the positions ``keep`` (counting the few dropped
    positions: a cumulative sum over every position is several times slower)."""
    return offsets - np.searchsorted(np.flatnonzero(~keep), offsets)


def _words(cps: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Word ranges (split on the single spaces left by normalization) and words per doc."""
    n = len(cps)
    is_space = cps == np.uint64(ord(" ") + 1)
    boundary = np.zeros(n + 1, dtype=bool)
    boundary[offsets] = True  # document starts and the end of the last document
    prev_break = np.concatenate([[True], is_space[:-1]]) | boundary[:-1]
    start_mask = ~is_space & prev_break
    next_break = np.concatenate([is_space[1:], [True]]) | boundary[1:]
    end_mask = ~is_space & next_break
    word_s = np.flatnonzero(start_mask)
    word_e = np.flatnonzero(end_mask) + 1
    per_doc = np.diff(np.searchsorted(word_s, offsets))
    return word_s, word_e, per_doc


def shingle_hashes(
    texts: pa.Array | tuple[np.ndarray, np.ndarray],
    kind: str,
    ngram: int,
    *,
    max_chars: int = 1_000_000,
    max_shingles: int = 20_000,
) -> ShingleSet:
    """Hash the n-gram shingles of already-normalized texts.

    Args:
        texts: normalized texts (``word``/``jieba``: words separated by single spaces), or
            their ``(code points + 1, offsets)`` from :func:`normalized_code_points`.
        kind: ``char`` or ``word`` (``jieba`` texts arrive pre-segmented, as ``word``).
        ngram: n-gram size in characters (``char``) or words (``word``).
        max_chars: longer texts are cut to this many characters first (texts only).
        max_shingles: a document keeps at most this many (smallest, distinct) hashes.
    """
    if kind not in ("char", "word"):
        raise ValueError(f"shingle kind {kind!r}; valid here: 'char', 'word'")
    if ngram < 1:
        raise ValueError(f"ngram must be >= 1, got {ngram}")
    if isinstance(texts, tuple):
        cps, offsets = texts
    else:
        cps, offsets = _code_points(pc.utf8_slice_codeunits(texts, 0, max_chars))
    groups = _groups(cps, offsets)
    if len(groups) > 1:  # a long batch: hashed a group of documents at a time
        return ShingleSet.concat(
            [shingle_hashes(g, kind, ngram, max_shingles=max_shingles) for g in groups]
        )
    if kind == "char":
        hashes, counts = _window_hashes(cps, offsets, ngram)
    else:
        word_s, word_e, per_doc = _words(cps, offsets)
        word_h = _span_hashes(cps, word_s, word_e)
        word_offsets = np.zeros(len(per_doc) + 1, dtype=np.int64)
        np.cumsum(per_doc, out=word_offsets[1:])
        hashes, counts = _window_hashes(word_h, word_offsets, ngram)
    out_offsets = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=out_offsets[1:])
    result = ShingleSet(hashes, out_offsets)
    if len(counts) and counts.max() > max_shingles:
        result = _cap(result, max_shingles)
    return result


def _cap(shingles: ShingleSet, max_shingles: int) -> ShingleSet:
    """Bottom-k sample of the documents with too many shingles (only those few loop; the
    documents between them are copied as whole runs)."""
    counts = shingles.counts.copy()
    offsets, hashes = shingles.offsets, shingles.hashes
    pieces, done = [], 0
    for i in np.flatnonzero(counts > max_shingles).tolist():
        h = np.unique(hashes[offsets[i] : offsets[i + 1]])
        if len(h) > max_shingles:
            h = np.partition(h, max_shingles - 1)[:max_shingles]
        pieces += [hashes[offsets[done] : offsets[i]], h]
        counts[i], done = len(h), i + 1
    pieces.append(hashes[offsets[done] : offsets[-1]])
    out_offsets = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=out_offsets[1:])
    return ShingleSet(np.concatenate(pieces).astype(hashes.dtype, copy=False), out_offsets)


def text_hashes(texts: pa.Array | tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """One 64-bit hash of each whole (normalized) text, from the same prefix-sum array."""
    cps, offsets = texts if isinstance(texts, tuple) else _code_points(texts)
    groups = _groups(cps, offsets)
    if len(groups) > 1:
        return np.concatenate([text_hashes(g) for g in groups])
    return _span_hashes(cps, offsets[:-1], offsets[1:])


def _window_hashes(values: np.ndarray, offsets: np.ndarray, n: int) -> tuple[np.ndarray, ...]:
    """Hashes of every n-gram of every document (``values[offsets[d]:offsets[d + 1]]``; a
    non-empty document shorter than n: one hash of all of it) and their counts per document."""
    lengths = np.diff(offsets)
    if _shingles is not None:
        counts = np.where(lengths > 0, np.maximum(lengths - n + 1, 1), 0)
        return np.frombuffer(_shingles.windows(values, offsets, n), np.uint64), counts
    prefix, inv = _prefix_hash(values)
    s, e, counts = _ngram_ranges(offsets[:-1], lengths, n)
    return _range_hashes(prefix, inv, s, e), counts


def _span_hashes(values: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The hash of each range ``values[starts[i]:ends[i]]``."""
    if _shingles is not None:
        return np.frombuffer(
            _shingles.spans(values, np.asarray(starts, np.int64), np.asarray(ends, np.int64)),
            np.uint64,
        )
    prefix, inv = _prefix_hash(values)
    return _range_hashes(prefix, inv, starts, ends)
