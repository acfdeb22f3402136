"""The whole pipeline in-process (no Ray): accounting, outputs, resume, refusal rules."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dataforge.config import load_pipeline
from dataforge.inspect import verify_dataset
from dataforge.io.mds import iter_samples
from dataforge.runtime.executors.local import LocalExecutor
from dataforge.runtime.manifest import AccountingError, RunDirError
from dataforge.runtime.pipeline import run_pipeline


def run(pipeline: Path, out: Path, overrides: list[str] | None = None, **kw) -> dict:
    return run_pipeline(
        load_pipeline(pipeline, overrides), out, LocalExecutor(), log=lambda m: None, **kw
    )


def test_counts_add_up_and_output_is_readable(pipeline_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    manifest = run(pipeline_file, out)
    counts = manifest["counts"]
    assert counts["by_source"]["news_zh"] == {
        "input": 16,
        "kept": 15,
        "repeated": 0,
        "dropped": {"error:json": 1},
        "events": {},
    }
    assert counts["by_source"]["docs_en"]["input"] == 6
    assert counts["total"]["kept"] == 21 and manifest["status"] == "complete"
    samples = list(iter_samples(out))
    assert len(samples) == 21 == manifest["output"]["records"]
    assert samples[0]["id"] == "news_zh/part-0.jsonl:1"
    assert samples[-1]["id"] == "docs_en/d1-2" and samples[-1]["meta"] == {"title": "t2"}
    assert verify_dataset(out) == []
    assert not (out / "_work").exists()
    assert len(manifest["config_sha256"]) == 64 and manifest["inputs"][0]["bytes"] > 0

    from streaming import StreamingDataset

    ds = StreamingDataset(local=str(out / "mds"), shuffle=False, batch_size=1)
    assert [ds[i]["id"] for i in range(len(ds))] == [s["id"] for s in samples]


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_parquet_and_jsonl_sinks(pipeline_file: Path, tmp_path: Path, fmt: str) -> None:
    out = tmp_path / fmt
    manifest = run(pipeline_file, out, [f"output.format={fmt}", "output.rejects=true"])
    assert manifest["output"]["records"] == 21
    files = sorted((out / fmt).glob(f"*/data.{fmt}"))
    assert len(files) == 5
    rejects = list((out / "rejects").glob("*.parquet"))
    import pyarrow.parquet as pq

    rows = [r for f in rejects for r in pq.read_table(f).to_pylist()]
    assert [(r["id"], r["drop"]) for r in rows] == [("news_zh/part-1.jsonl:6", "error:json")]


def test_rerun_is_noop_other_config_refused_overwrite_replaces(
    pipeline_file: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    first = run(pipeline_file, out)
    assert run(pipeline_file, out)["timings"] == first["timings"]  # complete: nothing redone
    with pytest.raises(RunDirError, match="different config"):
        run(pipeline_file, out, ["seed=99"])
    assert run(pipeline_file, out, ["seed=99"], overwrite=True)["config"]["seed"] == 99
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "precious.txt").write_text("x")
    with pytest.raises(RunDirError, match="not a dataforge run directory"):
        run(pipeline_file, foreign, overwrite=True)
    assert (foreign / "precious.txt").exists()


class _CrashAfter(LocalExecutor):
    def __init__(self, n: int) -> None:
        self.n = n

    def run_segment(self, config, segment, work_dir, tasks, log) -> None:
        super().run_segment(config, segment, work_dir, tasks[: self.n], log)
        raise KeyboardInterrupt("simulated kill")


def test_resume_after_crash_gives_identical_output(pipeline_file: Path, tmp_path: Path) -> None:
    reference = tmp_path / "ref"
    run(pipeline_file, reference)
    out = tmp_path / "crashed"
    with pytest.raises(KeyboardInterrupt):
        run_pipeline(load_pipeline(pipeline_file), out, _CrashAfter(2), log=lambda m: None)
    assert not (out / "manifest.json").exists() and not (out / "mds" / "index.json").exists()
    assert len(list((out / "_work" / "seg0").glob("*.done"))) == 2
    resumed = run(pipeline_file, out)
    assert list(iter_samples(out)) == list(iter_samples(reference))
    assert resumed["counts"] == json.loads((reference / "manifest.json").read_text())["counts"]


def test_error_rate_fails_run_without_complete_looking_output(
    pipeline_file: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    with pytest.raises(AccountingError, match="above max_error_rate 0.01"):
        run(pipeline_file, out, ["max_error_rate=0.01"])
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "failed" and "error:json" in manifest["error"]
    assert not (out / "mds" / "index.json").exists()


def test_duplicate_ids_across_files_fail_the_run(tmp_path: Path, write_pipeline) -> None:
    for f in range(2):
        (tmp_path / f"d{f}.jsonl").write_text(
            json.dumps({"id": "same", "text": f"text {f}"}) + "\n"
        )
    path = write_pipeline(
        tmp_path,
        """
        name: dup
        inputs: [{name: s, path: "d*.jsonl", id_key: id}]
        output: {path: out}
    """,
    )
    with pytest.raises(AccountingError, match="share an id"):
        run(path, tmp_path / "out")


def test_inspect_verify_catches_corruption_and_unsafe_index(
    pipeline_file: Path, tmp_path: Path
) -> None:
    from dataforge.inspect import InspectError, inspect_path

    out = tmp_path / "out"
    run(pipeline_file, out)
    shard = sorted((out / "mds").glob("*/shard.*.mds.zstd"))[0]
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    problems = verify_dataset(out)
    assert problems and "xxh64 mismatch" in problems[0]
    assert inspect_path(out, verify=True, as_json=True) == 1
    index = json.loads((out / "mds" / "index.json").read_text())
    index["shards"][0]["zip_data"]["basename"] = "../../etc/passwd"
    (out / "mds" / "index.json").write_text(json.dumps(index))
    with pytest.raises(InspectError, match="escapes the dataset directory"):
        inspect_path(out)
    index["shards"][0]["zip_data"]["basename"] = "x"
    index["shards"][0]["column_encodings"][0] = "pkl"
    (out / "mds" / "index.json").write_text(json.dumps(index))
    with pytest.raises(InspectError, match="pkl"):
        inspect_path(out)


def test_stage_cpu_seconds_are_cpu_time_with_wall_time_apart(
    tmp_path: Path, small_corpus: Path, write_pipeline, monkeypatch
) -> None:
    import time

    from dataforge.ops.clean import Clean

    calls = []
    original = Clean.__call__

    def sleeping_clean(self, batch):
        calls.append(batch.num_rows)
        time.sleep(0.05)  # wall time that costs no CPU
        return original(self, batch)

    monkeypatch.setattr(Clean, "__call__", sleeping_clean)
    pipeline = write_pipeline(
        tmp_path,
        """
        name: timed
        inputs:
          - {name: news_zh, path: "corpus/zh/*.jsonl", lang: zh}
        stages:
          - {op: clean}
        max_error_rate: 0.2
        output: {path: out, format: jsonl}
        """,
    )
    manifest = run(pipeline, tmp_path / "out")
    (stage,) = manifest["stages"]
    assert stage["op"] == "clean" and calls
    assert stage["seconds"] >= 0.05 * len(calls)
    assert 0 <= stage["cpu_seconds"] <= stage["seconds"] - 0.05 * len(calls) + 0.01
