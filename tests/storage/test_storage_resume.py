"""The commit protocol on object storage: a run killed mid-way leaves nothing that looks
complete, and the rerun skips the committed parts and ends identical to a clean run."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from dataforge.config import load_pipeline
from dataforge.io.node_cache import fetch_to_cache
from dataforge.runtime.executors.local import LocalExecutor
from dataforge.runtime.pipeline import run_pipeline
from dataforge.runtime.segments import SegmentRunner


class _Killed(Exception):
    """Stands for a kill of the run in the middle of a segment."""


class _DiesAfter(LocalExecutor):
    """Runs tasks in process; "dies" (raises) before the ``limit``-th task of a segment."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.ran: list[tuple[int, str]] = []

    def run_segment(self, config, segment, work_dir, tasks, log) -> None:
        runner = SegmentRunner(config, segment, str(work_dir))
        for i, task in enumerate(tasks):
            if segment.index == 1 and i == self.limit:
                raise _Killed()
            runner.run_task(task)
            self.ran.append((segment.index, task["task_id"]))


def _pipeline(tmp_path: Path, corpus: str) -> Path:
    path = tmp_path / f"p{len(list(tmp_path.glob('p*.yaml')))}.yaml"
    path.write_text(
        textwrap.dedent(
            f"""\
            name: resume
            seed: 3
            max_error_rate: 0.2
            inputs:
              - {{name: news_zh, path: "{corpus}/zh/*.jsonl", lang: zh}}
              - {{name: docs_en, path: "{corpus}/en/*.jsonl", lang: en, id_key: doc_id}}
            stages:
              - {{op: clean}}
              - {{op: dedup, method: exact}}
            output: {{path: out, format: mds, size_limit: 4096}}
            """
        )
    )
    return path


def test_killed_s3_run_resumes_to_the_clean_output(s3, bucket, small_corpus, tmp_path) -> None:
    s3.upload_tree(small_corpus, bucket, "corpus")
    pipeline = load_pipeline(_pipeline(tmp_path, f"s3://{bucket}/corpus"))
    out = f"s3://{bucket}/run"
    dying = _DiesAfter(limit=2)
    with pytest.raises(Exception, match="_Killed"):
        run_pipeline(pipeline, out, dying, log=lambda m: None)
    keys = s3.keys(bucket, "run/")
    assert "run/manifest.json" not in keys and not any(k.startswith("run/mds/") for k in keys)
    assert "run/_lease.json" not in keys  # released on the way out
    committed = {t for seg, t in dying.ran if seg == 1}
    assert len(committed) == 2

    again = _DiesAfter(limit=10**6)
    manifest = run_pipeline(pipeline, out, again, log=lambda m: None)
    assert not committed & {t for seg, t in again.ran if seg == 1}  # committed parts skipped
    assert {seg for seg, _ in again.ran} == {1}  # segment 0 was complete
    clean = run_pipeline(pipeline, f"s3://{bucket}/clean", LocalExecutor(), log=lambda m: None)
    assert manifest["counts"] == clean["counts"]
    for key in s3.keys(bucket, "clean/mds/"):
        body = s3.client().get_object(Bucket=bucket, Key=key)["Body"].read()
        resumed = s3.client().get_object(Bucket=bucket, Key="run/" + key[len("clean/") :])
        assert resumed["Body"].read() == body, key
    assert sorted(k[len("run/") :] for k in s3.keys(bucket, "run/mds/")) == sorted(
        k[len("clean/") :] for k in s3.keys(bucket, "clean/mds/")
    )


def test_models_from_uris_are_fetched_once_per_node(s3, bucket, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("DATAFORGE_CACHE_DIR", str(tmp_path / "cache"))
    client = s3.client()
    client.put_object(Bucket=bucket, Key="models/zh.bin", Body=b"model-bytes")
    client.put_object(Bucket=bucket, Key="models/zh.bin.json", Body=b"{}")
    client.put_object(Bucket=bucket, Key="tok/spm.model", Body=b"spm")
    client.put_object(Bucket=bucket, Key="tok/sub/x.json", Body=b"x")
    model = fetch_to_cache(f"s3://{bucket}/models/zh.bin", companions=(".json",))
    assert model.name == "zh.bin" and model.read_bytes() == b"model-bytes"
    assert (model.parent / "zh.bin.json").read_bytes() == b"{}"  # the card beside it
    assert fetch_to_cache(f"s3://{bucket}/models/zh.bin", companions=(".json",)) == model
    tok = fetch_to_cache(f"s3://{bucket}/tok")
    assert sorted(p.relative_to(tok).as_posix() for p in tok.rglob("*") if p.is_file()) == [
        "spm.model",
        "sub/x.json",
    ]
    before = (tok / "spm.model").stat().st_mtime_ns
    assert fetch_to_cache(f"s3://{bucket}/tok") == tok  # cached: not fetched again
    assert (tok / "spm.model").stat().st_mtime_ns == before
    client.put_object(Bucket=bucket, Key="tok/spm.model", Body=b"spm-v2")  # changed upstream
    fresh = fetch_to_cache(f"s3://{bucket}/tok")
    assert fresh != tok and (fresh / "spm.model").read_bytes() == b"spm-v2"
    leftovers = [p for p in (tmp_path / "cache" / "remote").iterdir() if p.name.startswith(".")]
    assert leftovers == []  # no half-downloaded entry left behind


def test_dedup_against_a_run_on_s3(s3, bucket, small_corpus, tmp_path) -> None:
    s3.upload_tree(small_corpus, bucket, "corpus")
    first = load_pipeline(_pipeline(tmp_path, f"s3://{bucket}/corpus"))
    done = run_pipeline(first, f"s3://{bucket}/first", LocalExecutor(), log=lambda m: None)
    assert "first/dedup/signatures.parquet" in s3.keys(bucket, "first/dedup/")
    # The same corpus again, deduplicated against the first run's published signatures:
    # every record the first run kept is now a duplicate of it.
    text = _pipeline(tmp_path, str(small_corpus)).read_text()
    against = tmp_path / "against.yaml"
    against.write_text(
        text.replace("method: exact}", f'method: exact, against: ["s3://{bucket}/first"]}}')
    )
    second = run_pipeline(
        load_pipeline(against), tmp_path / "second", LocalExecutor(), log=lambda m: None
    )
    assert second["counts"]["total"]["kept"] == 0
    assert second["counts"]["total"]["input"] == done["counts"]["total"]["input"]
    missing = tmp_path / "missing.yaml"
    missing.write_text(
        text.replace("method: exact}", f'method: exact, against: ["s3://{bucket}/nothing"]}}')
    )
    from dataforge.runtime.validate import validate_pipeline

    problems = validate_pipeline(load_pipeline(missing))
    assert problems == [
        f"stages[1] (dedup): dedup.against: s3://{bucket}/nothing/dedup/signatures.parquet "
        "not found"
    ]
