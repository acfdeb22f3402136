"""Our MDS writer produces exactly what streaming.MDSWriter produces."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataforge.io.mds import MDSShardWriter, supports

COLUMNS = {"id": "str", "text": "str", "meta": "json", "num_tokens": "int",
           "tokens": "ndarray:uint16", "score": "float64", "wide": "ndarray:int32"}  # fmt: skip


def samples_strategy():
    token_lists = st.lists(st.integers(0, 65535), min_size=1, max_size=300)
    return st.lists(
        st.builds(
            lambda i, text, toks, big: {
                "id": f"s/{i}", "text": text, "meta": {"k": text[:3], "n": i},
                "num_tokens": len(toks), "tokens": np.array(toks, np.uint16),
                "score": i / 7, "wide": np.array(big, np.int32)},
            st.integers(0, 10**6), st.text(max_size=200), token_lists,
            st.lists(st.integers(-(2**31), 2**31 - 1), min_size=1, max_size=70000)
            .filter(lambda v: True),
        ),
        min_size=0, max_size=12,
    )  # fmt: skip


def write_both(
    tmp: Path, samples: list[dict], compression: str | None, size_limit: int
) -> tuple[Path, Path]:
    from streaming import MDSWriter

    ours, theirs = tmp / "ours", tmp / "theirs"
    writer = MDSShardWriter(ours, COLUMNS, compression=compression, hashes=["sha1", "xxh64"],
                            size_limit=size_limit)  # fmt: skip
    for s in samples:
        writer.write(s)
    writer.finish()
    with MDSWriter(out=str(theirs), columns=COLUMNS, compression=compression,
                   hashes=["sha1", "xxh64"], size_limit=size_limit) as ref:  # fmt: skip
        for s in samples:
            ref.write(s)
    return ours, theirs


@settings(max_examples=25, deadline=None)
@given(samples=samples_strategy(), compression=st.sampled_from([None, "zstd", "zstd:7"]),
       size_limit=st.sampled_from([1 << 10, 1 << 16, 1 << 26]))  # fmt: skip
def test_byte_identical_to_streaming(tmp_path_factory, samples, compression, size_limit) -> None:
    tmp = tmp_path_factory.mktemp("mds")
    ours, theirs = write_both(tmp, samples, compression, size_limit)
    assert json.loads((ours / "index.json").read_text()) == json.loads(
        (theirs / "index.json").read_text()
    )
    assert sorted(p.name for p in ours.iterdir()) == sorted(p.name for p in theirs.iterdir())
    for shard in theirs.glob("shard.*"):
        assert (ours / shard.name).read_bytes() == shard.read_bytes()


def test_streaming_reads_our_shards(tmp_path: Path) -> None:
    from streaming import StreamingDataset

    samples = [{"id": f"s/{i}", "text": "数据" * i, "meta": {"i": i}, "num_tokens": i + 1,
                "tokens": np.arange(i + 1, dtype=np.uint16), "score": 0.5,
                "wide": np.array([i, -i], np.int32)} for i in range(50)]  # fmt: skip
    writer = MDSShardWriter(tmp_path / "ds", COLUMNS, compression="zstd", hashes=["xxh64"],
                            size_limit=2048)  # fmt: skip
    for s in samples:
        writer.write(s)
    writer.finish()
    ds = StreamingDataset(local=str(tmp_path / "ds"), shuffle=False, batch_size=1)
    assert len(ds) == 50
    got = ds[49]
    assert got["text"] == "数据" * 49 and got["meta"] == {"i": 49}
    assert got["tokens"].dtype == np.uint16 and got["tokens"].tolist() == list(range(50))


def test_supports_and_refusals(tmp_path: Path) -> None:
    assert supports(COLUMNS, "zstd") and not supports(COLUMNS, "gz")
    assert not supports({"x": "pkl"}, None) and not supports({"x": "ndarray:int32:3"}, None)
    writer = MDSShardWriter(tmp_path / "w", {"t": "ndarray:uint16"}, compression=None, hashes=[],
                            size_limit=None)  # fmt: skip
    with pytest.raises(ValueError, match="empty"):
        writer.write({"t": np.array([], np.uint16)})
    with pytest.raises(ValueError, match="wrong dtype"):
        writer.write({"t": np.array([1], np.int64)})
