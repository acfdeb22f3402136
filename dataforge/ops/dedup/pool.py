"""The candidates an index shard owns for verification: signatures and texts, in blocks.

A block is ``(nodes, signatures, texts)`` of some candidates: what one ``add_payload`` call
brought (one prepared part's candidates of this shard) while they are held. Blocks stay in
memory while they hold at most ``hold_bytes`` together; past that every block, held and
later, goes to disk, the small ones gathered into blocks of about ``hold_bytes //
WRITE_SHARE`` first (a pass reads every block it needs, each a directory of files: a block
per part made the opening of files, not the reading, what a pass paid for), each block to
a directory of its own in a directory made for the shard (under ``spill_root`` where that
is a directory on this node, e.g. the run's spill dir; else the system's temporary
directory, as on another node of a cluster) and is read back one at a time by the shard's
passes (template counting, forwarding a round, verifying), so that a shard holds one block
and a round's share of forwarded texts, not every candidate's texts. Files are plain
``.npy`` arrays (no pickle) and are removed by :meth:`CandidatePool.clear`. Without a
``hold_bytes`` nothing spills
and the blocks are joined into one, as one pool in memory.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from dataforge.ops.dedup.runs import spill_dir
from dataforge.ops.dedup.shingles import ShingleSet
from dataforge.ops.dedup.verify import Texts

__all__ = ["WRITE_SHARE", "Block", "CandidatePool"]

WRITE_SHARE = 4
"""Spilled blocks are gathered up to ``hold_bytes // WRITE_SHARE`` before they are written
(a pass then holds one such block beside its share of forwarded texts)."""


@dataclasses.dataclass
class Block:
    """Candidates by node key: their signatures and texts, row for row."""

    nodes: np.ndarray
    signatures: np.ndarray
    texts: Texts

    @property
    def nbytes(self) -> int:
        return self.nodes.nbytes + self.signatures.nbytes + self.texts.nbytes

    def take(self, rows: np.ndarray) -> Block:
        return Block(self.nodes[rows], self.signatures[rows], self.texts.take(rows))

    @staticmethod
    def concat(blocks: list[Block]) -> Block:
        return Block(
            np.concatenate([np.zeros(0, np.int64), *(b.nodes for b in blocks)]),
            np.concatenate([b.signatures for b in blocks]),
            Texts.concat([b.texts for b in blocks]),
        )


class CandidatePool:
    """A shard's candidate blocks, in memory or spilled past ``hold_bytes``."""

    def __init__(self, hold_bytes: int | None = None, spill_root: str | None = None) -> None:
        self.hold_bytes = hold_bytes
        self.spill_root = spill_root
        self._blocks: list[Block | Path] = []
        self._sizes: list[int] = []
        self._nodes: list[np.ndarray] = []
        """Each block's nodes, held even when the block is spilled (int32: 4 bytes a candidate)."""
        self._lengths: list[np.ndarray] = []
        """Each block's documents' ``chars`` counts where the template rule applies, else
        0 (held beside the nodes: the template's size needs no read of the blocks)."""
        self._row_bytes: list[np.ndarray] = []
        """Each block's bytes per document (its rows of every array), held beside the
        nodes: :meth:`doc_bytes` sizes a forwarding round without reading the blocks."""
        self._lookup: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        """Every node sorted, its block and its document's bytes (:meth:`block_of`,
        :meth:`doc_bytes`), made once per change."""
        self._dir: Path | None = None
        self._pending: list[Block] = []
        """Spilled: blocks added since the last write, written as one when they reach
        ``hold_bytes // WRITE_SHARE`` or anything reads the pool."""

    @property
    def spilled(self) -> bool:
        return self._dir is not None

    @property
    def nbytes(self) -> int:
        """Bytes of every block, held or spilled."""
        return sum(self._sizes) + sum(b.nbytes for b in self._pending)

    def __len__(self) -> int:
        self._join_held()
        return len(self._blocks)

    def add(self, block: Block) -> None:
        if self._dir is not None:
            self._pending.append(block)
            if sum(b.nbytes for b in self._pending) >= self._write_bytes():
                self._write_pending()
            return
        self._blocks.append(block)
        self._note(len(self._blocks) - 1, block)
        if self.hold_bytes is not None and self.nbytes > self.hold_bytes:
            self._dir = spill_dir(self.spill_root, "dedup-shard-")
            held, self._blocks = self._blocks, []
            self._sizes, self._nodes, self._lengths, self._row_bytes = [], [], [], []
            for one in held:  # the held ones, gathered as later ones are
                self.add(one)  # type: ignore[arg-type]

    def _write_bytes(self) -> int:
        return (self.hold_bytes or 0) // WRITE_SHARE

    def _write_pending(self) -> None:
        """The blocks added since the last write, as one block on disk."""
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        block = pending[0] if len(pending) == 1 else Block.concat(pending)
        del pending
        self._blocks.append(self._write(len(self._blocks), block))
        self._note(len(self._blocks) - 1, block)

    def templated_lengths(self) -> list[np.ndarray]:
        """Per block, each document's ``chars`` count where the template rule applies
        (else 0), without reading the blocks."""
        self._join_held()
        return self._lengths

    def node_blocks(self) -> list[np.ndarray]:
        """Per block, its nodes, without reading the blocks."""
        self._join_held()
        return self._nodes

    def _note(self, i: int, block: Block) -> None:
        """Keep what is known of block ``i`` without reading it (new or replaced)."""
        texts = block.texts
        lengths = _int32(np.diff(texts.chars.offsets))
        if texts.templated is None:
            lengths = np.zeros_like(lengths)
        else:
            lengths = lengths * texts.templated.astype(np.int32)
        # spilled, a block's nodes are a copy held for the whole pass: 4 bytes (keys are
        # below MAX_NODE); held, they are the block's own array
        nodes = block.nodes.astype(np.int32) if self.spilled else block.nodes
        entry = (block.nbytes, nodes, lengths, _int32(_row_bytes(block)))
        if i == len(self._sizes):
            self._sizes.append(entry[0])
            self._nodes.append(entry[1])
            self._lengths.append(entry[2])
            self._row_bytes.append(entry[3])
        else:
            self._sizes[i], self._nodes[i], self._lengths[i], self._row_bytes[i] = entry
        self._lookup = None

    def blocks(self, only: np.ndarray | None = None) -> Iterator[tuple[int, Block]]:
        """``(index, block)`` of every block in the order added, one loaded at a time
        (held: joined into one first); ``only``: just the blocks of those indices."""
        self._join_held()
        wanted = range(len(self._blocks)) if only is None else np.unique(only).tolist()
        for i in wanted:
            held = self._blocks[i]
            yield i, held if isinstance(held, Block) else _read(held)

    def block_of(self, nodes: np.ndarray) -> np.ndarray:
        """The index of the block that holds each of ``nodes`` (every one must be held)."""
        self._join_held()
        if len(self._nodes) <= 1:
            return np.zeros(len(nodes), np.int32)
        held, which, _ = self._sorted()
        return which[np.searchsorted(held, np.asarray(nodes).astype(np.int32))]

    def doc_bytes(self, nodes: np.ndarray) -> np.ndarray:
        """The bytes each of ``nodes`` takes in its block (0 for a node not held), without
        reading the blocks."""
        self._join_held()
        nodes = np.asarray(nodes).astype(np.int32)
        held, _, sizes = self._sorted()
        if len(held) == 0:
            return np.zeros(len(nodes), np.int64)
        at = np.minimum(np.searchsorted(held, nodes), len(held) - 1)
        return np.where(held[at] == nodes, sizes[at], 0).astype(np.int64)

    def _sorted(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every node sorted, with its block and its document's bytes (4 bytes each: 12
        a candidate, held while the pool is read)."""
        if self._lookup is None:
            held = np.concatenate([np.zeros(0, np.int32), *(_int32(n) for n in self._nodes)])
            counts = [len(n) for n in self._nodes]
            which = np.repeat(np.arange(len(self._nodes), dtype=np.int32), counts)
            sizes = np.concatenate([np.zeros(0, np.int32), *self._row_bytes])
            order = np.argsort(held, kind="stable")
            self._lookup = (held[order], which[order], sizes[order])
        return self._lookup

    def _join_held(self) -> None:
        """Before a read: held blocks (nothing spilled) become one (one pool, sorted once
        per pass); spilled, the blocks not written yet are."""
        if self.spilled:
            self._write_pending()
        elif len(self._blocks) > 1:
            joined = Block.concat(self._blocks)  # type: ignore[arg-type]
            self._blocks = [joined]
            self._sizes, self._nodes, self._lengths, self._row_bytes = [], [], [], []
            self._note(0, joined)

    def replace_all(self, blocks: Iterator[Block]) -> None:
        """Put ``blocks`` (one per block of :meth:`blocks`, same order) in their place."""
        for i, block in enumerate(blocks):
            self._note(i, block)
            self._blocks[i] = self._write(i, block) if self.spilled else block

    def clear(self) -> None:
        """Forget every block; remove the spill directory."""
        self._blocks, self._sizes, self._nodes, self._lengths = [], [], [], []
        self._row_bytes, self._pending = [], []
        self._lookup = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def _write(self, i: int, block: Block) -> Path:
        assert self._dir is not None
        path = self._dir / f"block-{i:06d}"
        path.mkdir(exist_ok=True)
        for name, array in _arrays(block).items():
            np.save(path / f"{name}.npy", array, allow_pickle=False)
        return path


def _int32(values: np.ndarray) -> np.ndarray:
    """``values`` (non-negative) as int32, clipped at its largest value (node keys are below
    it; a count past it only weighs a round, never decides a pair)."""
    return np.minimum(values, np.iinfo(np.int32).max).astype(np.int32)


def _row_bytes(block: Block) -> np.ndarray:
    """Per document of ``block``, the bytes of its rows: node, signature, each shingle
    set's hashes and offset, and the per-document rules (they add up to ``nbytes`` but for
    one offset per set)."""
    n, t = len(block.nodes), block.texts
    fixed = block.nodes.itemsize + (block.signatures.nbytes // n if n else 0)
    fixed += sum(r.itemsize for r in (t.blocks, t.max_owns, t.templated) if r is not None)
    per = np.full(n, fixed, np.int64)
    for s in (t.shingles, t.chars, t.residue):
        if s is not None:
            per += np.diff(s.offsets).astype(np.int64) * s.hashes.itemsize + s.offsets.itemsize
    return per


def _arrays(block: Block) -> dict[str, np.ndarray]:
    t = block.texts
    out = {
        "nodes": block.nodes,
        "signatures": block.signatures,
        "shingles.hashes": t.shingles.hashes,
        "shingles.offsets": t.shingles.offsets,
        "chars.hashes": t.chars.hashes,
        "chars.offsets": t.chars.offsets,
    }
    for name in ("blocks", "max_owns", "templated"):
        if getattr(t, name) is not None:
            out[name] = getattr(t, name)
    if t.residue is not None:
        out["residue.hashes"], out["residue.offsets"] = t.residue.hashes, t.residue.offsets
    return out


def _read(path: Path) -> Block:
    def load(name: str) -> np.ndarray | None:
        file = path / f"{name}.npy"
        return np.load(file, allow_pickle=False) if file.exists() else None

    residue = None
    if (path / "residue.hashes.npy").exists():
        residue = ShingleSet(load("residue.hashes"), load("residue.offsets"))
    texts = Texts(
        ShingleSet(load("shingles.hashes"), load("shingles.offsets")),
        ShingleSet(load("chars.hashes"), load("chars.offsets")),
        load("blocks"),
        load("max_owns"),
        load("templated"),
        residue,
    )
    return Block(load("nodes"), load("signatures"), texts)
