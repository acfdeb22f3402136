"""The dedup stage's settings: generic keys at the top, each method's own in its block
(dataforge/ops/dedup/config.py); the flat keys of earlier versions refused naming their
new place."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from dedup_testkit import kept_ids, make_table

from dataforge.cli import main
from dataforge.config import ConfigError, from_mapping, load_pipeline, to_plain
from dataforge.ops.dedup import Dedup
from dataforge.ops.dedup.config import (
    MOVED_KEYS,
    DedupConfig,
    MinHashConfig,
    SimHashConfig,
    VerifyConfig,
)

STAGE = "p.yaml: stages[1] (dedup)"

# The flat keys of the previous version and where each lives now.
OLD_TO_NEW = {
    "num_perm": "minhash.num_perm",
    "bands": "minhash.bands",
    "rows": "minhash.rows",
    "engine": "minhash.engine",
    "hash_seed": "minhash.hash_seed",
    "bits": "simhash.bits",
    "max_hamming": "simhash.max_hamming",
    "simhash_blocks": "simhash.blocks",
    "weighting": "simhash.weighting",
    "block": "verify.block",
    "char_block": "verify.char_block",
    "max_own": "verify.max_own",
    "char_max_own": "verify.char_max_own",
    "template_docs": "verify.template_docs",
    "template_run": "verify.template_run",
    "residue_max_own": "verify.residue_max_own",
    "residue_min_shared": "verify.residue_min_shared",
    "min_residue": "verify.min_residue",
    "max_partners": "verify.max_partners",
}
# A value of the old key that its version accepted (the refusal must not depend on it).
OLD_VALUES = {"engine": "numpy", "weighting": "tf", "max_own": 0.05, "char_max_own": 0.02}
OLD_VALUES |= {"residue_max_own": 0.1, "residue_min_shared": 0.2}


def stage(**keys) -> DedupConfig:
    return from_mapping(Dedup.Config, keys, STAGE)


def refused(keys: dict) -> str:
    with pytest.raises(ConfigError) as info:
        stage(**keys)
    return str(info.value)


@pytest.fixture(scope="module")
def copies_table(reviews_zh):
    """24 reviews and 24 near-copies of them: 8 with every 12th character replaced, 8
    with a footer added, 8 cut to three quarters (ids doc00024..doc00047)."""
    base = reviews_zh[:24]
    edited = ["".join("某" if i % 12 == 5 else ch for i, ch in enumerate(t)) for t in base[:8]]
    footed = [t + "本文来源：网络，转载请注明出处。" for t in base[8:16]]
    cut = [t[: len(t) * 3 // 4] for t in base[16:24]]
    texts = base + edited + footed + cut
    return make_table(texts, ["zh"] * len(texts))


def dropped(table, output) -> list[int]:
    ids = set(table.column("id").to_pylist()) - kept_ids(output)
    return sorted(int(i.removeprefix("doc")) for i in ids)


# Dropped documents of `copies_table`, as the flat keys of the previous version gave them
# (same settings, flat spelling: `num_perm: 16, bands: 1, rows: 16`, ...).
BEFORE_THE_RENAME = [
    ({}, list(range(24, 48))),
    ({"minhash": {"num_perm": 16, "bands": 1, "rows": 16}}, [33]),
    ({"method": "simhash"}, [33, 34, 35, 38, 39, 41]),
    ({"method": "simhash", "simhash": {"max_hamming": 4, "weighting": "binary"}}, [39]),
    ({"verify": {"char_block": 3, "char_max_own": 0.0, "template_docs": 0}}, list(range(32, 48))),
    ({"threshold": 0.7}, [26, 29, 32, 33, 34, 35, 36, 38, 39, 40, 41, 44, 45, 46]),
]


@pytest.mark.parametrize("keys, before", BEFORE_THE_RENAME)
def test_nested_keys_drop_what_the_flat_keys_dropped(dedup_runner, copies_table, keys, before):
    summary, out, _ = dedup_runner(copies_table, **keys)
    assert dropped(copies_table, out) == before
    assert summary["dropped"] == len(before)


def test_every_default_spelled_out_is_the_default(dedup_runner, copies_table):
    """All keys of every block written at their defaults (the other method's block too):
    the same config, and the same records, clusters and signatures."""
    spelled = to_plain(DedupConfig())
    assert set(spelled) >= {"minhash", "simhash", "verify"}
    assert stage(**spelled) == DedupConfig()
    _, plain, plain_run = dedup_runner(copies_table)
    _, out, run = dedup_runner(copies_table, **spelled)
    assert out.equals(plain)
    for name in ("clusters.parquet", "signatures.parquet"):
        assert pq.read_table(run / "dedup" / name).equals(pq.read_table(plain_run / "dedup" / name))


def test_each_block_reaches_its_reader():
    minhash = Dedup(stage(minhash={"num_perm": 64, "bands": 8, "rows": 8, "hash_seed": 3}))
    assert minhash.method.bands_rows() == (8, 8)
    assert minhash.method.signature_type().byte_width == 4 * 64
    simhash = Dedup(stage(method="simhash", simhash={"max_hamming": 3, "blocks": 5}))
    assert simhash.method.max_hamming() == 3
    entries = simhash.method.bucket_keys(pa.array([1, 2], pa.uint64()))
    assert entries.keys.shape == (2, 10)  # a table per choice of 2 of the 5 blocks
    verify = Dedup(
        stage(verify={"block": 7, "char_block": 4, "max_own": 0.5, "char_max_own": 0.25})
    )
    texts = verify.verification_texts(
        pa.array(["一个中文句子，足够长。", "an english sentence here"]), pa.array(["zh", "en"])
    )
    assert texts.blocks.tolist() == [4, 7] and texts.max_owns.tolist() == [0.25, 0.5]


def test_published_signature_parameters_keep_their_flat_names():
    """A later run compares these with the metadata of runs made before the rename."""
    minhash = Dedup(stage(minhash={"num_perm": 64, "engine": "numpy", "hash_seed": 3}))
    params = minhash.signature_params()
    assert (params["num_perm"], params["engine"], params["hash_seed"]) == (64, "numpy-v1", 3)
    simhash = Dedup(stage(method="simhash", simhash={"weighting": "log_tf"}))
    assert {k: simhash.signature_params()[k] for k in ("bits", "weighting")} == {
        "bits": 64,
        "weighting": "log_tf",
    }


def test_the_moved_keys_are_the_previous_flat_keys():
    assert MOVED_KEYS == OLD_TO_NEW


@pytest.mark.parametrize("old, new", sorted(OLD_TO_NEW.items()))
def test_every_old_flat_key_is_refused_naming_its_place(old, new):
    value = OLD_VALUES.get(old, 6)
    assert refused({old: value}) == f"{STAGE}: {old}: moved to {new}"


def test_several_old_keys_are_named_in_one_line():
    message = refused({"num_perm": 64, "simhash_blocks": 8, "method": "simhash"})
    assert message == (
        f"{STAGE}: num_perm: moved to minhash.num_perm; simhash_blocks: moved to simhash.blocks"
    )


def test_an_unknown_key_still_lists_the_valid_ones():
    assert refused({"num_perms": 64}).startswith(f"{STAGE}: unknown key(s) ['num_perms']; valid: [")


@pytest.mark.parametrize(
    "block, valid",
    [
        ("minhash", "['bands', 'engine', 'hash_seed', 'num_perm', 'rows']"),
        ("simhash", "['bits', 'blocks', 'max_hamming', 'weighting']"),
        (
            "verify",
            "['block', 'char_block', 'char_max_own', 'max_own', 'max_partners', 'min_residue', "
            "'residue_max_own', 'residue_min_shared', 'template_docs', 'template_run']",
        ),
    ],
)
def test_an_unknown_nested_key_is_refused_listing_the_valid_ones(block, valid):
    method = "simhash" if block == "simhash" else "minhash"
    message = refused({"method": method, block: {"num_perms": 1}})
    assert message == f"{STAGE}.{block}: unknown key(s) ['num_perms']; valid: {valid}"


@pytest.mark.parametrize(
    "keys, message",
    [
        (
            {"method": "minhash", "simhash": {"max_hamming": 4}},
            "simhash: read by method simhash only; this stage has method minhash",
        ),
        (
            {"method": "exact", "simhash": {"weighting": "binary"}},
            "simhash: read by method simhash only; this stage has method exact",
        ),
        (
            {"method": "simhash", "minhash": {"num_perm": 64}},
            "minhash: read by method minhash only; this stage has method simhash",
        ),
        (
            {"method": "exact", "verify": {"max_partners": 2}},
            "verify: read by the candidate check of methods minhash, simhash only; this stage "
            "has method exact, which checks no candidates",
        ),
    ],
)
def test_a_block_the_method_does_not_read_is_refused(keys, message):
    assert refused(keys) == f"{STAGE}: {message}"


def test_a_block_at_its_defaults_is_accepted_for_any_method():
    cfg = stage(method="exact", minhash={"num_perm": 128}, simhash={"max_hamming": 6}, verify={})
    assert cfg == DedupConfig(method="exact")


@pytest.mark.parametrize(
    "keys, message",
    [
        ({"minhash": {"num_perm": 0}}, ".minhash: minhash.num_perm=0; valid range: 1 to 1024"),
        (
            {"minhash": {"num_perm": 1025}},
            ".minhash: minhash.num_perm=1025; valid range: 1 to 1024",
        ),
        (
            {"minhash": {"bands": 4}},
            ".minhash: set both minhash.bands and minhash.rows, or neither (derived from threshold)",
        ),
        ({"minhash": {"bands": 0, "rows": 4}}, ".minhash: minhash.bands=0; valid range: >= 1"),
        (
            {"minhash": {"bands": 17, "rows": 8}},
            ".minhash: minhash.bands * minhash.rows = 17x8 exceeds minhash.num_perm=128",
        ),
        (
            {"minhash": {"engine": "datasketch"}},
            ".minhash.engine: 'datasketch' is not valid; valid: 'rensa', 'numpy'",
        ),
        ({"method": "simhash", "simhash": {"bits": 32}}, ".simhash: simhash.bits=32; valid: 64"),
        ({"method": "simhash", "simhash": {"bits": 128}}, ".simhash: simhash.bits=128; valid: 64"),
        (
            {"method": "simhash", "simhash": {"max_hamming": -1}},
            ".simhash: simhash.max_hamming=-1; valid range: 0 to 63",
        ),
        (
            {"method": "simhash", "simhash": {"max_hamming": 63}},
            ".simhash: simhash.blocks=65 (default: simhash.max_hamming + 2); valid range: "
            "simhash.max_hamming + 1 = 64 to 64",
        ),
        (
            {"method": "simhash", "simhash": {"max_hamming": 6, "blocks": 6}},
            ".simhash: simhash.blocks=6; valid range: simhash.max_hamming + 1 = 7 to 64",
        ),
        (
            {"method": "simhash", "simhash": {"blocks": 65}},
            ".simhash: simhash.blocks=65; valid range: simhash.max_hamming + 1 = 7 to 64",
        ),
        ({"verify": {"block": 0}}, ".verify: verify.block=0; valid range: >= 1"),
        ({"verify": {"max_partners": 0}}, ".verify: verify.max_partners=0; valid range: >= 1"),
        ({"verify": {"template_docs": -1}}, ".verify: verify.template_docs=-1; valid range: >= 0"),
        (
            {"verify": {"residue_min_shared": 1.01}},
            ".verify: verify.residue_min_shared=1.01; valid range: 0.0 to 1.0",
        ),
        ({"threshold": 1.0}, ": threshold=1.0; valid range: 0 to 1, both excluded"),
        ({"ngram_words": 0}, ": ngram_words=0; valid range: >= 1"),
    ],
)
def test_out_of_range_values_are_refused_with_their_key_path(keys, message):
    assert refused(keys) == STAGE + message


def test_boundary_values_are_accepted():
    assert stage(minhash={"num_perm": 1}).minhash.num_perm == 1
    assert stage(minhash={"num_perm": 1024, "bands": 32, "rows": 32}).minhash.bands == 32
    assert stage(minhash={"bands": 16, "rows": 8}).minhash.rows == 8  # bands * rows == num_perm
    assert SimHashConfig(max_hamming=0).block_count() == 2
    assert SimHashConfig(max_hamming=62).block_count() == 64
    assert SimHashConfig(max_hamming=63, blocks=64).block_count() == 64
    assert SimHashConfig(max_hamming=6, blocks=7).block_count() == 7
    edges = VerifyConfig(max_own=0.0, char_max_own=1.0, template_docs=0, min_residue=0)
    assert stage(verify=to_plain(edges)).verify == edges
    assert MinHashConfig(bands=1, rows=1).bands == 1


def _pipeline(tmp_path: Path, dedup: str) -> Path:
    (tmp_path / "a.jsonl").write_text('{"text": "hello"}\n')
    file = tmp_path / "p.yaml"
    file.write_text(
        "name: t\ninputs: [{name: a, path: a.jsonl}]\noutput: {path: out}\n"
        f"stages: [{{op: clean}}, {{op: dedup, {dedup}}}]\n"
    )
    return file


def test_nested_yaml_loads_into_the_blocks(tmp_path):
    file = _pipeline(
        tmp_path, "method: simhash, threshold: 0.5, simhash: {max_hamming: 4, blocks: 8}"
    )
    params = load_pipeline(file).stages[1].params
    assert params == DedupConfig(
        method="simhash", threshold=0.5, simhash=SimHashConfig(max_hamming=4, blocks=8)
    )
    assert main(["validate", str(file)]) == 0


@pytest.mark.parametrize("command", ["validate", "run"])
def test_the_commands_exit_2_on_an_old_key(tmp_path, capsys, command):
    file = _pipeline(tmp_path, "method: minhash, num_perm: 64")
    assert main([command, str(file)]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"error: {file}: stages[1] (dedup): num_perm: moved to minhash.num_perm"
    ]


@pytest.mark.parametrize("command", ["validate", "run"])
def test_the_commands_exit_2_on_a_block_of_the_other_method(tmp_path, capsys, command):
    file = _pipeline(tmp_path, "method: minhash, simhash: {max_hamming: 4}")
    assert main([command, str(file)]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"error: {file}: stages[1] (dedup): simhash: read by method simhash only; this stage "
        "has method minhash"
    ]
