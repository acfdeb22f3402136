"""Every value a run would reject is rejected by ``validate``: exit 2, one line naming the
key and the valid range, no Ray (case 8)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from chaos_kit import write_lines

from dataforge.cli import main

BAD_VALUES = {
    "output.compression=lz77": "output.compression='lz77'; valid for mds: br[:0-11]",
    "output.compression=zstd:99": "output.compression='zstd:99'",
    "output.format=parquet": None,  # valid: the default zstd is a parquet codec too
    "output.hashes=[md6]": "output.hashes ['md6'] unknown; valid: md5",
    "output.size_limit=-1": "output.size_limit=-1; valid range: 1024 to",
    "read.batch_rows=100000000000000000000": "read.batch_rows=100000000000000000000; valid range",
    "read.max_doc_chars=0": "read.max_doc_chars=0; valid range: 1 to",
    "ray.num_cpus=0": "ray.num_cpus=0; valid range: >= 1",
    "ray.actors=-2": "ray.actors=-2; valid range: >= 1",
    "ray.cpus_per_actor=0": "ray.cpus_per_actor=0.0; valid range: >0",
    "ray.object_store_memory=1": "ray.object_store_memory=1; valid range",
    "ray.max_task_retries=-1": "ray.max_task_retries=-1; valid range: 0 to 100",
    "executor=sometimes": "executor: 'sometimes' is not valid; valid: 'ray', 'local'",
    "max_error_rate=1.5": "max_error_rate must be in [0, 1]",
    "stages=[{op: quality_filter, languages: {zh: {min_cjk_fraction: 2.5}}}]": (
        "quality_filter.languages.zh: min_cjk_fraction=2.5; valid range: 0 to 1"
    ),
    "stages=[{op: quality_filter, default: {max_top_ngram_chars_fraction: {2: 3}}}]": (
        "fractions must be in 0 to 1"
    ),
}


@pytest.fixture
def pipeline(tmp_path: Path, write_pipeline) -> Path:
    write_lines(tmp_path / "in" / "a.jsonl", ["一篇文档"])
    return write_pipeline(
        tmp_path,
        """
        name: v
        inputs: [{name: s, path: "in/*.jsonl", lang: zh}]
        output: {path: out}
        """,
    )


@pytest.mark.parametrize("override", sorted(BAD_VALUES))
def test_validate_rejects_what_a_run_would(pipeline: Path, override: str, capsys) -> None:
    code = main(["validate", str(pipeline), "--set", override])
    err = capsys.readouterr().err.strip().splitlines()
    expected = BAD_VALUES[override]
    if expected is None:
        assert code == 0 and err == []
        return
    assert code == 2 and len(err) == 1 and expected in err[0], err
    assert "ray" not in sys.modules or not sys.modules["ray"].is_initialized()


@pytest.mark.parametrize(
    ("output", "message"),
    [("in", "holds input file"), (".", "holds input file"), ("in/sub/out", "lies inside")],
)
def test_output_overlapping_an_input_is_refused_before_ray(
    pipeline: Path, tmp_path: Path, output: str, message: str, capsys
) -> None:
    for command in ("validate", "run"):
        code = main([command, str(pipeline), "-o", str(tmp_path / output),
                     "--set", "inputs.0.path=in/**/*.jsonl"])  # fmt: skip
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1 and message in err[0], (command, err)
    assert not (tmp_path / "in" / "sub").exists()
    assert "ray" not in sys.modules or not sys.modules["ray"].is_initialized()


@pytest.mark.parametrize(
    ("pattern", "link", "target", "refused"),
    [
        ("in/**/*.jsonl", "in/sub/up", "elsewhere", True),  # a link above OUT
        ("in/**/*.jsonl", "in/sub/out", "elsewhere/out", True),  # a link to OUT itself
        ("in/**/*.jsonl", "in/later", "elsewhere/out/mds", True),  # dangling: once written
        ("in/*/*.jsonl", "in/out", "elsewhere/out", True),
        ("in/*/*.jsonl", "in/up", "elsewhere", False),  # OUT is two levels below the link
        ("in/*.jsonl", "in/out", "elsewhere/out", False),  # the glob never enters a folder
        ("in/**/*.jsonl", "in/.cache", "elsewhere/out", False),  # ** skips hidden names
    ],
)
def test_output_reached_through_a_symlink_in_an_input_glob_is_refused(
    pipeline: Path, tmp_path: Path, pattern: str, link: str, target: str, refused: bool, capsys
) -> None:
    write_lines(tmp_path / "in" / "sub" / "b.jsonl", ["第二篇"])
    out = tmp_path / "elsewhere" / "out"
    out.mkdir(parents=True)
    (tmp_path / link).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / link).symlink_to(tmp_path / target)
    for command in ("validate", "run") if refused else ("validate",):
        code = main([command, str(pipeline), "-o", str(out), "--set", f"inputs.0.path={pattern}"])
        err = capsys.readouterr().err.strip().splitlines()
        if not refused:
            assert code == 0 and err == [], err
            continue
        via = tmp_path / link
        assert code == 2 and err == [
            f"error: output {out} is read by source 's' ({pattern!r}) through {via}: a run "
            "could read its own output; choose an -o outside it"
        ], (command, err)
    assert list(out.iterdir()) == []
