"""A shard's candidate pool: blocks held until ``hold_bytes``, then written to files and
read back the same, one at a time; the files removed when it is cleared."""

from __future__ import annotations

import numpy as np
import pytest

from dataforge.ops.dedup.pool import WRITE_SHARE, Block, CandidatePool
from dataforge.ops.dedup.shingles import ShingleSet
from dataforge.ops.dedup.verify import Texts


def _block(first: int, docs: int, residue: bool = False) -> Block:
    rng = np.random.default_rng(first)
    counts = rng.integers(0, 6, docs)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    sets = [ShingleSet(rng.integers(0, 2**32, offsets[-1]).astype(np.uint32), offsets)
            for _ in range(3)]  # fmt: skip
    texts = Texts(
        sets[0],
        sets[1],
        rng.integers(1, 9, docs),
        rng.random(docs),
        rng.random(docs) < 0.5,
        sets[2] if residue else None,
    )
    sigs = rng.integers(0, 2**32, (docs, 4)).astype(np.uint32)
    return Block(np.arange(first, first + docs, dtype=np.int64), sigs, texts)


def _same(a: Block, b: Block) -> None:
    assert np.array_equal(a.nodes, b.nodes) and np.array_equal(a.signatures, b.signatures)
    for name in ("shingles", "chars", "residue"):
        x, y = getattr(a.texts, name), getattr(b.texts, name)
        assert (x is None) == (y is None)
        if x is not None:
            assert np.array_equal(x.hashes, y.hashes) and x.hashes.dtype == y.hashes.dtype
            assert np.array_equal(x.offsets, y.offsets)
    for name in ("blocks", "max_owns", "templated"):
        assert np.array_equal(getattr(a.texts, name), getattr(b.texts, name))


def test_without_a_hold_the_blocks_are_joined_in_memory(tmp_path):
    pool = CandidatePool(None, str(tmp_path))
    blocks = [_block(0, 5), _block(5, 7), _block(12, 3)]
    for block in blocks:
        pool.add(block)
    assert pool.block_of(np.array([14, 0, 6])).tolist() == [0, 0, 0]  # joined first
    ((_, joined),) = list(pool.blocks(only=np.array([0])))
    _same(joined, Block.concat(blocks))
    assert not pool.spilled and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("residue", [False, True])
def test_past_the_hold_every_block_goes_to_disk_and_comes_back_the_same(tmp_path, residue):
    blocks = [_block(0, 5, residue), _block(5, 7, residue), _block(12, 3, residue)]
    pool = CandidatePool(blocks[0].nbytes, str(tmp_path))  # the first fits exactly
    pool.add(blocks[0])
    assert not pool.spilled
    pool.add(blocks[1])
    assert pool.spilled and pool.nbytes == blocks[0].nbytes + blocks[1].nbytes
    pool.add(blocks[2])
    for (_, got), want in zip(pool.blocks(), blocks, strict=True):
        _same(got, want)
    (spill,) = tmp_path.iterdir()
    assert spill.name.startswith("dedup-shard-") and len(list(spill.iterdir())) == 3
    # replaced in place (the residues cut from the template)
    cut = [_block(b.nodes[0], len(b.nodes), residue=True) for b in blocks]
    pool.replace_all(iter(cut))
    for (_, got), want in zip(pool.blocks(), cut, strict=True):
        _same(got, want)
    # which block holds a node, and the template's lengths, known without a read
    assert pool.block_of(np.array([13, 0, 6, 14])).tolist() == [2, 0, 1, 2]
    for lengths, block in zip(pool.templated_lengths(), cut, strict=True):
        want = np.diff(block.texts.chars.offsets) * block.texts.templated
        assert lengths.tolist() == want.tolist()
    assert [i for i, _ in pool.blocks(only=np.array([2, 0, 2]))] == [0, 2]
    pool.clear()
    assert list(tmp_path.iterdir()) == [] and list(pool.blocks()) == []


def test_a_spill_root_missing_on_this_node_falls_back_to_the_temp_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR again
    pool = CandidatePool(0, str(tmp_path / "not-on-this-node"))
    pool.add(_block(0, 4))
    assert [p.name[:12] for p in (tmp_path / "tmp").iterdir()] == ["dedup-shard-"]
    pool.clear()
    assert list((tmp_path / "tmp").iterdir()) == []


