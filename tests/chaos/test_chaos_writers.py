"""Writers own only what they made (issue 31, cases 2 and 3 and the smaller ones): every
command that writes a path the user names (``train export -o``, ``report -o``,
``tokenizer train --out``, ``lm train --out``) refuses a path that is not its own earlier
output or not a regular file, in one line with exit 2, and leaves it as it was; outputs are
written atomically; a malformed run, a failed run, a taken Prometheus port, Ctrl-C and
SIGTERM each end in one line and a stated exit code."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from chaos_kit import mount_tmpfs, run_local, snapshot

from dataforge.io.owned_output import OUTPUT_MARKER, OutputPathError, owned_dir

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONHASHSEED": "0"}


def _cli(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "dataforge.cli", *args],
        capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=timeout,
    )  # fmt: skip


def _one_line_error(proc: subprocess.CompletedProcess, code: int, *words: str) -> str:
    assert proc.returncode == code, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def _user_folder(root: Path) -> Path:
    """A user's project folder: files and a sub-folder that nobody may delete."""
    (root / "src").mkdir(parents=True)
    (root / "README.md").write_text("my project\n")
    (root / "src" / "main.py").write_text("print('hello')\n")
    return root


def _siblings(path: Path) -> list[str]:
    """Names next to ``path`` that an interrupted or refused write could have left."""
    return sorted(p.name for p in path.parent.iterdir() if p.name.startswith(f".{path.name}."))


# --- train export ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    from trainer.config import config_from_mapping
    from trainer.data.sources import ListBatchSource
    from trainer.loop import train

    tmp = tmp_path_factory.mktemp("ckpt")
    raw = {
        "model": {"preset": "tiny", "vocab_size": 64},
        "train": {"max_steps": 1, "precision": "fp32", "device": "cpu", "tensorboard": False},
        "optim": {"warmup_steps": 0},
        "checkpoint": {"dir": str(tmp / "ck"), "interval": 1},
        "run_dir": str(tmp / "run"),
    }
    batch = {"input_ids": torch.randint(64, (2, 16), generator=torch.Generator().manual_seed(0))}
    batch["labels"] = torch.roll(batch["input_ids"], -1, 1)
    train(config_from_mapping(raw), "pretrain", source=ListBatchSource([batch]))
    return tmp / "ck" / "step_00000001"


def test_export_never_deletes_a_users_folder(checkpoint: Path, tmp_path: Path) -> None:
    project = _user_folder(tmp_path / "project")
    before = snapshot(project)
    proc = _cli("train", "export", str(checkpoint), "-o", str(project))
    _one_line_error(proc, 2, str(project), "choose another path", OUTPUT_MARKER)
    assert snapshot(project) == before
    assert _siblings(project) == []


