"""The loader and the trainer on hostile datasets: no file written outside their cache
folder (traversal, absolute paths and symlinks in every index field that names a file,
local and remote), and every corrupt shard a one-line error naming it, never a
traceback mid-step or SIGBUS (issue 31, cases 1 and 4)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import zstandard
from chaos_kit import snapshot

from dataforge.io.mds import MDSCorruptError, MDSShardWriter
from dataforge.loader import LoaderConfig, build_dataloader

COLUMNS = {"id": "str", "text": "str", "source": "str", "lang": "str", "meta": "json",
           "tokens": "ndarray:uint16", "num_tokens": "int"}  # fmt: skip
SITE = "venv/lib/python3.11/site-packages"
PAYLOAD = b"import pathlib; pathlib.Path(__file__).with_name('pwned').write_text('x')\n"
REPO = Path(__file__).resolve().parents[2]


def write_dataset(root: Path, n: int = 40, compression: str | None = "zstd", bad=None) -> Path:
    """``n`` pretrain samples (token ids 1..899) in shards of ~1 KB; ``bad``: (sample,
    token id) put at that sample's fourth token."""
    writer = MDSShardWriter(root, COLUMNS, compression=compression, hashes=["xxh64"],
                            size_limit=1024)  # fmt: skip
    rng = np.random.default_rng(0)
    for i in range(n):
        tokens = rng.integers(1, 900, 8 + i % 7).astype(np.uint16)
        if bad and bad[0] == i:
            tokens[3] = bad[1]
        writer.write({"id": f"s/{i}", "text": f"doc {i}", "source": "s", "lang": "en",
                      "meta": {}, "tokens": tokens, "num_tokens": len(tokens)})  # fmt: skip
    writer.finish()
    return root


def edit_index(root: Path, edit: Callable[[dict], None]) -> None:
    index = json.loads((root / "index.json").read_text())
    edit(index)
    (root / "index.json").write_text(json.dumps(index))


def loader_config(stream: str, cache: Path, **kw) -> LoaderConfig:
    return LoaderConfig(streams=[{"path": stream}], max_tokens=256, max_seq_len=32,
                        cache_dir=str(cache), **kw)  # fmt: skip


def load_all(stream: str, cache: Path, **kw) -> list[int]:
    """First token of every sample served in one epoch."""
    with build_dataloader(loader_config(stream, cache, **kw)) as loader:
        return [int(t) for b in loader for t in b["input_ids"][:, 0]]


def outside(tmp_path: Path, cache: Path) -> dict:
    return {k: v for k, v in snapshot(tmp_path).items() if not Path(k).is_relative_to(cache)}


def assert_one_line(exc: BaseException, *parts: str) -> None:
    message = str(exc)
    assert "\n" not in message and all(p in message for p in parts), message


# -- case 1: nothing written outside the cache --------------------------------------------


def _hostile(tmp_path: Path, field: str, kind: str) -> Path:
    """A compressed dataset whose shard 0 ``field`` names a file outside it by ``kind``.
    The loader's stream directory is ``cache/<run>/stream0``: three levels up is tmp_path."""
    root = write_dataset(tmp_path / "mds")
    (tmp_path / SITE).mkdir(parents=True)
    target = tmp_path / SITE / "evil.pth"
    index = json.loads((root / "index.json").read_text())
    shard = index["shards"][0]
    if field == "zip_data":  # a shard planted outside, read through the index
        (tmp_path / "outside").mkdir()
        target = tmp_path / "outside" / "planted.zstd"
        target.write_bytes((root / shard["zip_data"]["basename"]).read_bytes())
    else:  # streaming inflated zip_data into local/<raw basename>: the .pth payload
        data = zstandard.ZstdCompressor().compress(PAYLOAD)
        (root / shard["zip_data"]["basename"]).write_bytes(data)
        shard["zip_data"].update(bytes=len(data), hashes={})
        shard["raw_data"].update(bytes=len(PAYLOAD), hashes={})
    if kind == "traversal":
        name = f"../../../{target.relative_to(tmp_path)}"
    elif kind == "absolute":
        name = str(target)
    else:  # a symlink inside the dataset to the target
        name = f"link-{field}"
        (root / name).symlink_to(target)
        if field == "zip_data":
            (root / shard["zip_data"]["basename"]).unlink()
    old = shard[field]["basename"]
    shard[field]["basename"] = name
    if field == "zip_data" and kind != "symlink":
        (root / old).unlink()
    (root / "index.json").write_text(json.dumps(index))
    return root


