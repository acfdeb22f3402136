"""One index shard: bucket entries for a slice of the key space, then verification.

The planner (``dataforge.ops.dedup.planner``) runs ``shards`` of these, in-process or
as Ray actors (this module has no ray import). Lifecycle of a shard:

0. Verified methods: ``add_text_hashes`` / ``copy_pairs`` group the records by text
   hash (:mod:`dataforge.ops.dedup.copies`); only the heads of the groups go on.
1. ``add`` bucket entries whose key it owns (:func:`~dataforge.ops.dedup.buckets.key_owners`).
   Stored per entry: the uint32 document key and the bucket key: with ``key_bits == 32``
   (MinHash) only its high 32 bits (which also chose the shard, so that a bucket does
   not depend on the shard count; a false 32-bit match only makes a candidate,
   which verification rejects), packed with the document key into one uint64, so a MinHash
   document with ``b`` bands costs ``8 * b`` bytes spread over the shards; exact keeps 64
   bits, SimHash 64 bits plus the uint64 fingerprint.
2. ``candidate_edges``: sort the entries, turn every bucket into candidate pairs
   (:func:`dataforge.ops.dedup.buckets.bucket_pair_edges`; SimHash: pairs within
   ``max_hamming``), free the entries, route each pair to the owner of its first node.
3. Verified methods: ``receive_candidates``; with a screen (MinHash) ``add_signatures`` /
   ``forward_signatures`` / ``screen`` / ``emit_screened`` drop the pairs whose signature
   estimate is far below the threshold (chance band collisions) before any text is read;
   ``add_texts`` turns the texts of the owned candidate nodes into their shingle
   sequences (with the planner's ``texts_of``: the dedup op's ``verification_texts``, so
   that this work spreads over the shards) and keeps them and their signatures
   (``add_payload``: sequences made elsewhere); ``forward`` sends each pair ``(u, v)``
   with the shingles of ``u`` to the owner of ``v``, whose ``verify`` scores the pair
   (:mod:`dataforge.ops.dedup.verify`: exact Jaccard and own content) and keeps the
   duplicates.
   With ``template_docs``, between ``add_payload`` and ``forward``: ``template_counts`` /
   ``count_template`` / ``template_share`` / ``receive_template`` count the candidates'
   character n-grams by owning shard and cut each owned document's residue
   (:mod:`dataforge.ops.dedup.template`), which travels with its texts.
   A pair with a record of an ``against`` run (key below ``fixed``: its text is gone) is
   judged on the signatures instead.
4. ``finish_edges``, then ``edge_histogram`` and ``edges_between``: the decided pairs and
   their similarity, a range of larger nodes at a time, for the star clustering in the
   planner (:mod:`dataforge.ops.dedup.star`); held past ``hold_bytes`` in sorted runs on
   disk (:mod:`dataforge.ops.dedup.edge_runs`).
"""

from __future__ import annotations

import os
import resource
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import numpy as np

from dataforge.ops.dedup.buckets import (
    bucket_pair_edges,
    kept_key_bits,
    packed_bucket_pair_edges,
    route_edges,
    route_packed,
    unpack_edges,
)
from dataforge.ops.dedup.copies import copy_pairs
from dataforge.ops.dedup.edge_runs import EdgeRuns
from dataforge.ops.dedup.method import DedupMethod
from dataforge.ops.dedup.pool import Block, CandidatePool
from dataforge.ops.dedup.simhash import hamming_pairs
from dataforge.ops.dedup.template import doc_ngrams, frequent, residues, route_ngrams
from dataforge.ops.dedup.verify import ResidueRule, Texts, verify_rows

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["IndexShard", "Pool", "TextsOf", "decide_pairs"]

_VERIFY_CHUNK = 8192  # pairs per verification step (numpy kernels: their shingles copied once)
_SCREEN_CHUNK = 1 << 16  # pairs per screening step (two copies of their signatures)

TextsOf = Callable[["pa.Array", "pa.Array"], Texts]
"""The dedup op's ``verification_texts``: (texts, langs) -> what verification compares."""

Pool = tuple[np.ndarray, np.ndarray, "np.ndarray | None", Texts]
"""Documents by node key: ``(nodes, order that sorts them, signatures, texts)``."""


def _flatten(parts) -> list:
    return [p for part in parts for p in (part if isinstance(part, list) else [part])]