def test_spilled_blocks_are_gathered_to_a_share_of_the_hold_and_read_back_in_order(tmp_path):
    """Past the hold, small blocks are written together, about hold_bytes / WRITE_SHARE
    each (a pass opens a few files, not one per part): the same candidates come back, in
    the order added, and every node is found in the block that holds it."""
    blocks = [_block(10 * i, 1 + i % 4) for i in range(40)]
    hold = sum(b.nbytes for b in blocks[:16])
    pool = CandidatePool(hold, str(tmp_path))
    for block in blocks:
        pool.add(block)
    assert pool.spilled
    read = [b for _, b in pool.blocks()]
    assert pool.nbytes == sum(b.nbytes for b in read)  # joined: fewer offsets than apart
    (spill,) = tmp_path.iterdir()
    assert len(read) == len(list(spill.iterdir())) < len(blocks) // 3
    share = hold // WRITE_SHARE
    largest = max(b.nbytes for b in blocks)
    joined = 4 * 8 * len(blocks)  # at most the offsets a join saves (one per set and block)
    assert all(share - joined <= b.nbytes < share + largest for b in read[:-1])
    _same(Block.concat(read), Block.concat(blocks))
    nodes = np.concatenate([b.nodes for b in blocks])
    where = pool.block_of(nodes)
    for i, block in enumerate(read):
        assert sorted(nodes[where == i].tolist()) == sorted(block.nodes.tolist())
    pool.add(_block(1000, 2))  # added after a read: written at the next read
    assert len(pool) == len(read) + 1 and pool.block_of(np.array([1001])).tolist() == [len(read)]


@pytest.mark.parametrize("hold", [None, 1])  # held and joined, or every block spilled
@pytest.mark.parametrize("residue", [False, True])
def test_doc_bytes_are_each_documents_rows_without_reading_the_blocks(tmp_path, hold, residue):
    """A document's bytes are its rows of every array; they add up to the block's bytes but
    for one offset per shingle set, and a node not held has none. Nothing is read."""
    blocks = [_block(0, 5, residue), _block(5, 7, residue), _block(12, 3, residue)]
    pool = CandidatePool(hold, str(tmp_path))
    for block in blocks:
        pool.add(block)
    joined = Block.concat(blocks)
    t, nodes = joined.texts, np.array([3, 14, 0, 99, 7], np.int64)
    sets = [t.shingles, t.chars] + ([t.residue] if residue else [])
    fixed = 8 + 4 * 4 + 8 + 8 + 1 + 8 * len(sets)  # node, signature, rules, offsets
    own = [fixed + sum(4 * int(np.diff(s.offsets)[n]) for s in sets) for n in (3, 14, 0, 7)]
    pool.blocks = None  # type: ignore[method-assign]  # a read would fail
    assert pool.doc_bytes(nodes).tolist() == [*own[:3], 0, own[3]]
    everything = pool.doc_bytes(joined.nodes).sum()
    assert everything == joined.nbytes - 8 * len(sets)


def test_a_spilled_pool_holds_twenty_four_bytes_a_candidate(tmp_path):
    """Spilled, the pool keeps per candidate only what sizes and routes a pass without a
    read: its node, template length and bytes (4 bytes each) and the sorted lookup (node,
    block, bytes: 4 each); and it still finds every node's block and bytes."""
    blocks = [_block(i * 50, 50) for i in range(40)]
    pool = CandidatePool(1, str(tmp_path))
    for block in blocks:
        pool.add(block)
    nodes = np.concatenate([b.nodes for b in blocks])
    where = pool.block_of(nodes[::-1])
    sizes = pool.doc_bytes(nodes)
    held = [*pool._nodes, *pool._lengths, *pool._row_bytes, *pool._lookup]
    assert sum(a.nbytes for a in held) == 24 * len(nodes)
    read = [b for _, b in pool.blocks()]
    for node, i in zip(nodes[::-1].tolist(), where.tolist(), strict=True):
        assert node in read[i].nodes
    fresh = CandidatePool(None, str(tmp_path / "held"))
    for block in blocks:
        fresh.add(block)
    assert sizes.dtype == np.int64 and sizes.tolist() == fresh.doc_bytes(nodes).tolist()
