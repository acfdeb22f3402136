"""MinHash signatures, banding and the op's prepare/apply."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from dedup_testkit import make_table

from dataforge.config import ConfigError, from_mapping
from dataforge.ops.dedup import Dedup
from dataforge.ops.dedup.config import MinHashConfig
from dataforge.ops.dedup.minhash import band_keys, minhash_signatures, optimal_bands
from dataforge.ops.dedup.shingles import ShingleSet, mix64


def _sets(overlap: int, only: int) -> ShingleSet:
    common = mix64(np.arange(overlap, dtype=np.uint64))
    a = mix64(np.arange(10**6, 10**6 + only, dtype=np.uint64))
    b = mix64(np.arange(2 * 10**6, 2 * 10**6 + only, dtype=np.uint64))
    hashes = np.concatenate([common, a, common, b])
    return ShingleSet(hashes, np.array([0, overlap + only, 2 * (overlap + only)]))


@pytest.mark.parametrize("engine", ["numpy", "rensa"])
def test_signature_agreement_estimates_jaccard(engine):
    shingles = _sets(600, 200)  # Jaccard 600 / 1000
    op = Dedup(Dedup.Config(minhash=MinHashConfig(num_perm=512, engine=engine)))
    sig = (
        minhash_signatures(shingles, 512, 0)
        if engine == "numpy"
        else op.method.signatures(shingles, None)
    )
    assert sig.shape == (2, 512) and sig.dtype == np.uint32
    assert abs((sig[0] == sig[1]).mean() - 0.6) < 0.07


def test_optimal_bands_matches_datasketch():
    from datasketch.lsh import _optimal_param

    for threshold in (0.5, 0.7, 0.8, 0.9):
        assert optimal_bands(threshold, 128) == _optimal_param(threshold, 128, 0.5, 0.5)
    bands, rows = optimal_bands(0.4, 128, max_bands=25)
    assert bands <= 25 and bands * rows <= 128


def test_band_keys_equal_bands_collide_only_in_same_band():
    sig = np.zeros((2, 8), np.uint32)
    sig[1, 4:] = 7  # band 0 equal, band 1 different
    keys = band_keys(sig, 2, 4)
    assert keys[0, 0] == keys[1, 0] and keys[0, 1] != keys[1, 1]
    same_rows = band_keys(np.zeros((1, 8), np.uint32), 2, 4)
    assert same_rows[0, 0] != same_rows[0, 1]


def test_prepare_adds_fixed_size_signature_null_for_empty(reviews_zh, docs_en):
    op = Dedup(Dedup.Config(method="minhash", minhash=MinHashConfig(num_perm=64)))
    op.setup()
    table = make_table(
        [reviews_zh[0], "", "。。。", docs_en[0], "ab"], ["zh", "zh", "zh", "en", "en"]
    )
    out = op.prepare(table)
    col = out.column("_minhash")
    assert col.type == pa.binary(256)
    assert [v is None for v in col.to_pylist()] == [False, True, True, False, False]
    assert out.select(table.column_names).equals(table)


def test_prepare_is_batch_independent(reviews_zh, docs_en):
    op = Dedup(Dedup.Config())
    op.setup()
    texts = reviews_zh[:10] + docs_en[:10]
    table = make_table(texts, ["zh"] * 10 + ["en"] * 10)
    whole = op.prepare(table).column("_minhash").to_pylist()
    pieces = [op.prepare(table.slice(i, 3)).column("_minhash").to_pylist() for i in range(0, 20, 3)]
    assert whole == [v for piece in pieces for v in piece]


def test_apply_marks_decided_rows():
    op = Dedup(Dedup.Config())
    table = make_table(["a", "b", "c"], ["en"] * 3)
    decision = pa.table(
        {"_ord": pa.array([2, 0], pa.int64()), "_dedup_reason": ["dedup:minhash"] * 2}
    )
    assert op.apply(table, decision).column("drop").to_pylist() == [
        "dedup:minhash",
        None,
        "dedup:minhash",
    ]
    assert op.apply(table, None).equals(table)


@pytest.mark.parametrize(
    "raw, message",
    [
        ({"method": "lsh"}, "valid: 'exact', 'minhash', 'simhash'"),
        ({"minhash": {"bands": 4}}, "set both minhash.bands and minhash.rows"),
        (
            {"minhash": {"bands": 20, "rows": 10}},
            r"minhash.bands \* minhash.rows = 20x10 exceeds minhash.num_perm=128$",
        ),
        ({"threshold": 1.5}, "threshold"),
        ({"method": "simhash", "simhash": {"bits": 32}}, "simhash.bits=32; valid: 64"),
        ({"keep": {"prefer": ["a"]}}, "unknown key"),
        ({"shingle": "bpe"}, "'auto', 'char', 'word', 'jieba'"),
        ({"normalize": {"s2t": True}}, "unknown key"),
        ({"verify": {"max_own": 1.5}}, r"verify.max_own=1.5; valid range: 0.0 to 1.0$"),
        ({"verify": {"char_max_own": -0.1}}, r"verify.char_max_own=-0.1; valid range: 0.0 to 1.0$"),
        ({"verify": {"char_block": 0}}, r"verify.char_block=0; valid range: >= 1$"),
    ],
)
def test_config_errors_name_the_valid_choices(raw, message):
    with pytest.raises(ConfigError, match=message):
        from_mapping(Dedup.Config, raw, "stages[0]")


def test_config_from_yaml_mapping():
    cfg = from_mapping(
        Dedup.Config,
        {
            "method": "simhash",
            "simhash": {"max_hamming": 4},
            "keep": {"prefer_source": ["a", "b"]},
            "against": ["x"],
            "normalize": {"t2s": True},
        },
        "stages[0]",
    )
    assert cfg.keep.prefer_source == ("a", "b") and cfg.against == ("x",)
    assert cfg.normalize.t2s is True
    assert cfg.simhash.block_count() == 6


def test_jieba_shingles(reviews_zh):
    op = Dedup(Dedup.Config(shingle="jieba", minhash=MinHashConfig(num_perm=64)))
    op.setup()
    text = reviews_zh[1]
    sig = op.prepare(make_table([text, text.replace("，", " , "), reviews_zh[2]], ["zh"] * 3))
    values = sig.column("_minhash").to_pylist()
    assert values[0] == values[1] != values[2]
