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
   bits, SimHash 64 bits plus the uint64 fingerprint. Past ``hold_bytes`` the entries
   wait on disk in sorted runs (:class:`dataforge.ops.dedup.runs.KeyRuns`).
2. ``candidate_edges`` in rounds of bucket keys (about equal in entries, a bucket never
   split): read a round's entries, turn every bucket into candidate pairs
   (:func:`dataforge.ops.dedup.buckets.bucket_pair_edges`; SimHash: pairs within
   ``max_hamming``), route each pair to the owners of its nodes, whose
   ``receive_candidates`` keep them in sorted runs too; every later pass reads them in
   rounds of first nodes (repeats dropped as they are read).
3. Verified methods: ``receive_candidates``; with a screen (MinHash) ``add_signatures`` /
   ``forward_signatures`` / ``screen`` / ``emit_screened`` drop the pairs whose signature
   estimate is far below the threshold (chance band collisions) before any text is read
   (the signatures held as the texts are, past ``hold_bytes`` on disk);
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
   disk (:mod:`dataforge.ops.dedup.runs`).
"""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from dataforge.ops.barrier.memory import return_free_memory
from dataforge.ops.dedup.buckets import (
    bucket_pair_edges,
    kept_key_bits,
    packed_bucket_pair_edges,
    route_edges,
    route_packed,
    unpack_edges,
)
from dataforge.ops.dedup.copies import copy_pairs
from dataforge.ops.dedup.method import DedupMethod
from dataforge.ops.dedup.pool import Block, CandidatePool
from dataforge.ops.dedup.runs import MIN_RUN_ROWS, EdgeRuns, KeyRuns, spill_dir
from dataforge.ops.dedup.simhash import hamming_pairs
from dataforge.ops.dedup.template import (
    Template,
    doc_ngrams,
    frequent,
    residues,
    route_ngrams,
)
from dataforge.ops.dedup.verify import ResidueRule, Texts, verify_rows

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "FORWARD_COPIES",
    "PAIR_BYTES",
    "SCAN_COPIES",
    "IndexShard",
    "Pool",
    "TextsOf",
    "decide_pairs",
]

_VERIFY_CHUNK = 8192  # pairs per verification step (numpy kernels: their shingles copied once)
_SCREEN_CHUNK = 1 << 16  # pairs per screening step (two copies of their signatures)
SCAN_COPIES = 4
"""Copies of a range's candidate keys alive while it is read (:meth:`IndexShard._candidate_keys`:
the keys, their two halves, the distinct ones): a range is at most ``hold_bytes`` over it."""
FORWARD_COPIES = 3
"""Copies of a round's texts alive at once while a shard forwards them (gathered from the
blocks, joined, taken per destination)."""
PAIR_BYTES = 80
"""Bytes alive at once per forwarded pair: its two directions read (8 each), unpacked
(16), taken per destination (16), and on the receiver its block number, order and sorted
copy (32)."""

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
        self.hold_bytes = hold_bytes
        self.spill_root = spill_root
        self._packed = method.key_bits == 32
        columns = [] if self._packed else [np.uint32]  # the node beside a 64-bit key
        if method.max_hamming() is not None:
            columns.append(np.uint64)  # SimHash: the fingerprint
        self._entries = KeyRuns(np.uint64, columns, hold_bytes, spill_root, "dedup-index-")
        """The bucket entries: MinHash ``kept key bits | node`` (one uint64), else the key
        and the node (and the fingerprint); spilled past ``hold_bytes``."""
        self._candidates = KeyRuns(np.int64, (), hold_bytes, spill_root, "dedup-pairs-")
        """The candidate pairs of the owned nodes, both directions, packed ``u << 32 | v``
        (one int64 each; repeats and pairs between against records are dropped where they
        are read, :meth:`_candidate_keys`)."""
        self._candidate_scan: tuple[int, np.ndarray, np.ndarray] | None = None
        self._signatures = CandidatePool(hold_bytes, spill_root)
        """The owned candidates' signatures for the screen (spilled past ``hold_bytes``)."""
        self._signed = 0
        self._screened = KeyRuns(np.int64, (), hold_bytes, spill_root, "dedup-screened-")
        self._pool = CandidatePool(hold_bytes, spill_root)
        self._received = 0
        """The owned candidates' signatures and texts (spilled past ``hold_bytes``)."""
        self._edges = EdgeRuns(hold_bytes, spill_root)
        """The decided pairs, by larger node (spilled past ``hold_bytes``)."""
        self._template = np.zeros(0, np.uint32)
        self._ngram_dir: Path | None = None
        """In template rounds: each round's n-grams, made once at the first (a file each)."""
        self._text_hashes: list[tuple[np.ndarray, np.ndarray]] = []
        self._group_heads = np.zeros(0, np.int64)
        self._group_sizes = np.zeros(0, np.int64)

    def ping(self) -> int:
        return os.getpid()

    def trim(self) -> bool:
        """Give the heap's free pages back to the system (between phases: a phase's
        frees would otherwise stay under the next one's peak)."""
        return return_free_memory()

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
            self._entries.add(kept_key_bits(keys, self.method.key_bits) | nodes.astype(np.uint64))
        elif fingerprints is None:
            self._entries.add(keys, nodes)
        else:
            self._entries.add(keys, nodes, np.asarray(fingerprints, dtype=np.uint64))
        return self._entries.count

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
        """Bytes of the bucket entries (held or spilled)."""
        return self._entries.nbytes

    def candidate_edges(self, round_: int = 0, rounds: int = 1) -> list[np.ndarray]:
        """Candidate pairs of this shard's buckets, routed by owner. In ``rounds`` rounds,
        round ``round_`` makes the pairs of the ``round_``-th of ``rounds`` ranges of
        bucket keys (about equal in entries; a bucket is never split): a round holds a
        share of the entries and their pairs. The last round frees the entries."""
        # Unverified (exact): a shared key decides, and the smallest member is every
        # member's representative; pairing each member with it alone gives the same stars.
        partners = self.config.verify.max_partners if self.method.verified else 1
        lo, hi = self._entries.round_range(round_, rounds, align=32)
        columns = self._entries.between(lo, hi)
        if round_ == rounds - 1:
            self._entries.clear()
        if self._packed:
            return route_packed(packed_bucket_pair_edges(columns[0], partners), self.shards)
        keys, nodes, *fps = columns
        del columns
        max_hamming = self.method.max_hamming()
        if max_hamming is None:
            edges = bucket_pair_edges(keys, nodes, partners)
        else:
            edges = hamming_pairs(keys, fps[0], nodes, max_hamming)
        return route_edges(edges, self.shards)

    # -- verification ----------------------------------------------------------------------

    def receive_candidates(self, *parts: np.ndarray | list[np.ndarray]) -> int:
        """Keep the candidate pairs of the owned nodes (both directions, packed as
        :func:`~dataforge.ops.dedup.buckets.route_packed` sends them; spilled past
        ``hold_bytes``); returns how many were received so far (repeats included)."""
        for part in _flatten(parts):
            self._candidates.add(np.asarray(part, np.int64))
        self._candidate_scan = None
        return self._candidates.count

    def candidate_bytes(self) -> int:
        """Bytes of the candidate pairs received (held or spilled)."""
        return self._candidates.nbytes

    def _candidate_keys(self, lo: int, hi: int | None) -> np.ndarray:
        """The distinct candidate pairs (packed, sorted) with keys in ``[lo, hi)``, without
        pairs between two records of against runs (never decided here) and self loops."""
        (packed,) = self._candidates.between(lo, hi)
        u, v = packed >> 32, packed & 0xFFFFFFFF
        keep = (u != v) & ((u >= self.fixed) | (v >= self.fixed))
        del u, v
        keep[1:] &= packed[1:] != packed[:-1]  # once each
        return packed[keep]

    def _held_ranges(self, runs: KeyRuns) -> Iterator[tuple[int, int | None]]:
        """Key ranges that read the candidate keys ``runs`` in pieces of at most about
        ``hold_bytes`` with their :data:`SCAN_COPIES`, and of at least
        :data:`~dataforge.ops.dedup.runs.MIN_RUN_ROWS` keys (a run's least; one range
        without a budget)."""
        held = SCAN_COPIES * runs.nbytes
        rounds = 1 if self.hold_bytes is None else -(-held // max(1, self.hold_bytes))
        rounds = max(1, min(rounds, runs.count // MIN_RUN_ROWS))
        for r in range(rounds):
            yield runs.round_range(r, rounds, align=32)

    def _scan_candidates(self) -> tuple[int, np.ndarray, np.ndarray]:
        """The number of distinct candidate pairs, their distinct first nodes, and per
        first node its pairs ``(u, v)`` with ``u < v`` (once per change of the
        candidates, a range at a time)."""
        if self._candidate_scan is None:
            count, firsts, forward = 0, [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
            for lo, hi in self._held_ranges(self._candidates):
                packed = self._candidate_keys(lo, hi)
                count += len(packed)
                u = packed >> 32  # sorted
                if len(u) == 0:
                    continue
                starts = np.flatnonzero(np.append(True, u[1:] != u[:-1]))
                firsts.append(u[starts])
                ahead = (u < (packed & 0xFFFFFFFF)).astype(np.int64)
                forward.append(np.add.reduceat(ahead, starts))  # per first node
            self._candidate_scan = count, np.concatenate(firsts), np.concatenate(forward)
        return self._candidate_scan

    def finish_candidates(self) -> int:
        """The number of distinct candidate pairs held (both directions)."""
        return self._scan_candidates()[0]

    def candidate_nodes(self) -> np.ndarray:
        """The owned nodes that have a candidate pair (their payload is needed)."""
        return self._scan_candidates()[1]

    def forward_bytes(self, signatures: bool = False) -> int:
        """Bytes a forwarding pass holds over its rounds: :data:`FORWARD_COPIES` of the
        texts and signatures (``signatures``: of the signatures alone, for the screen)
        and :data:`PAIR_BYTES` per pair; :meth:`pairs` cuts its rounds in these bytes."""
        return int(self._forward_weights(signatures).sum())

    def _forward_weights(self, signatures: bool) -> np.ndarray:
        """Per distinct first node, the bytes forwarding it holds: its own document in
        the pool forwarded, :data:`FORWARD_COPIES` times, and its pairs (a crawl's long
        pages are not spread evenly over the key order: a mean size let one round carry
        five times the texts of the next)."""
        _, firsts, forward = self._scan_candidates()
        pool = self._signatures if signatures else self._pool
        return FORWARD_COPIES * pool.doc_bytes(firsts) + PAIR_BYTES * forward

    def pairs(self, round_: int = 0, rounds: int = 1, signatures: bool = False) -> np.ndarray:
        """The candidate pairs ``(u, v)`` with ``u < v`` held here (each pair is held by
        the owner of its u alone), sorted. In ``rounds`` rounds, round ``round_`` has
        those whose ``u`` is in the ``round_``-th of ``rounds`` slices of the distinct
        first nodes in key order, cut at equal shares of :meth:`forward_bytes` (every pair
        in exactly one round; a round holds about a ``1 / rounds`` share of the texts
        and pairs forwarded, also where a few first nodes have most of the pairs)."""
        lo, hi = 0, None
        if rounds > 1:
            firsts = self.candidate_nodes()
            weights = self._forward_weights(signatures)
            starts = np.cumsum(weights) - weights  # where each first node's bytes start
            total = int(weights.sum())
            a, b = (
                len(firsts) if r == rounds else int(np.searchsorted(starts, total * r // rounds))
                for r in (round_, round_ + 1)
            )
            if a == b:
                return np.zeros((0, 2), np.int64)
            lo, hi = int(firsts[a]) << 32, int(firsts[b]) << 32 if b < len(firsts) else None
        packed = self._candidate_keys(lo, hi)
        return unpack_edges(packed[(packed >> 32) < (packed & 0xFFFFFFFF)])

    # -- screening on signatures (methods with a screen_floor) ----------------------------

    def add_signatures(self, nodes: np.ndarray, signatures: np.ndarray) -> int:
        """Keep the signatures of owned candidate nodes (for :meth:`screen`; spilled past
        ``hold_bytes``); returns how many so far."""
        nodes = np.asarray(nodes, dtype=np.int64)
        self._signatures.add(Block(nodes, np.asarray(signatures), Texts.empty(len(nodes))))
        self._signed += len(nodes)
        return self._signed

    def forward_signatures(
        self, round_: int = 0, rounds: int = 1
    ) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """``(pairs (u, v) with u < v, their distinct u, sig(u))`` routed to the owner of
        ``v`` (each ``u`` travels once per destination, not once per pair); in rounds as
        :meth:`forward`."""
        return [
            part[:3]
            for part in _routed(self.pairs(round_, rounds, True), self._signatures, self.shards)
        ]

    def screen(self, *parts) -> int:
        """Keep the forwarded pairs whose signature estimate reaches the method's floor,
        block of owned signatures by block (spilled: one read at a time); returns how many
        so far (over the rounds)."""
        floor = self.method.screen_floor()
        for edges, left, right in _by_block(parts, self._signatures):
            (l_nodes, l_order, l_sigs, _), (r_nodes, r_order, r_sigs, _) = left, right
            for lo in range(0, len(edges), _SCREEN_CHUNK):  # bounded copies of signatures
                chunk = edges[lo : lo + _SCREEN_CHUNK]
                sig_u = l_sigs[l_order[np.searchsorted(l_nodes, chunk[:, 0], sorter=l_order)]]
                sig_v = r_sigs[r_order[np.searchsorted(r_nodes, chunk[:, 1], sorter=r_order)]]
                kept = chunk[self.method.signature_similarity(sig_u, sig_v) >= floor]
                self._screened.add(kept[:, 0] << 32 | kept[:, 1])  # packed: 8 bytes a pair
        return self._screened.count

    def emit_screened(self, round_: int = 0, rounds: int = 1) -> list[np.ndarray]:
        """The screened pairs of round ``round_`` of ``rounds`` (ranges of ``u``), routed
        for :meth:`receive_candidates`, which they replace: the first round frees the
        candidates and signatures, the last the screened pairs."""
        if round_ == 0:
            self._candidates.clear()
            self._candidate_scan = None
            self._signatures.clear()
            self._signed = 0
        lo, hi = self._screened.round_range(round_, rounds, align=32)
        (packed,) = self._screened.between(lo, hi)
        if round_ == rounds - 1:
            self._screened.clear()
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
        exactly one round (counted there whole). The first round reads the pool and
        makes every n-gram once, writing each round's to a file of its own (on disk: the
        rounds hold a share each); a later round reads its file (the pool read, and the
        n-grams made, once per round had made the rounds' time grow with their number)."""
        if rounds <= 1:
            found = [np.tile(ngrams, t) for ngrams, t in self._template_ngrams()]
            return route_ngrams(np.concatenate([np.zeros(0, np.uint32), *found]), self.shards)
        if round_ == 0:
            self._drop_ngram_files()
            self._ngram_dir = spill_dir(self.spill_root, "dedup-ngrams-")
            try:
                self._write_ngram_rounds(rounds)
            except BaseException:  # a full disk, a stop: no half-written rounds left
                self._drop_ngram_files()
                raise
        assert self._ngram_dir is not None, "template_counts: round 0 comes first"
        path = self._ngram_dir / f"round-{round_:06d}"
        found = np.fromfile(path, np.uint32)
        path.unlink()
        if round_ == rounds - 1:
            self._drop_ngram_files()
        return route_ngrams(found, self.shards)

    def _write_ngram_rounds(self, rounds: int) -> None:
        """Every n-gram of :meth:`_template_ngrams`, made once, appended to the file of its
        round (``(n // shards) % rounds``; one file per round, each opened once)."""
        assert self._ngram_dir is not None
        with contextlib.ExitStack() as stack:
            files = [
                stack.enter_context(open(self._ngram_dir / f"round-{r:06d}", "wb"))
                for r in range(rounds)
            ]  # every round has its file, empty or not
            for ngrams, t in self._template_ngrams():
                which = (ngrams // np.uint32(self.shards)) % np.uint32(rounds)
                order = np.argsort(which, kind="stable")
                cuts = np.searchsorted(which[order], np.arange(rounds + 1)).tolist()
                del which
                for r in range(rounds):
                    if cuts[r] < cuts[r + 1]:
                        piece = ngrams[order[cuts[r] : cuts[r + 1]]]
                        for _ in range(t):  # a document that stands for t counts t times
                            piece.tofile(files[r])
                del order

    def _template_ngrams(self) -> Iterator[tuple[np.ndarray, int]]:
        """``(n-grams, times)``: per block of the pool and per count, the distinct n-grams
        of each templated document that counts ``times`` times."""
        for _, block in self._pool.blocks():
            texts = block.texts
            if texts.templated is None:
                continue
            times = self._template_times(block.nodes)
            for t in np.unique(times).tolist():
                yield doc_ngrams(texts.chars, texts.templated & (times == t)), t

    def _drop_ngram_files(self) -> None:
        if self._ngram_dir is not None:
            shutil.rmtree(self._ngram_dir, ignore_errors=True)
            self._ngram_dir = None

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
        self._drop_ngram_files()
        flat = [p for p in _flatten(parts) if len(p)]
        template = Template(np.sort(np.concatenate(flat)) if flat else np.zeros(0, np.uint32))
        del flat
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

    def forward(
        self, round_: int = 0, rounds: int = 1
    ) -> list[tuple[np.ndarray, np.ndarray, np.ndarray, Texts]]:
        """``(pairs (u, v) with u < v, their distinct u, sig(u), texts(u))`` routed to the
        owner of ``v`` (each ``u`` travels once per destination, not once per pair). In
        ``rounds`` rounds, round ``round_`` forwards the pairs of the ``round_``-th of
        ``rounds`` ranges of ``u`` (about equal in pairs): a round copies about a
        ``1 / rounds`` share of the texts, and every pair goes in exactly one round."""
        return _routed(self.pairs(round_, rounds), self._pool, self.shards)

    def verify(self, *parts) -> int:
        """Decide the forwarded pairs, block of owned candidates by block, part by part and
        chunk by chunk (bounded copies); keeps the duplicates."""
        count = 0
        for edges, left, right in _by_block(parts, self._pool):
            # each part is decided on its own texts: no copy of all of them at once
            decided = decide_pairs(edges, left, right, self.method, self.fixed)
            self._edges.add(*decided)
            count += len(decided[0])
        return count

    def finish_edges(self) -> int:
        """No more pairs to decide: frees the verification state and sorts the decided
        pairs by larger node (unverified methods: every candidate pair, similarity 1.0);
        returns how many there are."""
        if not self.method.verified:
            for lo, hi in self._held_ranges(self._candidates):
                packed = self._candidate_keys(lo, hi)
                edges = unpack_edges(packed[(packed >> 32) < (packed & 0xFFFFFFFF)])
                self._edges.add(edges, np.ones(len(edges)))
        self._candidates.clear()
        self._candidate_scan = None
        self._signatures.clear()
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

    def pair_runs(self) -> int:
        """Sorted runs of bucket entries and candidate pairs written to disk (0: held)."""
        return sum(r.spilled_runs for r in (self._entries, self._candidates, self._screened))

    def edge_runs(self) -> int:
        """Sorted runs of decided pairs written to disk (0: held)."""
        return self._edges.spilled_runs

    def release_edges(self) -> None:
        """Forget the decided pairs (their spilled runs too)."""
        self._edges.clear()


def _routed(
    edges: np.ndarray, pool: CandidatePool, shards: int
) -> list[tuple[np.ndarray, np.ndarray, np.ndarray, Texts]]:
    """``(pairs, their distinct u, sig(u), texts(u))`` of ``edges`` ``(u, v)`` per owner
    of ``v``, the ``u`` gathered from the blocks of ``pool`` that hold them."""
    wanted = np.unique(edges[:, 0])
    if len(wanted) == 0:
        empty = (np.zeros((0, 2), np.int64), np.zeros(0, np.int64), np.zeros(0), Texts.empty())
        return [empty for _ in range(shards)]
    picked = [  # only the blocks that hold some of them are read (held: used as is)
        b if len(pool) == 1 else b.take(np.flatnonzero(np.isin(b.nodes, wanted)))
        for _, b in pool.blocks(only=pool.block_of(wanted))
    ]
    block = Block.concat(picked) if len(picked) > 1 else picked[0]
    del picked
    nodes, sigs, texts = block.nodes, block.signatures, block.texts
    order = np.argsort(nodes, kind="stable")
    owner = edges[:, 1] % shards
    out = []
    for i in range(shards):
        part = edges[owner == i]
        if len(part) == 0:
            out.append((part, part[:, 0], np.zeros(0), Texts.empty()))
            continue
        left = np.unique(part[:, 0])
        rows = order[np.searchsorted(nodes, left, sorter=order)]
        out.append((part, left, sigs[rows], texts.take(rows)))
    return out


def _by_block(parts: tuple, pool: CandidatePool) -> Iterator[tuple[np.ndarray, Pool, Pool]]:
    """``(pairs, left, right)`` of the forwarded ``parts`` (``(pairs (u, v), u's nodes,
    sigs[, texts])``) grouped by the block of ``pool`` that holds their ``v``: each block
    read once (held: the one block), with each part's pairs in it."""
    grouped, needed = [], [np.zeros(0, np.int64)]
    for edges, nodes, sigs, *texts in (p for p in _flatten(parts) if len(p[0])):
        where = pool.block_of(edges[:, 1])
        order = np.argsort(where, kind="stable")
        bounds = np.searchsorted(where[order], np.arange(len(pool) + 1))
        left = (nodes, np.argsort(nodes), sigs, texts[0] if texts else None)
        grouped.append((edges[order], bounds, left))
        needed.append(np.unique(where))
    for i, block in pool.blocks(only=np.unique(np.concatenate(needed))):
        right = (block.nodes, np.argsort(block.nodes), block.signatures, block.texts)
        for edges, bounds, left in grouped:
            mine = edges[bounds[i] : bounds[i + 1]]
            if len(mine):
                yield mine, left, right


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
