"""Reading MDS samples back (inspect, tokenizer input, loader) and streaming's shm state."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from dataforge.io.mds import (
    MDSFormatError,
    MDSShardWriter,
    decode_sample,
    int_column,
    iter_samples,
    read_index,
    shard_bytes,
    shard_layout,
)
from dataforge.io.streaming_shm import dataset_shm_prefix, shm_locals, unlink_shm

COLUMNS = {"id": "str", "text": "str", "meta": "json", "num_tokens": "int",
           "tokens": "ndarray:uint16", "score": "float64"}  # fmt: skip


def _samples(n: int) -> list[dict]:
    rng = np.random.default_rng(0)
    out = []
    for i in range(n):
        toks = rng.integers(0, 65535, size=int(rng.integers(1, 50))).astype(np.uint16)
        out.append({"id": f"s/{i}", "text": "文本 " * i, "meta": {"n": i}, "num_tokens": len(toks),
                    "tokens": toks, "score": i / 3})  # fmt: skip
    return out


def _write(root: Path, samples: list[dict], compression: str | None) -> None:
    writer = MDSShardWriter(
        root, COLUMNS, compression=compression, hashes=["xxh64"], size_limit=600
    )
    for sample in samples:
        writer.write(sample)
    writer.finish()


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(
        np.array_equal(a[k], b[k]) if isinstance(a[k], np.ndarray) else a[k] == b[k] for k in a
    )


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_written_samples_read_back(tmp_path: Path, compression: str | None) -> None:
    samples = _samples(40)
    _write(tmp_path / "mds", samples, compression)
    got = list(iter_samples(tmp_path))  # a run directory: OUT/mds
    assert len(got) == 40 and all(_same(a, b) for a, b in zip(got, samples, strict=True))
    index = read_index(tmp_path / "mds")
    assert len(index["shards"]) > 1
    lengths, first = [], []
    for shard in index["shards"]:
        raw = shard_bytes(tmp_path / "mds", shard)
        lengths += int_column(
            np.frombuffer(raw, np.uint8), shard_layout(shard), "num_tokens"
        ).tolist()
        begin, end = np.frombuffer(raw, np.uint32, 2, 4)
        first.append(decode_sample(raw[begin:end], shard_layout(shard), ("tokens", "id")))
    assert lengths == [s["num_tokens"] for s in samples]
    assert first[0].keys() == {"id", "tokens"} and first[0]["id"] == "s/0"
    with pytest.raises(ValueError, match="not an MDS 'int' column"):
        int_column(np.frombuffer(raw, np.uint8), shard_layout(shard), "text")


def test_unsafe_index_is_refused(tmp_path: Path) -> None:
    _write(tmp_path, _samples(3), None)
    index = json.loads((tmp_path / "index.json").read_text())
    index["shards"][0]["raw_data"]["basename"] = "../outside.mds"
    (tmp_path / "index.json").write_text(json.dumps(index))
    with pytest.raises(MDSFormatError, match="escapes the dataset directory"):
        list(iter_samples(tmp_path))
    with pytest.raises(MDSFormatError, match="no index.json"):
        list(iter_samples(tmp_path / "nowhere"))


def test_streaming_shm_state_is_found_and_removed(tmp_path: Path) -> None:
    """The wrapped private helpers of streaming still work with the installed version."""
    from streaming import StreamingDataset

    samples = _samples(5)
    _write(tmp_path / "mds", samples, "zstd")
    dataset = StreamingDataset(local=str(tmp_path / "mds"), shuffle=False, batch_size=1)
    try:
        assert _same(dataset.get_item(4), samples[4])
        prefix = dataset_shm_prefix(dataset)
        assert shm_locals(prefix) == [str(tmp_path / "mds")]
    finally:
        del dataset
    assert unlink_shm(prefix) >= 1
    assert shm_locals(prefix) is None
    assert unlink_shm(prefix) == 0


def test_unlink_shm_tolerates_a_rank_that_unlinked_first(tmp_path: Path, monkeypatch) -> None:
    """Two ranks of a node close together: a segment the other rank unlinks between this
    one's open and unlink is not an error (it was a FileNotFoundError at close)."""
    from multiprocessing.shared_memory import SharedMemory

    from streaming import StreamingDataset

    import dataforge.io.streaming_shm as streaming_shm

    _write(tmp_path / "mds", _samples(3), None)
    dataset = StreamingDataset(local=str(tmp_path / "mds"), shuffle=False, batch_size=1)
    prefix = dataset_shm_prefix(dataset)
    del dataset
    raced = []

    class SiblingFirst(SharedMemory):
        def unlink(self) -> None:
            if not raced:  # the sibling rank wins the first segment
                SharedMemory(self.name, create=False).unlink()
                raced.append(self.name)
            super().unlink()

    monkeypatch.setattr(streaming_shm, "SharedMemory", SiblingFirst)
    existed = unlink_shm(prefix)
    assert raced and existed >= 1  # the raced segment is not counted as removed here
    assert shm_locals(prefix) is None and unlink_shm(prefix) == 0
