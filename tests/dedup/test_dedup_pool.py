"""A shard's candidate pool: blocks held until ``hold_bytes``, then written to files and
read back the same, one at a time; the files removed when it is cleared."""

from __future__ import annotations

import numpy as np
import pytest

from dataforge.ops.dedup.pool import Block, CandidatePool
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
