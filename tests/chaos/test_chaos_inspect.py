"""``dataforge inspect`` on hostile datasets: one line, exit 1 (corrupt) or 2 (not a
dataset), never a traceback, never a byte outside the dataset, bounded memory (case 7)."""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest
import zstandard

from dataforge.cli import main
from dataforge.io.mds import MDSCorruptError, MDSShardWriter, iter_samples

COLUMNS = {"id": "str", "text": "str", "source": "str", "lang": "str", "meta": "json"}


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    root = tmp_path / "mds"
    writer = MDSShardWriter(root, COLUMNS, compression="zstd", hashes=["xxh64"], size_limit=1024)
    for i in range(20):
        writer.write({"id": f"s/{i}", "text": f"文档 {i} " * 10, "source": "s", "lang": "zh",
                      "meta": {}})  # fmt: skip
    writer.finish()
    return root


def _inspect(capsys, *args: str) -> tuple[int, list[str]]:
    code = main(["inspect", *args])
    return code, capsys.readouterr().err.strip().splitlines()


def _edit_index(root: Path, edit: Callable[[dict], object]) -> None:
    index = json.loads((root / "index.json").read_text())
    result = edit(index)
    (root / "index.json").write_text(json.dumps(index if result is None else result))


def test_intact_dataset_passes(dataset: Path, capsys) -> None:
    assert main(["inspect", str(dataset), "--verify"]) == 0
    assert "samples 20" in capsys.readouterr().out


MALFORMED_INDEXES = {
    "a list": lambda ix: [ix],
    "shards as a string": lambda ix: {"shards": "shard.00000.mds"},
    "missing samples": lambda ix: ix["shards"][0].pop("samples"),
    "negative samples": lambda ix: ix["shards"][0].update(samples=-5),
    "absurd samples": lambda ix: ix["shards"][0].update(samples=10**12),
    "empty shard path": lambda ix: ix["shards"][0]["zip_data"].update(basename=""),
    "a directory as shard path": lambda ix: ix["shards"][0]["zip_data"].update(basename="."),
    "escaping path": lambda ix: ix["shards"][0]["zip_data"].update(basename="../../etc/passwd"),
    "pkl column": lambda ix: ix["shards"][0]["column_encodings"].__setitem__(0, "pkl"),
    "columns of unequal length": lambda ix: ix["shards"][0]["column_sizes"].pop(),
    "raw size a string": lambda ix: ix["shards"][0]["raw_data"].update(bytes="12"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED_INDEXES))
def test_malformed_index_is_one_line_exit_1(dataset: Path, capsys, case: str) -> None:
    _edit_index(dataset, MALFORMED_INDEXES[case])
    for args in ([], ["--verify"], ["--json"], ["--head", "2"]):
        code, err = _inspect(capsys, str(dataset), *args)
        # --verify lists what it found as CORRUPT lines; other modes stop at the first problem
        prefix = ("error: corrupt dataset:", "CORRUPT: shard 0:")
        assert code == 1 and len(err) == 1 and err[0].startswith(prefix), (case, args, err)


def test_non_utf8_index_and_bad_shard_header(dataset: Path, capsys) -> None:
    (dataset / "index.json").write_bytes(b'{"shards": [\xff\xfe]}')
    code, err = _inspect(capsys, str(dataset))
    assert code == 1 and len(err) == 1 and "UnicodeDecodeError" in err[0]


def test_shard_header_that_disagrees_is_corrupt(dataset: Path, capsys) -> None:
    shard = dataset / "shard.00000.mds.zstd"
    raw = bytearray(zstandard.ZstdDecompressor().decompress(shard.read_bytes()))
    raw[0:4] = (7).to_bytes(4, "little")  # the header claims 7 samples
    data = zstandard.ZstdCompressor().compress(bytes(raw))
    shard.write_bytes(data)

    def keep_sizes(ix: dict) -> None:
        ix["shards"][0]["zip_data"].update(bytes=len(data), hashes={})

    _edit_index(dataset, keep_sizes)
    code, err = _inspect(capsys, str(dataset))
    assert code == 1 and len(err) == 1 and "shard header says 7 samples" in err[0]


def test_symlinked_shard_is_never_followed_out(dataset: Path, tmp_path: Path, capsys) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("private")
    shard = dataset / "shard.00000.mds.zstd"
    shard.unlink()
    shard.symlink_to(secret)
    for args in ([], ["--verify"]):
        code, err = _inspect(capsys, str(dataset), *args)
        out = capsys.readouterr().out
        assert code == 1 and "private" not in out + "".join(err)
        assert any("resolves outside the dataset directory" in line for line in err)


def test_zstd_bomb_is_not_inflated(dataset: Path, capsys) -> None:
    # 64 MiB of zeros in a frame that declares its own size; the index says 2 KiB
    bomb = zstandard.ZstdCompressor(write_content_size=True).compress(bytes(64 << 20))
    (dataset / "shard.00000.mds.zstd").write_bytes(bomb)

    def point_at_bomb(ix: dict) -> None:
        ix["shards"][0]["zip_data"].update(bytes=len(bomb), hashes={})

    _edit_index(dataset, point_at_bomb)
    tracemalloc.start()
    with pytest.raises(MDSCorruptError, match="inflates to more bytes"):
        list(iter_samples(dataset))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 8 << 20, f"peak {peak} bytes while refusing a bomb"
    code, err = _inspect(capsys, str(dataset))
    assert code == 1 and len(err) == 1


def test_not_a_dataset_is_exit_2(tmp_path: Path, capsys) -> None:
    for path in (tmp_path, tmp_path / "absent"):
        code, err = _inspect(capsys, str(path))
        assert code == 2 and len(err) == 1 and "no index.json" in err[0]


def test_summary_checks_the_runs_manifest(dataset: Path, capsys) -> None:
    (dataset.parent / "manifest.json").write_text(json.dumps({"output": {"records": 21}}))
    code, err = _inspect(capsys, str(dataset.parent))
    assert code == 1 and len(err) == 1 and "holds 20 samples, the run's manifest says 21" in err[0]


@pytest.mark.parametrize("manifest", ["[1, 2]", '{"output": 5, "counts": []}', "{not json"])
def test_malformed_manifest_next_to_the_data(dataset: Path, capsys, manifest: str) -> None:
    (dataset.parent / "manifest.json").write_text(manifest)
    code, err = _inspect(capsys, str(dataset.parent), "--head", "1")
    assert (code, len(err)) == ((0, 0) if manifest.startswith('{"output"') else (1, 1)), err
