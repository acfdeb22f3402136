"""The corpus's template, and each document's own material beside it (verification).

Pages of one site share a template: section headers, navigation, stock phrasing, a
family-wide vocabulary. Two sibling pages share only that, an edited copy shares its
page's own material too. The index shards see every candidate document, so they count in
how many of them each character n-gram of the own-content measure (``Texts.chars``)
occurs: an n-gram in at least ``template_docs`` candidate documents is *template*; the
rest are each document's own material. What a pair is verified on then is each side's
*residue*: its runs of at least ``template_run`` consecutive non-template n-grams, in text
order (shorter runs are what scattered edits of a copy leave in text of many copies).

Counting (on the shards, :class:`dataforge.ops.dedup.index.IndexShard`): each shard
sends the distinct n-grams of each of its candidate documents to the shard that owns the
n-gram (``hash % shards``), which counts them (:func:`frequent`); every shard then gets
the union of the frequent sets. A shard holds at most the distinct n-grams of its share of
the candidate documents, the same order as their shingles it holds anyway; nothing passes
through the driver. The counts depend on the set of candidate documents only, never on
tasks, batches, shards or workers. Records of ``against`` runs (texts gone) count nothing.

Where ``make dedup-verify`` built ``_template`` (``_template.cpp``), :func:`doc_ngrams` and
:func:`residues` run one pass per document in C++ with the GIL released (a sort of each small
document instead of one of the whole batch, a hash set of the template, made once per
shard (:class:`Template`), instead of a search per position); the numpy code runs where it is not built. Both give identical values (tested).
"""

from __future__ import annotations

import numpy as np

from dataforge.ops.dedup.shingles import ShingleSet

try:
    from dataforge.ops.dedup import _template
except ImportError:  # not built: the numpy code below
    _template = None

__all__ = ["Template", "doc_ngrams", "frequent", "residues", "route_ngrams"]


def doc_ngrams(chars: ShingleSet, templated: np.ndarray | None) -> np.ndarray:
    """The distinct n-grams of each document with the template rule, concatenated
    (uint32: the 32 bits the planner ships): one entry per (document, n-gram)."""
    if templated is None or not templated.any() or len(chars.hashes) == 0:
        return np.zeros(0, np.uint32)
    if _template is not None:
        ngrams = _template.doc_ngrams(*_kernel_pool(chars, templated))
        return np.frombuffer(ngrams, np.uint32)
    doc = chars.doc_index()
    keep = templated[doc]
    tagged = (doc[keep].astype(np.uint64) << np.uint64(32)) | (
        chars.hashes[keep].astype(np.uint64) & np.uint64(0xFFFFFFFF)
    )
    return (np.unique(tagged) & np.uint64(0xFFFFFFFF)).astype(np.uint32)


def route_ngrams(ngrams: np.ndarray, shards: int) -> list[np.ndarray]:
    """``ngrams`` split by owning shard (``hash % shards``), one array per shard."""
    owner = ngrams % np.uint32(shards)
    return [ngrams[owner == i] for i in range(shards)]


def frequent(ngrams: np.ndarray, min_docs: int) -> np.ndarray:
    """The sorted distinct values that occur at least ``min_docs`` times in ``ngrams``
    (one entry per document that has them)."""
    values, counts = np.unique(np.asarray(ngrams, np.uint32), return_counts=True)
    return values[counts >= min_docs]


class Template:
    """A template's n-grams (sorted uint32) and, where the kernels are built, their hash
    set, made once: a shard cuts its candidates block by block, and one set per block
    cost more than the cutting (it grows with the corpus, and so does the block count)."""

    def __init__(self, ngrams: np.ndarray) -> None:
        self.ngrams = np.ascontiguousarray(ngrams, dtype=np.uint32)
        self.lookup = None if _template is None else _template.template_set(self.ngrams)


def residues(
    chars: ShingleSet, templated: np.ndarray | None, template: np.ndarray | Template, run: int
) -> ShingleSet:
    """Per document, its n-grams not in ``template`` (sorted uint32, or a
    :class:`Template` of them) that lie in runs of at least ``run`` consecutive such
    positions, in text order; no residue (empty) for documents without the template rule."""
    if run < 1:
        raise ValueError(f"run: {run}; valid: >= 1")
    docs = len(chars.offsets) - 1
    if templated is None or len(chars.hashes) == 0:
        return ShingleSet(np.zeros(0, np.uint32), np.zeros(docs + 1, np.int64))
    if not isinstance(template, Template):
        template = Template(template)
    if template.lookup is not None:
        hashes, offsets = _template.residues(*_kernel_pool(chars, templated), template.lookup, run)
        return ShingleSet(np.frombuffer(hashes, np.uint32), np.frombuffer(offsets, np.int64))
    doc = chars.doc_index()
    values = chars.hashes.astype(np.uint32, copy=False)
    own = ~_members(values, template.ngrams) & templated[doc]
    # Runs of own positions within one document: a new run where either changes.
    change = np.ones(len(own), bool)
    np.not_equal(own[1:], own[:-1], out=change[1:])
    change[1:] |= doc[1:] != doc[:-1]
    run_id = np.cumsum(change) - 1
    keep = own & (np.bincount(run_id)[run_id] >= run)
    counts = np.bincount(doc[keep], minlength=docs)
    offsets = np.zeros(docs + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    return ShingleSet(values[keep], offsets)


def _kernel_pool(chars: ShingleSet, templated: np.ndarray) -> tuple[np.ndarray, ...]:
    """``chars`` and ``templated`` as the compiled kernels read them: 4- or 8-byte hashes
    where they are, int64 offsets, one bool per document."""
    hashes = chars.hashes
    if hashes.dtype not in (np.uint32, np.uint64):
        hashes = hashes.astype(np.uint64)
    return (
        np.ascontiguousarray(hashes),
        np.ascontiguousarray(chars.offsets, dtype=np.int64),
        np.ascontiguousarray(templated, dtype=bool),
    )


_MAX_FILTER_BITS = 24


def _members(values: np.ndarray, template: np.ndarray) -> np.ndarray:
    """Per value: is it in ``template`` (sorted). A filter on the low bits (8 to 16 slots
    per template value, at most 16 MB) answers most values at one lookup each; only its
    hits are searched (a search per position cost most of the template work)."""
    found = np.zeros(len(values), bool)
    if len(template) == 0 or len(values) == 0:
        return found
    width = min(_MAX_FILTER_BITS, max(10, int(len(template)).bit_length() + 3))
    mask = np.uint32((1 << width) - 1)
    bits = np.zeros(1 << width, bool)
    bits[template & mask] = True
    hits = np.flatnonzero(bits[values & mask])
    pos = np.minimum(np.searchsorted(template, values[hits]), len(template) - 1)
    found[hits] = template[pos] == values[hits]
    return found
