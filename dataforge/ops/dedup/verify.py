"""Exact verification of candidate pairs on the shingles of the two texts.

A candidate pair (from MinHash buckets or SimHash tables) is only a hint; the decision is
taken on the shingle sequences themselves, two measures per pair:

* **Jaccard** of the two distinct shingle sets, computed exactly; it must reach the
  threshold.
* **Own content**: the share of a document's characters (normalized text, one character
  n-gram per position, whatever the Jaccard shingles are: a URL or a line of code is one
  "word" but many characters) that lie in runs of at least ``block`` consecutive
  positions the other document lacks. Near-duplicates differ by
  scattered edits (short runs), or by a block on *one* side only (added boilerplate, a
  truncated tail); two distinct pages of one template (sibling manual pages, reviews of one
  product, items of one news agency) each have a body of their own. A pair is kept only
  when at least one of the two documents has at most ``max_own`` own content: overlap in
  boilerplate alone never merges two documents, however long the boilerplate. Both are
  per document (``Texts.blocks``, ``Texts.max_owns``): Chinese pages of one template
  share headers and phrasing line by line, so their own content comes in runs of a short
  line (9 character 3-grams count), where English prose needs 20 character 8-grams.
* **Own content beside the template** (``ResidueRule``): where the planner has cut each
  side's residue (``Texts.residue``: its content beside the corpus's template,
  :mod:`dataforge.ops.dedup.template`) and both have enough of it, own content is measured
  on the residue instead: the share of its positions in runs of ``block`` residue n-grams
  the other side lacks (the template between two short lines of a sibling's own no longer
  splits them into short runs), against ``ResidueRule.max_own``.

Vectorized over a chunk of pairs: every shingle (a 32-bit hash) is tagged with its pair's
number in the high 23 bits. Membership is a merge, never a binary search (which costs a
cache miss per step): two sorted arrays are concatenated and sorted with the stable sort
(timsort merges two sorted runs in linear time); with one low bit marking the side, a value
of one side directly follows its equal on the other side. Per position ("does the other
side have the n-gram here") the distinct values of a side are merged and mapped back with
``np.unique``'s inverse. Runs are found with one pass of flags over the concatenated
sequences. A wrong match needs two
shingles of one pair to agree on 32 bits (about ``n^2 / 2^33``: 5e-4 for 2,000 shingles),
which moves a similarity by one shingle.

Where the compiled ``_verify`` is built (``make dedup-verify``, part of ``make test`` and
``make demo``) both measures run pair by pair in C++ with a small hash set of one document,
reading each pair's documents where they lie in the shard's pools (no copies), with the GIL
released: the same values (the tests compare the two, bit for bit, on real and generated
sets). On the 100 MB ``benchmarks/peers.py`` corpus (39k screened pairs) the shards'
verification took 1.56-1.64 s against 4.23-4.44 s with the numpy kernels (the whole
barrier 4.6-5.0 s against 7.7-7.9 s; in-process, 3 interleaved rounds).
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from dataforge.ops.dedup.shingles import ShingleSet

try:
    from dataforge.ops.dedup import _verify
except ImportError:  # not built: the numpy kernels below
    _verify = None

__all__ = ["ResidueRule", "Texts", "verify_pairs", "verify_rows"]

_HASH_BITS = np.uint64((1 << 40) - 1)
_MAX_PAIRS = 1 << 23  # pair << 40 plus one side bit fit in 64 bits
_CHUNK_ELEMENTS = 1 << 22


@dataclasses.dataclass(frozen=True)
class Texts:
    """What verification compares of each document, both in text order."""

    shingles: ShingleSet
    """The configured shingles (Jaccard)."""
    chars: ShingleSet
    """Character n-grams, one per position (own content)."""
    blocks: np.ndarray | None = None
    """Per document, the run of unshared ``chars`` from which they are its own content
    (int64; None: the ``block`` the verification is given, for every document)."""
    max_owns: np.ndarray | None = None
    """Per document, the most own content it may have as the less original side of a
    duplicate (float64; None: the ``max_own`` the verification is given)."""
    templated: np.ndarray | None = None
    """Per document, whether the template rule applies to it (bool; None: to none)."""
    residue: ShingleSet | None = None
    """Per document, its ``chars`` beside the corpus's template, in text order
    (:mod:`dataforge.ops.dedup.template`); None until the template is known."""

    def take(self, rows: np.ndarray) -> Texts:
        rows = np.asarray(rows, np.int64)
        rules = [
            None if r is None else r[rows] for r in (self.blocks, self.max_owns, self.templated)
        ]
        residue = None if self.residue is None else self.residue.take(rows)
        return Texts(self.shingles.take(rows), self.chars.take(rows), *rules, residue)

    @staticmethod
    def concat(parts: list[Texts]) -> Texts:
        with_rules = [p.blocks is not None and p.max_owns is not None for p in parts]
        if any(with_rules) and not all(with_rules):
            raise ValueError("Texts.concat: parts with and without per-document rules")
        rules = [None, None]
        if parts and all(with_rules):
            rules = [np.concatenate([p.blocks for p in parts]),
                     np.concatenate([p.max_owns for p in parts])]  # fmt: skip
        counts = [len(p.chars.offsets) - 1 for p in parts]
        templated = None
        if any(p.templated is not None for p in parts):
            templated = np.concatenate(
                [np.zeros(0, bool)]
                + [np.zeros(n, bool) if p.templated is None else p.templated
                   for p, n in zip(parts, counts, strict=True)]
            )  # fmt: skip
        residue = None
        if parts and all(p.residue is not None for p in parts):
            residue = ShingleSet.concat([p.residue for p in parts])
        return Texts(
            ShingleSet.concat([p.shingles for p in parts]),
            ShingleSet.concat([p.chars for p in parts]),
            *rules,
            templated,
            residue,
        )

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays held."""
        sets = [self.shingles, self.chars] + ([self.residue] if self.residue else [])
        rules = [r for r in (self.blocks, self.max_owns, self.templated) if r is not None]
        return sum(s.hashes.nbytes + s.offsets.nbytes for s in sets) + sum(r.nbytes for r in rules)

    def with_residue(self, residue: ShingleSet) -> Texts:
        return dataclasses.replace(self, residue=residue)

    @staticmethod
    def empty(docs: int = 0) -> Texts:
        return Texts(
            ShingleSet.empty(docs),
            ShingleSet.empty(docs),
            np.ones(docs, np.int64),
            np.zeros(docs),
            np.zeros(docs, bool),
        )