@pytest.mark.parametrize("kind", ["traversal", "absolute", "symlink"])
@pytest.mark.parametrize("field", ["raw_data", "zip_data"])
def test_index_names_outside_the_dataset_are_refused(tmp_path, field, kind) -> None:
    root = _hostile(tmp_path, field, kind)
    cache = tmp_path / "cache"
    before = outside(tmp_path, cache)
    with pytest.raises(MDSCorruptError) as err:
        load_all(str(root), cache)
    assert_one_line(err.value, "shard", "outside" if kind == "symlink" else "escapes")
    assert outside(tmp_path, cache) == before
    assert not (tmp_path / SITE / "evil.pth").exists()
    assert [p.name for p in cache.iterdir()] == []  # the run's directory went too


def test_stray_symlinks_in_the_dataset_are_never_written_through(tmp_path) -> None:
    """streaming wrote ``local/<raw>.tmp`` before renaming it: a dataset that shipped that
    name as a symlink had the inflated shard written over the link's target."""
    root = write_dataset(tmp_path / "mds")
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    for shard in json.loads((root / "index.json").read_text())["shards"]:
        (root / f"{shard['raw_data']['basename']}.tmp").symlink_to(victim)
    cache = tmp_path / "cache"
    before = outside(tmp_path, cache)
    assert sorted(load_all(str(root), cache)) == sorted(_first_tokens(root))
    assert victim.read_text() == "precious" and outside(tmp_path, cache) == before


def _first_tokens(root: Path) -> list[int]:
    from dataforge.io.mds import iter_samples

    return [int(s["tokens"][0]) for s in iter_samples(root)]


def test_shard_names_that_collide_with_the_index_are_refused(tmp_path) -> None:
    root = write_dataset(tmp_path / "mds")
    edit_index(root, lambda ix: ix["shards"][0]["raw_data"].update(basename="index.json"))
    with pytest.raises(MDSCorruptError) as err:
        load_all(str(root), tmp_path / "cache")
    assert_one_line(err.value, "shard 0", "'index.json' also names the index itself")


def test_an_index_version_streaming_cannot_read_is_refused(tmp_path) -> None:
    from dataforge.io.mds import MDSFormatError

    root = write_dataset(tmp_path / "mds")
    edit_index(root, lambda ix: ix.update(version=3))
    with pytest.raises(MDSFormatError) as err:
        load_all(str(root), tmp_path / "cache")
    assert_one_line(err.value, "index.json: MDS index version 3; valid: 2")


def test_pkl_column_is_refused_before_streaming_sees_it(tmp_path) -> None:
    root = write_dataset(tmp_path / "mds")
    edit_index(root, lambda ix: ix["shards"][0]["column_encodings"].__setitem__(0, "pkl"))
    with pytest.raises(MDSCorruptError) as err:
        load_all(str(root), tmp_path / "cache")
    assert_one_line(err.value, "shard 0: refusing a pkl column")


def test_dead_run_cleanup_never_follows_a_symlink_out_of_the_cache(tmp_path) -> None:
    """A dead run's directory is removed; a symlink planted in the cache that looks like one
    (its target holds an owner.json of a dead pid) is not followed."""
    import socket

    from dataforge.loader.source import cleanup_dead_runs

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()  # fmt: skip
    owner = json.dumps({"pid": int(dead), "host": socket.gethostname(), "shm_prefix": None})
    cache, victim = tmp_path / "cache", tmp_path / "project"
    for run in (cache / "dead-run", victim):
        run.mkdir(parents=True)
        (run / "owner.json").write_text(owner)
    (victim / "work.txt").write_text("keep")
    (cache / "planted").symlink_to(victim)
    assert cleanup_dead_runs(cache) == 1
    assert sorted(p.name for p in cache.iterdir()) == ["planted"]
    assert (victim / "work.txt").read_text() == "keep"