class IndexShard:
    """Bucket entries, then candidate pairs and their verification, of one shard."""

    def __init__(
        self,
        shards: int,
        method: DedupMethod,
        fixed: int = 0,
        texts_of: TextsOf | None = None,
        hold_bytes: int | None = None,
        spill_root: str | None = None,
    ) -> None:
        self.shards = shards
        self.texts_of = texts_of
        self.method = method
        self.config = method.config
        self.fixed = fixed
        self._packed = method.key_bits == 32
        self._keys: list[np.ndarray] = []
        self._nodes: list[np.ndarray] = []
        self._fingerprints: list[np.ndarray] = []
        self._candidates = np.zeros(0, dtype=np.int64)
        """The candidate pairs of the owned nodes, both directions, packed ``u << 32 | v``
        (one int64 each, sorted: by ``u``, then ``v``)."""
        self._firsts: np.ndarray | None = None
        """The distinct ``u`` of :meth:`pairs`, for :meth:`forward`'s rounds."""
        self._parts: list[tuple[np.ndarray, np.ndarray, Texts | None]] = []
        self._screened: list[np.ndarray] = []
        self._sig_pool: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._pool = CandidatePool(hold_bytes, spill_root)
        self._received = 0
        """The owned candidates' signatures and texts (spilled past ``hold_bytes``)."""
        self._edges = EdgeRuns(hold_bytes, spill_root)
        """The decided pairs, by larger node (spilled past ``hold_bytes``)."""
        self._template = np.zeros(0, np.uint32)
        self._text_hashes: list[tuple[np.ndarray, np.ndarray]] = []
        self._group_heads = np.zeros(0, np.int64)
        self._group_sizes = np.zeros(0, np.int64)

    def ping(self) -> int:
        return os.getpid()

    def peak_rss_mb(self) -> float:
        """Peak resident memory of this process (MiB), for the stage summary."""
        return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)

    def add(
        self, keys: np.ndarray, nodes: np.ndarray, fingerprints: np.ndarray | None = None
    ) -> int:
        """Store bucket entries; returns the number stored so far."""
        keys = np.asarray(keys, dtype=np.uint64)
        nodes = np.asarray(nodes, dtype=np.uint32)
        if self._packed:
            # One uint64 per entry: the 32 key bits a shard keeps (the high ones) | node.
            self._keys.append(kept_key_bits(keys, self.method.key_bits) | nodes.astype(np.uint64))
        else:
            self._keys.append(keys)
            self._nodes.append(nodes)
        if fingerprints is not None:
            self._fingerprints.append(np.asarray(fingerprints, dtype=np.uint64))
        return sum(len(k) for k in self._keys)

    def add_text_hashes(self, hashes: np.ndarray, nodes: np.ndarray) -> int:
        """Store the text hashes this shard owns (:mod:`dataforge.ops.dedup.copies`);
        returns the number stored so far."""
        self._text_hashes.append((np.asarray(hashes, np.uint64), np.asarray(nodes, np.int64)))
        return sum(len(h) for h, _ in self._text_hashes)

    def copy_pairs(self) -> np.ndarray:
        """``(copy, head)`` of every stored node whose text a smaller node has; frees them."""
        parts, self._text_hashes = self._text_hashes, []
        hashes = np.concatenate([np.zeros(0, np.uint64), *(h for h, _ in parts)])
        return copy_pairs(hashes, np.concatenate([np.zeros(0, np.int64), *(n for _, n in parts)]))

    def add_group_sizes(self, heads: np.ndarray, sizes: np.ndarray) -> int:
        """Keep the copy-group size (head and copies) of owned heads: the template counts
        a head as that many documents, as the copies were before they collapsed."""
        heads = np.concatenate([self._group_heads, np.asarray(heads, np.int64)])
        sizes = np.concatenate([self._group_sizes, np.asarray(sizes, np.int64)])
        order = np.argsort(heads, kind="stable")
        self._group_heads, self._group_sizes = heads[order], sizes[order]
        return len(heads)

    def index_bytes(self) -> int:
        """Bytes held by the bucket entries."""
        return sum(a.nbytes for a in (*self._keys, *self._nodes, *self._fingerprints))

    def candidate_edges(self) -> list[np.ndarray]:
        """Candidate pairs of this shard's buckets, routed by owner; frees the entries."""
        # Unverified (exact): a shared key decides, and the smallest member is every
        # member's representative; pairing each member with it alone gives the same stars.
        partners = self.config.verify.max_partners if self.method.verified else 1
        if self._packed:
            packed = np.concatenate(self._keys) if self._keys else np.zeros(0, np.uint64)
            self._keys = []  # free the pieces before sorting
            return route_packed(packed_bucket_pair_edges(packed, partners), self.shards)
        keys = np.concatenate(self._keys) if self._keys else np.zeros(0, np.uint64)
        nodes = np.concatenate(self._nodes) if self._nodes else np.zeros(0, np.uint32)
        max_hamming = self.method.max_hamming()
        if max_hamming is None:
            edges = bucket_pair_edges(keys, nodes, partners)
        else:
            fps = np.concatenate(self._fingerprints) if self._fingerprints else keys[:0]
            edges = hamming_pairs(keys, fps, nodes, max_hamming)
        self._keys, self._nodes, self._fingerprints = [], [], []
        return route_edges(edges, self.shards)

    # -- verification ----------------------------------------------------------------------

    def receive_candidates(self, *parts: np.ndarray | list[np.ndarray]) -> int:
        """Keep the candidate pairs of the owned nodes (both directions, packed as
        :func:`~dataforge.ops.dedup.buckets.route_edges` sends them); returns how many."""
        flat = [p for p in _flatten(parts) if len(p)]
        self._candidates, self._firsts = np.zeros(0, np.int64), None  # replaced below
        packed = np.concatenate([np.zeros(0, np.int64), *flat])
        del flat
        packed.sort()  # in place: the join and a mask are the only copies
        u, v = packed >> 32, packed & 0xFFFFFFFF
        keep = (u != v) & ((u >= self.fixed) | (v >= self.fixed))
        del u, v
        keep[1:] &= packed[1:] != packed[:-1]  # once each
        # Pairs between two records of against runs are never decided here.
        self._candidates = packed[keep]
        return len(self._candidates)

    def pairs(self) -> np.ndarray:
        """The candidate pairs ``(u, v)`` with ``u < v`` held here (each pair is held by
        the owner of its u alone), sorted."""
        packed = self._candidates
        return unpack_edges(packed[(packed >> 32) < (packed & 0xFFFFFFFF)])

    def candidate_nodes(self) -> np.ndarray:
        """The owned nodes that have a candidate pair (their payload is needed)."""
        firsts = self._candidates >> 32  # sorted
        return firsts[np.append(True, firsts[1:] != firsts[:-1])] if len(firsts) else firsts

    # -- screening on signatures (methods with a screen_floor) ----------------------------

    def add_signatures(self, nodes: np.ndarray, signatures: np.ndarray) -> int:
        """Keep the signatures of owned candidate nodes (for :meth:`screen`)."""
        self._parts.append((np.asarray(nodes, dtype=np.int64), signatures, None))
        return sum(len(p[0]) for p in self._parts)

    def signature_bytes(self) -> int:
        """Bytes of the owned candidates' signatures (what :meth:`forward_signatures`
        copies, over its rounds)."""
        return sum(p[1].nbytes for p in self._parts) + (
            0 if self._sig_pool is None else self._sig_pool[2].nbytes
        )

    def forward_signatures(
        self, round_: int = 0, rounds: int = 1
    ) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """``(pairs (u, v) with u < v, their distinct u, sig(u))`` routed to the owner of
        ``v`` (each ``u`` travels once per destination, not once per pair); in rounds as
        :meth:`forward`."""
        nodes, order, sigs = self._signature_pool()
        edges = self._round_pairs(round_, rounds)
        owner = edges[:, 1] % self.shards
        out = []
        for i in range(self.shards):
            part = edges[owner == i]
            left = np.unique(part[:, 0])
            rows = order[np.searchsorted(nodes, left, sorter=order)]
            out.append((part, left, sigs[rows] if len(part) else np.zeros(0)))
        return out

    def _round_pairs(self, round_: int, rounds: int) -> np.ndarray:
        """The pairs ``(u, v)``, ``u < v``, of round ``round_`` of ``rounds``: those whose
        ``u`` is in the ``round_``-th of ``rounds`` equal slices of the distinct ``u`` in
        key order (every pair in exactly one round)."""
        edges = self.pairs()
        if rounds <= 1:
            return edges
        if round_ == 0 or self._firsts is None:  # the slices' bounds, once per pass
            self._firsts = np.unique(edges[:, 0])
        firsts = self._firsts
        lo, hi = (len(firsts) * r // rounds for r in (round_, round_ + 1))
        mine = (edges[:, 0] >= firsts[lo]) if lo < len(firsts) else np.zeros(len(edges), bool)
        if hi < len(firsts):
            mine &= edges[:, 0] < firsts[hi]
        return edges[mine]

    def _signature_pool(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The owned candidates' signatures as one pool, joined once (the parts freed)."""
        if self._sig_pool is None or self._parts:
            parts = self._parts
            if self._sig_pool is not None:
                parts = [(self._sig_pool[0], self._sig_pool[2], None), *parts]
            self._parts = []
            nodes = np.concatenate([np.zeros(0, np.int64), *(p[0] for p in parts)])
            sigs = np.concatenate([p[1] for p in parts]) if parts else np.zeros(0)
            del parts
            self._sig_pool = (nodes, np.argsort(nodes, kind="stable"), sigs)
        return self._sig_pool

    def screen(self, *parts) -> int:
        """Keep the forwarded pairs whose signature estimate reaches the method's floor;
        returns how many so far (over the rounds)."""
        flat = [p for p in _flatten(parts) if len(p[0])]
        nodes, order, sigs = self._signature_pool()
        for edges, left, left_sigs in flat:
            for lo in range(0, len(edges), _SCREEN_CHUNK):  # bounded copies of signatures
                chunk = edges[lo : lo + _SCREEN_CHUNK]
                rows = order[np.searchsorted(nodes, chunk[:, 1], sorter=order)]
                sig_u = left_sigs[np.searchsorted(left, chunk[:, 0])]
                estimate = self.method.signature_similarity(sig_u, sigs[rows])
                kept = chunk[estimate >= self.method.screen_floor()]
                self._screened.append(kept[:, 0] << 32 | kept[:, 1])  # packed: 8 bytes a pair
        return sum(len(k) for k in self._screened)

    def emit_screened(self) -> list[np.ndarray]:
        """The screened pairs, routed for :meth:`receive_candidates`; frees the signatures."""
        packed = np.concatenate([np.zeros(0, np.int64), *self._screened])
        self._screened, self._parts, self._sig_pool = [], [], None
        # the screened pairs replace the candidates (receive_candidates): free them first
        self._candidates, self._firsts = np.zeros(0, np.int64), None
        return route_packed(packed, self.shards)

    # -- verification on the texts ----------------------------------------------------------

    def add_payload(self, nodes: np.ndarray, signatures: np.ndarray, texts: Texts | None) -> int:
        """Keep the signatures and shingle sequences of owned candidate nodes (``texts``:
        None for records of against runs); returns the number of nodes received."""
        nodes = np.asarray(nodes, dtype=np.int64)
        texts = Texts.empty(len(nodes)) if texts is None else texts
        self._pool.add(Block(nodes, np.asarray(signatures), texts))
        self._received += len(nodes)
        return self._received

    def add_texts(self, nodes: np.ndarray, signatures: np.ndarray, texts: pa.Table) -> int:
        """``add_payload`` with the shingle sequences of ``texts`` (columns text, lang; one
        row per node) made here by ``texts_of``."""
        assert self.texts_of is not None, "add_texts needs the shard's texts_of"
        return self.add_payload(
            nodes, signatures, self.texts_of(texts.column("text"), texts.column("lang"))
        )

    # -- the corpus's template (dataforge.ops.dedup.template) -------------------------------

    def _template_times(self, nodes: np.ndarray) -> np.ndarray:
        """Per owned candidate, how many documents it counts as in the template: a head
        stands for its copies, ``min(size, template_docs)`` times (more would decide
        nothing: an n-gram in template_docs documents is template)."""
        heads, sizes = self._group_heads, self._group_sizes
        times = np.ones(len(nodes), np.int64)
        if len(heads):
            pos = np.minimum(np.searchsorted(heads, nodes), len(heads) - 1)
            times = np.where(heads[pos] == nodes, sizes[pos], 1)
        return np.minimum(times, max(self.config.verify.template_docs, 1))

    def template_bytes(self) -> int:
        """Bytes of the n-grams :meth:`template_counts` sends in one round (at most: a
        document's positions, times its count), for the planner's rounds."""
        pieces = zip(self._pool.templated_lengths(), self._pool.node_blocks(), strict=True)
        return 4 * sum(int((n * self._template_times(nodes)).sum()) for n, nodes in pieces)

    def template_counts(self, round_: int = 0, rounds: int = 1) -> list[np.ndarray]:
        """The distinct character n-grams of each owned candidate document, routed to the
        shards that count them. In ``rounds`` rounds, round ``round_`` sends the n-grams
        ``n`` with ``(n // shards) % rounds == round_``: a share of them, each n-gram in
        exactly one round (counted there whole)."""
        ngrams = [np.zeros(0, np.uint32)]
        for _, block in self._pool.blocks():
            texts = block.texts
            if texts.templated is None:
                continue
            times = self._template_times(block.nodes)
            for t in np.unique(times).tolist():
                mine = doc_ngrams(texts.chars, texts.templated & (times == t))
                if rounds > 1:
                    mine = mine[(mine // np.uint32(self.shards)) % np.uint32(rounds) == round_]
                ngrams.append(np.tile(mine, t))
        return route_ngrams(np.concatenate(ngrams), self.shards)

    def count_template(self, *parts: np.ndarray) -> int:
        """Keep the n-grams of this shard's share (of this round) in at least
        ``template_docs`` documents; returns how many so far."""
        flat = [p for p in _flatten(parts) if len(p)]
        ngrams = np.concatenate(flat) if flat else np.zeros(0, np.uint32)
        del flat
        found = frequent(ngrams, self.config.verify.template_docs)
        self._template = np.concatenate([self._template, found])
        return len(self._template)

    def template_share(self) -> list[np.ndarray]:
        """This shard's template n-grams (every round's), for every shard."""
        return [self._template] * self.shards

    def receive_template(self, *parts: np.ndarray) -> int:
        """Take the whole template (every shard's share) and cut the owned documents'
        residues from it; returns the residue n-grams."""
        flat = [p for p in _flatten(parts) if len(p)]
        template = np.sort(np.concatenate(flat)) if flat else np.zeros(0, np.uint32)
        self._template = np.zeros(0, np.uint32)
        run, found = self.config.verify.template_run, [0]

        def with_residues() -> Iterator[Block]:
            for _, block in self._pool.blocks():
                cut = residues(block.texts.chars, block.texts.templated, template, run)
                found[0] += len(cut.hashes)
                yield Block(block.nodes, block.signatures, block.texts.with_residue(cut))

        self._pool.replace_all(with_residues())
        return found[0]

    def texts_spilled(self) -> bool:
        """Whether the candidates' texts went to disk (past ``hold_bytes``)."""
        return self._pool.spilled

    def payload_bytes(self) -> int:
        """Bytes of the received candidates' signatures and texts (what :meth:`forward`
        copies, over its rounds)."""
        return self._pool.nbytes

    def forward(
        self, round_: int = 0, rounds: int = 1
    ) -> list[tuple[np.ndarray, np.ndarray, np.ndarray, Texts]]:
        """``(pairs (u, v) with u < v, their distinct u, sig(u), texts(u))`` routed to the
        owner of ``v`` (each ``u`` travels once per destination, not once per pair). In
        ``rounds`` rounds, round ``round_`` forwards the pairs of the ``round_``-th of
        ``rounds`` equal slices of the distinct ``u`` in key order: a round copies a
        ``1 / rounds`` share of the texts, and every pair goes in exactly one round."""
        edges = self._round_pairs(round_, rounds)
        # This round's first nodes, gathered block by block.
        wanted = np.unique(edges[:, 0])
        if len(wanted) == 0:
            return [(np.zeros((0, 2), np.int64), np.zeros(0, np.int64), np.zeros(0), Texts.empty())
                    for _ in range(self.shards)]  # fmt: skip
        picked = [  # only the blocks that hold some of them are read (held: used as is)
            b if len(self._pool) == 1 else b.take(np.flatnonzero(np.isin(b.nodes, wanted)))
            for _, b in self._pool.blocks(only=self._pool.block_of(wanted))
        ]
        pool = Block.concat(picked) if len(picked) > 1 else picked[0]
        del picked
        nodes, sigs, texts = pool.nodes, pool.signatures, pool.texts
        order = np.argsort(nodes, kind="stable")
        owner = edges[:, 1] % self.shards
        out = []
        for i in range(self.shards):
            part = edges[owner == i]
            if len(part) == 0:
                out.append((part, part[:, 0], np.zeros(0), Texts.empty()))
                continue
            left = np.unique(part[:, 0])
            rows = order[np.searchsorted(nodes, left, sorter=order)]
            out.append((part, left, sigs[rows], texts.take(rows)))
        return out

    def verify(self, *parts) -> int:
        """Decide the forwarded pairs, block of owned candidates by block, part by part and
        chunk by chunk (bounded copies); keeps the duplicates."""
        flat = [p for p in _flatten(parts) if len(p[0])]
        # Each part's pairs grouped by the block that holds their v (one block when held).
        grouped, needed = [], [np.zeros(0, np.int64)]
        for edges, nodes, sigs, texts in flat:
            where = self._pool.block_of(edges[:, 1])
            order = np.argsort(where, kind="stable")
            bounds = np.searchsorted(where[order], np.arange(len(self._pool) + 1))
            grouped.append((edges[order], bounds, (nodes, np.argsort(nodes), sigs, texts)))
            needed.append(np.unique(where))
        needed = np.unique(np.concatenate(needed))
        count = 0
        for i, block in self._pool.blocks(only=needed):
            right = (block.nodes, np.argsort(block.nodes), block.signatures, block.texts)
            for edges, bounds, left in grouped:
                mine = edges[bounds[i] : bounds[i + 1]]
                if len(mine):
                    # each part is decided on its own texts: no copy of all of them at once
                    decided = decide_pairs(mine, left, right, self.method, self.fixed)
                    self._edges.add(*decided)
                    count += len(decided[0])
        return count

    def finish_edges(self) -> int:
        """No more pairs to decide: frees the verification state and sorts the decided
        pairs by larger node (unverified methods: every candidate pair, similarity 1.0);
        returns how many there are."""
        if not self.method.verified:
            edges = self.pairs()
            self._candidates = np.zeros(0, np.int64)
            self._edges.add(edges, np.ones(len(edges)))
        self._parts = []
        self._pool.clear()
        self._edges.finish()
        return self._edges.count

    def edge_histogram(self, shift: int, bins: int) -> np.ndarray:
        """Decided pairs per bin ``larger node >> shift`` (for the planner's ranges)."""
        return self._edges.histogram(shift, bins)

    def edges_between(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(big, small, similarity)`` of the decided pairs whose larger node is in
        ``[lo, hi)``, for the star clustering in the planner (:mod:`dataforge.ops.dedup.star`)."""
        return self._edges.between(lo, hi)

    def edge_runs(self) -> int:
        """Sorted runs of decided pairs written to disk (0: held)."""
        return self._edges.spilled_runs

    def release_edges(self) -> None:
        """Forget the decided pairs (their spilled runs too)."""
        self._edges.clear()


def decide_pairs(
    edges: np.ndarray, left: Pool, right: Pool, method: DedupMethod, fixed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """The duplicates among the pairs ``edges`` (u, v): u's documents in ``left``, v's in
    ``right``; returns ``(pairs, similarity)`` of those kept. Decided chunk by chunk
    (bounded copies for the numpy kernels). A pair whose u is a record of an ``against``
    run (key below ``fixed``: its text is gone) is judged on the signatures."""
    threshold, cfg = method.config.threshold, method.config.verify
    rule = (
        ResidueRule(cfg.residue_max_own, cfg.min_residue, cfg.residue_min_shared)
        if cfg.template_docs
        else None
    )
    l_nodes, l_order, l_sigs, l_texts = left
    r_nodes, r_order, r_sigs, r_texts = right
    kept_edges, kept_sims = [np.zeros((0, 2), np.int64)], [np.zeros(0)]
    for lo in range(0, len(edges), _VERIFY_CHUNK):
        chunk = edges[lo : lo + _VERIFY_CHUNK]
        lrows = l_order[np.searchsorted(l_nodes, chunk[:, 0], sorter=l_order)]
        rrows = r_order[np.searchsorted(r_nodes, chunk[:, 1], sorter=r_order)]
        sim, keep = verify_rows(
            l_texts, lrows, r_texts, rrows, threshold, cfg.block, cfg.max_own, rule
        )
        against = chunk[:, 0] < fixed
        if against.any():
            estimate = method.signature_similarity(l_sigs[lrows[against]], r_sigs[rrows[against]])
            sim[against], keep[against] = estimate, estimate >= threshold
        kept_edges.append(chunk[keep])
        kept_sims.append(sim[keep])
    return np.concatenate(kept_edges), np.concatenate(kept_sims)