@dataclasses.dataclass(frozen=True)
class ResidueRule:
    """Verification on the residues (``Texts.residue``: each side beside the corpus's
    template) where both sides have one: a pair is a duplicate when one of the two has
    at most ``max_own`` of its residue in runs of its ``block`` positions the other side
    lacks. Two sibling pages' residues are their own bodies, which the other lacks; an
    edited copy keeps most of its page's."""

    max_own: float
    min_residue: int = 1
    """Residue positions each side needs for the rule (shorter: the rule of the whole
    texts, ``max_own`` of :func:`verify_rows`)."""
    min_shared: float = 0.0
    """The share of its residue positions the other side has that the side with little
    own content needs too (a short residue splits into runs too short to count)."""


def verify_pairs(
    left: Texts,
    right: Texts,
    threshold: float,
    block: int,
    max_own: float,
    residue_rule: ResidueRule | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Decide row-aligned pairs: document i of ``left`` with document i of ``right``
    (:func:`verify_rows` with every row in order)."""
    rows = np.arange(len(left.shingles.offsets) - 1)
    return verify_rows(left, rows, right, rows, threshold, block, max_own, residue_rule)


def verify_rows(
    left: Texts,
    left_rows: np.ndarray,
    right: Texts,
    right_rows: np.ndarray,
    threshold: float,
    block: int,
    max_own: float,
    residue_rule: ResidueRule | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Decide the pairs (document ``left_rows[i]`` of ``left``, ``right_rows[i]`` of
    ``right``); the compiled kernels read the documents where they are, the numpy ones
    take copies.

    Staged, so that most pairs cost only their Jaccard: own content is measured only for
    pairs that reach ``threshold`` without being equal sets: on the residues where the
    ``residue_rule`` applies, else on the whole texts, first on the shorter side
    (contained copies and edited copies end there), then on the other one.

    Args:
        left: one side's documents.
        left_rows: per pair, its document of ``left``.
        right: the other side's documents.
        right_rows: per pair, its document of ``right``.
        threshold: the Jaccard a duplicate reaches.
        block: a run of this many consecutive character n-grams missing from the other
            side is content of its own (for documents without their own ``Texts.blocks``).
        max_own: the most own content the less original side of a duplicate may have
            (for documents without their own ``Texts.max_owns``).
        residue_rule: the rule of pairs whose sides both have a residue (None: none).

    Returns:
        ``(jaccard, duplicate)`` per pair.
    """
    left_rows = np.asarray(left_rows, dtype=np.int64)
    right_rows = np.asarray(right_rows, dtype=np.int64)
    if _verify is not None:
        jaccard = _native(_verify.jaccard, left.shingles, left_rows, right.shingles, right_rows)
    else:
        left, right = left.take(left_rows), right.take(right_rows)
        left_rows = right_rows = np.arange(len(left_rows))
        jaccard = _chunked(
            left.shingles.counts + right.shingles.counts,
            lambda lo, hi: _jaccard(left.shingles, right.shingles, lo, hi),
        )
    duplicate = jaccard >= threshold
    unsure = np.flatnonzero(duplicate & (jaccard < 1.0))
    sides = (left, left_rows, right, right_rows)
    on_residue = np.zeros(len(unsure), bool)
    if residue_rule is not None and left.residue is not None and right.residue is not None:
        on_residue = (
            np.minimum(
                left.residue.counts[left_rows[unsure]], right.residue.counts[right_rows[unsure]]
            )
            >= residue_rule.min_residue
        )
        pairs = unsure[on_residue]
        copied = np.zeros(len(pairs), bool)
        for side in (1, -1):  # the second side only where the first did not decide
            todo = np.flatnonzero(~copied)
            ones = np.full(len(todo), side)
            low = _own_of(sides, pairs[todo], ones, block, "residue") <= residue_rule.max_own
            todo, ones = todo[low], ones[low]
            if residue_rule.min_shared > 0 and len(todo):
                unshared = _own_of(sides, pairs[todo], ones, 1, "residue", False)
                todo = todo[1.0 - unshared >= residue_rule.min_shared]
            copied[todo] = True
        duplicate[pairs] = copied
    unsure = unsure[~on_residue]
    if len(unsure):
        swap = left.chars.counts[left_rows[unsure]] > right.chars.counts[right_rows[unsure]]
        shorter = np.where(swap, -1, 1)
        copied = _own_of(sides, unsure, shorter, block) <= _max_own_of(
            sides, unsure, shorter, max_own
        )
        longer_needed = np.flatnonzero(~copied)
        if len(longer_needed):
            rows, longer = unsure[longer_needed], -shorter[longer_needed]
            copied[longer_needed] = _own_of(sides, rows, longer, block) <= _max_own_of(
                sides, rows, longer, max_own
            )
        duplicate[unsure] = copied
    return jaccard, duplicate


def _max_own_of(sides: tuple, pairs: np.ndarray, side: np.ndarray, max_own: float) -> np.ndarray:
    """The ``max_own`` of the left (``side`` 1) or right (-1) document of ``pairs``."""
    left, left_rows, right, right_rows = sides
    out = np.full(len(pairs), max_own)
    for texts, rows, pick in ((left, left_rows, side > 0), (right, right_rows, side < 0)):
        if texts.max_owns is not None:
            out[pick] = texts.max_owns[rows[pairs[pick]]]
    return out


def _own_of(
    sides: tuple,
    pairs: np.ndarray,
    side: np.ndarray,
    block: int,
    measured: str = "chars",
    per_document_block: bool = True,
) -> np.ndarray:
    """Own content of the left (``side`` 1) or right (-1) document of ``pairs``, each
    with its document's block (``Texts.blocks``, else ``block``); ``sides``: ``(left,
    left_rows, right, right_rows)`` as :func:`verify_rows` has them. ``measured``: the
    positions measured (``chars``, or ``residue``), against the other side's ``chars``;
    ``per_document_block`` False: ``block`` for every document."""
    left, left_rows, right, right_rows = sides
    first = np.where(side > 0, 0, 1)
    own = np.zeros(len(pairs))
    for pick in (0, 1):
        sel = np.flatnonzero(first == pick)
        if len(sel) == 0:
            continue
        mine, mine_rows, other, other_rows = (
            (left, left_rows, right, right_rows)
            if pick == 0
            else (right, right_rows, left, left_rows)
        )
        mine_rows, other_rows = mine_rows[pairs[sel]], other_rows[pairs[sel]]
        blocks = (
            np.full(len(sel), block, np.int64)
            if mine.blocks is None or not per_document_block
            else np.ascontiguousarray(mine.blocks[mine_rows], dtype=np.int64)
        )
        positions = getattr(mine, measured)
        if _verify is not None:
            own[sel] = _native(_verify.own, positions, mine_rows, other.chars, other_rows, blocks)
        else:
            a, b = positions.take(mine_rows), other.chars.take(other_rows)
            own[sel] = _chunked(a.counts + b.counts, functools.partial(_own, a, b, blocks=blocks))
    return own


def _native(kernel, a: ShingleSet, a_rows: np.ndarray, b: ShingleSet, b_rows: np.ndarray, *args):
    """A compiled kernel (``_verify.jaccard`` or ``_verify.own``) on two pools of
    documents and a document number per pair on each side: one float64 per pair."""
    values = kernel(
        _kernel_values(a.hashes),
        np.ascontiguousarray(a.offsets, dtype=np.int64),
        np.ascontiguousarray(a_rows, dtype=np.int64),
        _kernel_values(b.hashes),
        np.ascontiguousarray(b.offsets, dtype=np.int64),
        np.ascontiguousarray(b_rows, dtype=np.int64),
        *args,
    )
    return np.frombuffer(values, dtype=np.float64)


def _kernel_values(hashes: np.ndarray) -> np.ndarray:
    """Hashes as the kernels read them: 4-byte (as the planner ships them) or 8-byte
    unsigned values where they are, anything else converted (converting the 4-byte pools
    to 8 bytes per call took 4x the kernels' own time)."""
    if hashes.dtype in (np.uint32, np.uint64):
        return np.ascontiguousarray(hashes)
    return np.ascontiguousarray(hashes, dtype=np.uint64)


def _chunked(sizes: np.ndarray, fn) -> np.ndarray:
    """``fn(lo, hi)`` over chunks of whole pairs of about _CHUNK_ELEMENTS shingles (and
    < 2^23 pairs, the bits of the pair tag), concatenated."""
    n = len(sizes)
    out = np.zeros(n)
    start = 0
    while start < n:
        cum = np.cumsum(sizes[start : start + _MAX_PAIRS])
        stop = start + max(1, int(np.searchsorted(cum, _CHUNK_ELEMENTS, side="right")))
        out[start:stop] = fn(start, stop)
        start = stop
    return out


def _tagged(sets: ShingleSet, start: int, stop: int, distinct: bool = True):
    """``(pair << 40 | hash)`` in text order, and (``distinct``) its sorted distinct values."""
    lo, hi = sets.offsets[start], sets.offsets[stop]
    pair = np.repeat(np.arange(stop - start, dtype=np.uint64), sets.counts[start:stop])
    tagged = (pair << np.uint64(40)) | (sets.hashes[lo:hi].astype(np.uint64) & _HASH_BITS)
    return tagged, (np.unique(tagged) if distinct else None)


def _present(values: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """Per query (any order, may repeat): is it in ``values`` (any order)."""
    distinct, inverse = np.unique(queries, return_inverse=True)
    return _found(np.sort(values), distinct)[inverse]


def _found(haystack: np.ndarray, needles: np.ndarray) -> np.ndarray:
    """Per needle (sorted, distinct): is it in ``haystack`` (sorted). One stable merge; the
    side bit puts a needle right after its equal in the haystack."""
    one = np.uint64(1)
    merged = np.concatenate([haystack << one, (needles << one) | one])
    merged.sort(kind="stable")
    is_needle = (merged & one).astype(bool)
    value = merged >> one
    after_equal = np.zeros(len(merged), dtype=bool)
    np.equal(value[1:], value[:-1], out=after_equal[1:])
    return after_equal[is_needle]


def _own_share(tagged: np.ndarray, shared: np.ndarray, pairs: int, blocks) -> np.ndarray:
    """Per pair, the share of positions in runs of >= ``blocks[pair]`` unshared shingles."""
    pair = (tagged >> np.uint64(40)).astype(np.int64)
    if len(pair) == 0:
        return np.zeros(pairs)
    change = np.concatenate([[True], (shared[1:] != shared[:-1]) | (pair[1:] != pair[:-1])])
    run = np.cumsum(change) - 1
    long_run = (np.bincount(run)[run] >= np.asarray(blocks)[pair]) & ~shared
    total = np.bincount(pair, minlength=pairs)
    own = np.bincount(pair, weights=long_run, minlength=pairs)
    return np.divide(own, total, out=np.zeros(pairs), where=total > 0)


def _jaccard(left: ShingleSet, right: ShingleSet, start: int, stop: int) -> np.ndarray:
    pairs = stop - start
    _, set_l = _tagged(left, start, stop)
    _, set_r = _tagged(right, start, stop)
    # Both sides distinct: a value in both is the only way two merged neighbours agree.
    merged = np.concatenate([set_l, set_r])
    merged.sort(kind="stable")
    common = merged[1:][merged[1:] == merged[:-1]]
    inter = np.bincount((common >> np.uint64(40)).astype(np.int64), minlength=pairs)
    sizes = np.bincount((merged >> np.uint64(40)).astype(np.int64), minlength=pairs)
    union = (sizes - inter).astype(np.float64)
    return np.divide(inter, union, out=np.zeros(pairs), where=union > 0)


def _own(mine: ShingleSet, other: ShingleSet, start: int, stop: int, blocks: np.ndarray):
    """Own-content share of ``mine`` against ``other`` for the pairs ``[start, stop)``
    (``blocks``: per pair of all of them)."""
    seq, _ = _tagged(mine, start, stop, distinct=False)
    other_seq, _ = _tagged(other, start, stop, distinct=False)
    return _own_share(seq, _present(other_seq, seq), stop - start, blocks[start:stop])