# -- case 4: shard bytes are checked ---------------------------------------------------------


@pytest.mark.parametrize("workers", [0, 2])
def test_token_id_past_the_vocabulary_names_shard_and_sample(tmp_path, workers) -> None:
    root = write_dataset(tmp_path / "mds", bad=(7, 5000))
    index = json.loads((root / "index.json").read_text())
    counts = np.cumsum([s["samples"] for s in index["shards"]])
    shard = int(np.searchsorted(counts, 7, side="right"))
    sample = 7 - (int(counts[shard - 1]) if shard else 0)
    assert len(load_all(str(root), tmp_path / "c1")) == 40  # unchecked without a vocabulary
    with pytest.raises(MDSCorruptError) as err:
        load_all(str(root), tmp_path / "c2", vocab_size=1000, num_workers=workers)
    name = index["shards"][shard]["raw_data"]["basename"]
    assert_one_line(err.value, f"shard {name!r} sample {sample}: tokens holds token id 5000",
                    "vocabulary of 1000 ids")  # fmt: skip
    assert load_all(str(root), tmp_path / "c3", vocab_size=5001) != []


def _cut_in_half(root: Path, fix_index: bool) -> str:
    shard = json.loads((root / "index.json").read_text())["shards"][1]
    name = shard["zip_data"]["basename"]
    data = (root / name).read_bytes()
    (root / name).write_bytes(data[: len(data) // 2])
    if fix_index:
        edit_index(root, lambda ix: ix["shards"][1]["zip_data"].update(bytes=len(data) // 2))
    return name


@pytest.mark.parametrize("fix_index", [False, True])
def test_zstd_shard_cut_in_half_names_the_shard(tmp_path, fix_index) -> None:
    root = write_dataset(tmp_path / "mds")
    name = _cut_in_half(root, fix_index)
    for verify in (True, False):
        with pytest.raises(MDSCorruptError) as err:
            load_all(str(root), tmp_path / "cache", verify_hashes=verify)
        expected = "xxh64 differs" if fix_index and verify else "zstd" if fix_index else "bytes"
        assert_one_line(err.value, f"shard {name!r}", expected)


def test_wrong_sample_count_names_the_shard(tmp_path) -> None:
    root = write_dataset(tmp_path / "mds")
    edit_index(root, lambda ix: ix["shards"][2].update(samples=ix["shards"][2]["samples"] + 1))
    with pytest.raises(MDSCorruptError) as err:
        load_all(str(root), tmp_path / "cache")
    assert_one_line(err.value, "shard 'shard.00002.mds'", "header says")


def test_sample_sizes_that_disagree_with_their_bytes_name_the_shard(tmp_path) -> None:
    root = write_dataset(tmp_path / "mds", compression=None)
    raw = bytearray((root / "shard.00001.mds").read_bytes())
    begin = int(np.frombuffer(bytes(raw[8:12]), np.uint32)[0])  # sample 1 of shard 1
    raw[begin : begin + 4] = np.uint32(1 << 30).tobytes()  # its first column's size
    (root / "shard.00001.mds").write_bytes(bytes(raw))
    with pytest.raises(MDSCorruptError) as err:
        load_all(str(root), tmp_path / "cache", verify_hashes=False)
    assert_one_line(err.value, "shard 'shard.00001.mds'", "sample 1: columns sum to")


def test_hashes_are_checked_unless_turned_off(tmp_path) -> None:
    root = write_dataset(tmp_path / "mds", compression=None)
    raw = bytearray((root / "shard.00000.mds").read_bytes())
    at = raw.index(b"doc 0")
    raw[at : at + 5] = b"DOC 0"  # same layout, other bytes
    (root / "shard.00000.mds").write_bytes(bytes(raw))
    with pytest.raises(MDSCorruptError) as err:
        load_all(str(root), tmp_path / "cache")
    assert_one_line(err.value, "shard 'shard.00000.mds': xxh64 differs from the index's")
    assert sorted(load_all(str(root), tmp_path / "cache", verify_hashes=False)) == sorted(
        _first_tokens(root)
    )


SHRINK = """
import os, sys
from dataforge.io.mds import MDSCorruptError
from dataforge.loader import LoaderConfig, build_dataloader
root, cache = sys.argv[1:]
config = LoaderConfig(streams=[{"path": root}], max_tokens=64, max_seq_len=32, cache_dir=cache)
loader = build_dataloader(config)
batches = iter(loader)
next(batches)
shard = os.path.join(root, "shard.00000.mds")
os.truncate(shard, os.path.getsize(shard) // 3)
try:
    n = sum(1 for _ in batches)
except MDSCorruptError as exc:
    sys.exit(f"error: {exc}")
finally:
    loader.close()
print(f"served {n} more batches")
"""


def test_shard_truncated_while_open_is_one_line_not_sigbus(tmp_path) -> None:
    """One uncompressed shard read in place; cut to a third after the first batch."""
    writer = MDSShardWriter(tmp_path / "mds", COLUMNS, compression=None, hashes=[],
                            size_limit=None)  # fmt: skip
    for i in range(2000):
        tokens = np.full(16, 1 + i % 800, np.uint16)
        writer.write({"id": f"s/{i}", "text": "x" * 64, "source": "s", "lang": "en", "meta": {},
                      "tokens": tokens, "num_tokens": 16})  # fmt: skip
    writer.finish()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", SHRINK, str(tmp_path / "mds"),
                           str(tmp_path / "cache")], capture_output=True, text=True, env=env,
                          timeout=300)  # fmt: skip
    err = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(err) == 1, (done.returncode, done.stderr[-2000:])
    assert "shard 'shard.00000.mds' shrank while open" in err[0], err


# -- the trainer: exit non-zero, one line, nothing outside -----------------------------------


def _train_config(tmp_path: Path, stream: Path) -> Path:
    config = tmp_path / "pretrain.yaml"
    config.write_text(f"""
model: {{preset: tiny, vocab_size: 1000, max_seq_len: 32}}
train: {{max_steps: 3, precision: fp32, device: cpu, tensorboard: false}}
optim: {{warmup_steps: 1}}
data:
  source: loader
  loader: {{streams: [{{path: '{stream}'}}], max_tokens: 256, max_seq_len: 32,
            cache_dir: '{tmp_path / "cache"}'}}
checkpoint: {{dir: '{tmp_path / "ck"}'}}
run_dir: '{tmp_path / "run"}'
""")
    return config


def _train(config: Path, capsys) -> tuple[int, list[str]]:
    from dataforge.cli import main

    code = main(["train", "pretrain", str(config)])
    return code, capsys.readouterr().err.strip().splitlines()


def test_train_on_a_pth_planting_dataset_exits_2_and_plants_nothing(tmp_path, capsys) -> None:
    config = _train_config(tmp_path, _hostile(tmp_path, "raw_data", "traversal"))
    before = outside(tmp_path, tmp_path / "cache")
    code, err = _train(config, capsys)
    assert code == 2 and len(err) == 1 and err[0].startswith("error: data.loader:"), err
    assert "escapes the dataset directory" in err[0]
    assert not (tmp_path / SITE / "evil.pth").exists()
    assert outside(tmp_path, tmp_path / "cache") == before


def test_train_on_a_zstd_shard_cut_in_half_is_one_line_naming_it(tmp_path, capsys) -> None:
    root = write_dataset(tmp_path / "mds")
    name = _cut_in_half(root, fix_index=False)
    code, err = _train(_train_config(tmp_path, root), capsys)
    assert code == 2 and len(err) == 1 and f"shard {name!r} has" in err[0], err


def test_train_on_token_ids_past_the_model_is_one_line_naming_the_sample(tmp_path, capsys):
    config = _train_config(tmp_path, write_dataset(tmp_path / "mds", bad=(0, 4000)))
    code, err = _train(config, capsys)
    assert code == 2 and len(err) == 1, err
    assert "shard 'shard.00000.mds' sample 0: tokens holds token id 4000" in err[0], err
    assert "vocabulary of 1000 ids" in err[0]


def test_eval_streams_with_token_ids_past_the_model_are_one_line(tmp_path, capsys) -> None:
    """The held-out loader checks ids against the model too (a bad eval set)."""
    good = write_dataset(tmp_path / "mds")
    bad = write_dataset(tmp_path / "heldout", bad=(3, 4000))
    config = _train_config(tmp_path, good)
    config.write_text(config.read_text() + f"eval: {{streams: [{{path: '{bad}'}}], interval: 1}}\n")
    code, err = _train(config, capsys)
    assert code == 2 and len(err) == 1, err
    assert "tokens holds token id 4000" in err[0] and "vocabulary of 1000 ids" in err[0], err


@pytest.mark.parametrize("manifest", ['{"config": []}', '{"config": {"stages": ["tokenize"]}}',
                                      '{"config": {"stages": [{"op": "tokenize", "tokenizer": 7}]}}',
                                      "[1]"])  # fmt: skip
def test_a_malformed_manifest_beside_the_shards_is_not_a_traceback(tmp_path, manifest) -> None:
    """The trainer reads the run's manifest to compare its tokenizer with the model."""
    from trainer.data.sources import check_data_vocab

    root = write_dataset(tmp_path / "run" / "mds")
    (tmp_path / "run" / "manifest.json").write_text(manifest)
    assert check_data_vocab(str(root), 1000) is None


# -- remote streams ------------------------------------------------------------------------


def _storage_fixtures():
    spec = importlib.util.spec_from_file_location(
        "storage_s3_fixtures", REPO / "tests" / "storage" / "conftest.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module.s3_server, module.s3, module.bucket


s3_server, s3, bucket = _storage_fixtures()


@pytest.mark.parametrize("kind", ["intact", "traversal", "absolute"])
def test_remote_stream_is_checked_before_any_shard_is_fetched(tmp_path, s3, bucket, kind):
    root = write_dataset(tmp_path / "mds")
    (tmp_path / SITE).mkdir(parents=True)
    target = tmp_path / SITE / "evil.pth"
    if kind != "intact":
        name = f"../../../{SITE}/evil.pth" if kind == "traversal" else str(target)
        edit_index(root, lambda ix: ix["shards"][0]["raw_data"].update(basename=name))
    s3.upload_tree(root, bucket, "mds")
    cache = tmp_path / "cache"
    before = outside(tmp_path, cache)
    if kind == "intact":
        assert sorted(load_all(f"s3://{bucket}/mds", cache)) == sorted(_first_tokens(root))
        return
    with pytest.raises(MDSCorruptError) as err:
        load_all(f"s3://{bucket}/mds", cache)
    assert_one_line(err.value, f"s3://{bucket}/mds/index.json: shard 0", "escapes")
    assert not target.exists() and outside(tmp_path, cache) == before


def test_remote_inspect_fetches_only_what_the_checked_index_names(
    tmp_path, s3, bucket, capsys, monkeypatch
) -> None:
    """Only the files the checked index names are fetched: a stray key holding ``..``
    made the copy of the whole prefix fail (and named a path outside the scratch folder)."""
    import tempfile

    from dataforge.cli import main

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    root = write_dataset(tmp_path / "mds")
    s3.upload_tree(root, bucket, "run/mds")
    s3.client().put_object(Bucket=bucket, Key="run/mds/../../../../planted.pth", Body=PAYLOAD)
    s3.client().put_object(Bucket=bucket, Key="run/manifest.json", Body=b"{}")
    before = snapshot(tmp_path)
    assert main(["inspect", f"s3://{bucket}/run", "--verify"]) == 0
    assert "samples 40" in capsys.readouterr().out
    assert snapshot(tmp_path) == before
