"""``ray.memory_per_worker``: sizes it reads and refuses, the defaults a run derives, and the
barrier's spill directory, gone after a run that succeeds and after one that fails."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dataforge.cli import main
from dataforge.config import RayConfig, load_pipeline
from dataforge.ops.dedup import planner as dedup
from dataforge.runtime import memory_budget
from dataforge.runtime.executors.local import LocalExecutor
from dataforge.runtime.failures import RunFailed
from dataforge.runtime.memory_budget import local_memory_budget, ray_memory_budget
from dataforge.runtime.pipeline import run_pipeline
from dataforge.typed_config import ConfigError, parse_size

FORMAT = "valid: a number of bytes or a number and a unit, like 512MB, 1.5GB or 2GiB"


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("1.5GB", 1_500_000_000),
        ("512MB", 512_000_000),
        ("2GiB", 2 * 2**30),
        ("1mib", 2**20),
        (" 64 KB ", 64_000),
        (".5TB", 500_000_000_000),
        ("3145728", 3_145_728),
        ("7B", 7),
    ],
)
def test_sizes_it_reads(text, size):
    assert parse_size("k", text) == size


def test_whole_numbers_are_bytes():
    assert parse_size("k", 3_000_000) == 3_000_000
    assert parse_size("k", 1e9) == 1_000_000_000
    assert RayConfig(memory_per_worker=1e9).memory_per_worker == 1_000_000_000
    assert RayConfig(memory_per_worker="2GiB").memory_per_worker == 2 * 2**30
    assert RayConfig().memory_per_worker is None


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("lots", f"ray.memory_per_worker='lots' is not a size; {FORMAT}"),
        ("-1GB", f"ray.memory_per_worker='-1GB' is not a size; {FORMAT}"),
        ("1.5.GB", f"ray.memory_per_worker='1.5.GB' is not a size; {FORMAT}"),
        ("2 PB", f"ray.memory_per_worker='2 PB' is not a size; {FORMAT}"),
        (1.5, f"ray.memory_per_worker=1.5 is not a size; {FORMAT}"),
        (
            "0.5MB",
            "ray.memory_per_worker='0.5MB' is 500000 bytes; valid: at least 1MiB (1048576 bytes)",
        ),
        (0, "ray.memory_per_worker=0 is 0 bytes; valid: at least 1MiB (1048576 bytes)"),
    ],
)
def test_sizes_it_refuses_name_the_key_and_the_format(value, message):
    with pytest.raises(ValueError) as info:
        RayConfig(memory_per_worker=value)
    assert str(info.value) == message


def _pipeline(tmp_path: Path, stages: str = "[]") -> Path:
    (tmp_path / "in").mkdir(exist_ok=True)
    texts = [f"record {i} " + "word " * (i % 7) for i in range(300)] * 2  # each one twice
    with open(tmp_path / "in" / "a.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps({"text": t}) + "\n" for t in texts)
    path = tmp_path / "p.yaml"
    path.write_text(
        f"name: p\ninputs: [{{name: a, path: in/*.jsonl, lang: en}}]\n"
        f"stages: {stages}\noutput: {{path: out, keep_work: true}}\n",
        encoding="utf-8",
    )
    return path


def test_a_bad_size_exits_2_naming_the_file_and_key(tmp_path, capsys):
    path = _pipeline(tmp_path)
    assert main(["validate", str(path), "--set", "ray.memory_per_worker=lots"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: {path}.ray: ray.memory_per_worker='lots' is not a size; {FORMAT}"
    )
    with pytest.raises(ConfigError, match=r"memory_per_worker: \[1\] matches none of"):
        load_pipeline(path, ["ray.memory_per_worker=[1]"])


def test_defaults_divide_the_machine_or_the_cluster(tmp_path, monkeypatch):
    monkeypatch.setattr(memory_budget, "machine_memory", lambda: 16_000_000_000)
    config = load_pipeline(_pipeline(tmp_path))
    local = local_memory_budget(config, 4)
    assert local.bytes == 2_000_000_000
    assert local.why == (
        "memory per worker: 2.0 GB (default: half this machine's 16.0 GB over 4 worker "
        "processes; set ray.memory_per_worker to change it)"
    )
    assert local_memory_budget(config, 0).bytes == 8_000_000_000  # in-process: one worker
    on_ray = ray_memory_budget(config, 12e9, 8)
    assert on_ray.bytes == 1_500_000_000
    assert on_ray.why == (
        "memory per worker: 1.5 GB (default: the Ray cluster's memory resource 12.0 GB over "
        "8 actors; set ray.memory_per_worker to change it)"
    )
    set_ = load_pipeline(_pipeline(tmp_path), ["ray.memory_per_worker=512MiB"])
    for budget in (local_memory_budget(set_, 4), ray_memory_budget(set_, 12e9, 8)):
        assert budget.bytes == 512 * 2**20
        assert budget.why == "memory per worker: 536.9 MB (ray.memory_per_worker)"
    assert LocalExecutor(3).memory_budget(set_).bytes == 512 * 2**20
    assert ray_memory_budget(config, 0, 8).bytes == 2**20  # no memory resource: the minimum


def _spill_dirs(out: Path) -> list[str]:
    return sorted(p.name for p in (out / "_work").iterdir() if ".spill" in p.name)


def test_the_spill_dir_is_removed_after_success_and_after_failure(tmp_path, monkeypatch):
    path = _pipeline(tmp_path, "[{op: dedup, method: exact}]")
    config = load_pipeline(path, ["ray.memory_per_worker=1MiB"])
    seen = []
    write_outputs = dedup._write_outputs

    def noting(op, ctx, *args):
        seen.append((ctx.spill_dir, ctx.memory_bytes, ctx.spill_dir.is_dir()))
        return write_outputs(op, ctx, *args)

    monkeypatch.setattr(dedup, "_write_outputs", noting)
    out = tmp_path / "ok"
    manifest = run_pipeline(config, out, LocalExecutor(), log=lambda m: None)
    assert manifest["counts"]["total"]["kept"] == 300
    ((spill, memory, existed),) = seen
    assert memory == 2**20 and existed
    assert spill.parent == out / "_work" and spill.name.startswith(".barrier0.spill.tmp-")
    assert not spill.exists() and _spill_dirs(out) == []

    def failing(op, ctx, *args):
        seen.append((ctx.spill_dir, ctx.memory_bytes, ctx.spill_dir.is_dir()))
        raise OSError("disk full")

    monkeypatch.setattr(dedup, "_write_outputs", failing)
    out = tmp_path / "failed"
    with pytest.raises(RunFailed, match="OSError: disk full"):
        run_pipeline(config, out, LocalExecutor(), log=lambda m: None)
    spill, _, existed = seen[-1]
    assert existed and not spill.exists() and _spill_dirs(out) == []

    # A planner killed mid-spill leaves its spill dir behind (no finally ran): the next
    # attempt removes it before it plans, not only when the run completes.
    killed = out / "_work" / ".barrier0.spill.tmp-dead0001"
    killed.mkdir()
    (killed / "run-000000.arrow").write_bytes(b"x" * 1000)
    left_while_planning = []

    def checking(op, ctx, *args):
        left_while_planning.append(killed.exists())
        return write_outputs(op, ctx, *args)

    monkeypatch.setattr(dedup, "_write_outputs", checking)
    run_pipeline(config, out, LocalExecutor(), log=lambda m: None)
    assert left_while_planning == [False] and _spill_dirs(out) == []