def test_export_refuses_a_file_and_a_fifo(checkpoint: Path, tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("keep me\n")
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for target, kind in ((notes, "a regular file"), (fifo, "a fifo")):
        proc = _cli("train", "export", str(checkpoint), "-o", str(target))
        _one_line_error(proc, 2, str(target), kind if kind == "a fifo" else "not a folder")
    assert notes.read_text() == "keep me\n"
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_export_replaces_only_its_own_export_atomically(checkpoint: Path, tmp_path: Path) -> None:
    out = tmp_path / "export"
    assert _cli("train", "export", str(checkpoint), "-o", str(out)).returncode == 0
    assert (out / OUTPUT_MARKER).is_file() and (out / "model.safetensors").is_file()
    (out / "model.safetensors").write_bytes(b"stale")  # proves the second export replaced it
    proc = _cli("train", "export", str(checkpoint), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert (out / "model.safetensors").read_bytes() != b"stale"
    assert _siblings(out) == []  # no temporary or old folder left beside it
    # an export from before markers (config.json naming a dataforge stage, files only)
    (out / OUTPUT_MARKER).unlink()
    assert _cli("train", "export", str(checkpoint), "-o", str(out)).returncode == 0


# --- report -o ---------------------------------------------------------------------------


def _training_run(root: Path) -> Path:
    root.mkdir(parents=True)
    records = [
        {"step": s, "loss": 4.0 - s / 10, "lr": 1e-3, "grad_norm": 1.0, "tokens_per_s": 100.0,
         "step_time_s": 0.1}
        for s in range(1, 4)
    ]  # fmt: skip
    (root / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return root


def test_report_never_replaces_a_users_file(tmp_path: Path) -> None:
    run = _training_run(tmp_path / "run")
    mine = tmp_path / "thesis.html"
    mine.write_text("<html>my thesis</html>\n")
    proc = _cli("report", str(run), "-o", str(mine))
    _one_line_error(proc, 2, str(mine), "is not a file dataforge report wrote")
    assert mine.read_text() == "<html>my thesis</html>\n"
    assert _siblings(mine) == []


def test_report_refuses_what_is_not_a_regular_file(tmp_path: Path) -> None:
    run = _training_run(tmp_path / "run")
    fifo = tmp_path / "fifo.html"
    os.mkfifo(fifo)
    folder = tmp_path / "somedir"
    folder.mkdir()
    (tmp_path / "real.html").write_text("x")
    link = tmp_path / "link.html"
    link.symlink_to(tmp_path / "real.html")
    cases = [(fifo, "is a fifo"), (folder, "is a folder"), (link, "is a symlink"),
             (Path("/dev/null"), "is a character device")]  # fmt: skip
    for target, why in cases:
        _one_line_error(_cli("report", str(run), "-o", str(target)), 2, str(target), why)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert list(folder.iterdir()) == []
    assert link.is_symlink() and (tmp_path / "real.html").read_text() == "x"
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_report_into_a_missing_folder_is_one_line(tmp_path: Path) -> None:
    run = _training_run(tmp_path / "run")
    target = tmp_path / "no" / "such" / "report.html"
    _one_line_error(_cli("report", str(run), "-o", str(target)), 2, "does not exist")
    assert not (tmp_path / "no").exists()
    under_file = tmp_path / "run" / "metrics.jsonl" / "report.html"
    _one_line_error(_cli("report", str(run), "-o", str(under_file)), 2, "is not a folder")


def test_report_onto_a_full_disk_is_one_line_and_leaves_nothing(tmp_path: Path) -> None:
    run = _training_run(tmp_path / "run")
    disk = tmp_path / "disk"
    if os.geteuid() != 0 or not mount_tmpfs(disk, "64k"):
        pytest.skip("needs root and `mount -t tmpfs` to make a small full disk")
    try:
        with open(disk / "filler", "wb", buffering=0) as f, pytest.raises(OSError):
            while True:
                f.write(b"x" * 4096)
        proc = _cli("report", str(run), "-o", str(disk / "r.html"))
        _one_line_error(proc, 2, str(disk / "r.html"), "No space left on device")
        assert sorted(p.name for p in disk.iterdir()) == ["filler"]
    finally:
        subprocess.run(["umount", str(disk)], check=True)


def test_report_replaces_its_own_report(tmp_path: Path) -> None:
    run = _training_run(tmp_path / "run")
    out = tmp_path / "r.html"
    assert _cli("report", str(run), "-o", str(out)).returncode == 0
    first = out.read_text()
    assert '<meta name="generator" content="dataforge report">' in first
    proc = _cli("report", str(run), "-o", str(out))
    assert proc.returncode == 0 and proc.stdout.strip() == str(out)
    assert out.read_text() == first
    assert _siblings(out) == []


def test_report_replaces_a_report_from_before_the_generator_tag(tmp_path: Path) -> None:
    from dataforge.report import write_report

    run = _training_run(tmp_path / "run")
    old = '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n<title>training run: r'
    (run / "report.html").write_text(old + "</title></head></html>\n")
    assert write_report(run) == run / "report.html"
    assert "generator" in (run / "report.html").read_text()


@pytest.mark.parametrize(
    "name, body, words",
    [
        ("manifest.json", "{not json", ["manifest.json: malformed", "JSONDecodeError"]),
        ("manifest.json", "[1, 2]", ["manifest.json: malformed"]),
        ("manifest.json", "[" * 100_000, ["manifest.json: malformed", "RecursionError"]),
        ("manifest.json", '{"status": "complete"}', ["manifest.json: malformed", "KeyError"]),
        ("metrics.jsonl", '{"step": 1, "loss": 1}\n{oops\n', ["metrics.jsonl:2: not JSON"]),
        ("metrics.jsonl", '[1]\n', ["metrics.jsonl:1: not a metrics record"]),
    ],
)  # fmt: skip
def test_report_of_malformed_run_files_is_one_line(tmp_path: Path, name, body, words) -> None:
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / name).write_text(body)
    _one_line_error(_cli("report", str(tmp_path / "run")), 2, *words)
    assert not (tmp_path / "run" / "report.html").exists()


def test_report_of_a_failed_run_says_so_and_exits_1(pipeline_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    manifest = run_local(pipeline_file, out)
    # what commit_output writes when the accounting check fails
    manifest |= {"status": "failed", "error": "source news_zh: input 9 != kept 8 + dropped 0"}
    (out / "manifest.json").write_text(json.dumps(manifest))
    proc = _cli("report", str(out))
    _one_line_error(proc, 1, "did not complete (status failed)", str(out / "report.html"))
    page = (out / "report.html").read_text()
    assert "This run is failed, not complete" in page
    assert "input 9 != kept 8 + dropped 0" in page
    manifest["status"] = "complete"
    (out / "manifest.json").write_text(json.dumps(manifest))
    assert _cli("report", str(out)).returncode == 0


# Blocks in the atomic write, after the temporary file is written and before it is renamed
# into place: the interrupt lands while the temporary exists.
_BLOCKING = """
import os, sys, time
real_fsync = os.fsync
def fsync(fd):
    real_fsync(fd)
    print("writing", flush=True)
    time.sleep(120)
os.fsync = fsync
from dataforge.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize(
    "sig, code, word",
    [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated (SIGTERM)")],
)
def test_a_signal_while_the_report_is_written_leaves_no_file(tmp_path, sig, code, word) -> None:
    run = _training_run(tmp_path / "run")
    before = sorted(p.name for p in run.iterdir())
    proc = subprocess.Popen(
        [sys.executable, "-c", _BLOCKING, "report", str(run)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=ENV,
    )  # fmt: skip
    try:
        assert proc.stdout.readline().strip() == "writing"
        assert any(p.name.startswith(".report.html.tmp-") for p in run.iterdir())
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == code, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{word}: dataforge report stopped"), err
    assert sorted(p.name for p in run.iterdir()) == before  # no report, no temporary


# --- tokenizer train, lm train -----------------------------------------------------------


def test_tokenizer_overwrite_never_deletes_a_users_folder(tmp_path: Path) -> None:
    project = _user_folder(tmp_path / "project")
    corpus = FIXTURES / "tokenization" / "zh_reviews.jsonl"  # enough to train on
    before = snapshot(project)
    args = ["--input", str(corpus), "--vocab-size", "2000", "--out", str(project), "--overwrite"]
    proc = _cli("tokenizer", "train", *args)
    _one_line_error(proc, 2, str(project), "did not write")
    assert snapshot(project) == before
    assert _siblings(project) == []


def test_lm_train_never_replaces_a_users_file(tmp_path: Path) -> None:
    corpus = FIXTURES / "lm_news_zh.jsonl"  # enough to train on
    mine = tmp_path / "model.bin"
    mine.write_bytes(b"my own model")
    fifo = tmp_path / "fifo.bin"
    os.mkfifo(fifo)
    common = ["lm", "train", "--input", str(corpus), "--lang", "zh", "--segmentation", "chars"]
    common += ["--order", "3", "--discount-fallback", "--kenlm-bin", str(ROOT / "build/kenlm/bin")]
    for target, why in ((mine, "is not a file dataforge lm train wrote"), (fifo, "is a fifo")):
        _one_line_error(_cli(*common, "--out", str(target)), 2, str(target), why)
    assert mine.read_bytes() == b"my own model"
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert _siblings(mine) == [] and _siblings(fifo) == []


# --- the shared folder writer --------------------------------------------------------------


def test_a_failed_folder_write_keeps_the_old_output(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with owned_dir(out, "test writer") as tmp:
        (tmp / "a.txt").write_text("first")
    with pytest.raises(RuntimeError), owned_dir(out, "test writer") as tmp:
        (tmp / "a.txt").write_text("second")
        raise RuntimeError("killed half way")
    assert (out / "a.txt").read_text() == "first"
    assert _siblings(out) == []
    with owned_dir(out, "test writer") as tmp:  # ours: replaced whole
        (tmp / "b.txt").write_text("third")
    assert sorted(p.name for p in out.iterdir()) == [OUTPUT_MARKER, "b.txt"]
    with pytest.raises(OutputPathError, match="did not write"):
        with owned_dir(_user_folder(tmp_path / "user"), "test writer"):
            pass


# --- Prometheus ----------------------------------------------------------------------------


def test_a_taken_prometheus_port_is_one_line(tmp_path: Path) -> None:
    config = tmp_path / "train.yaml"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config.write_text(
            json.dumps(
                {
                    "model": {"preset": "tiny", "vocab_size": 64},
                    "train": {
                        "max_steps": 2,
                        "precision": "fp32",
                        "device": "cpu",
                        "tensorboard": False,
                    },
                    "optim": {"warmup_steps": 0},
                    "checkpoint": {"dir": str(tmp_path / "ck"), "interval": 100},
                    "run_dir": str(tmp_path / "run"),
                    "data": {"source": "synthetic", "batch_size": 2, "seq_len": 16},
                    "metrics": {"prometheus_port": port, "prometheus_host": "127.0.0.1"},
                }
            )  # fmt: skip
        )
        proc = _cli("train", "pretrain", str(config))
    _one_line_error(proc, 2, "metrics.prometheus_port", f"127.0.0.1:{port}", "free port")
