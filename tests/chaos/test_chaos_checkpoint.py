"""Checkpoints own only what the trainer wrote (issue 31, neighbours of case 2): a user's
folder named like a checkpoint inside ``checkpoint.dir`` is never deleted (keep_last
rotation, a re-save of the same step), a ``checkpoint.dir`` that is a user's folder is
refused in one line with exit 2, checkpoints from before markers still resume, and a kill
while saving or rotating leaves no ``step_*`` that looks complete."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
from chaos_kit import snapshot

from dataforge.io.owned_output import OUTPUT_MARKER
from trainer.__main__ import main
from trainer.config import ConfigError, TrainerConfig, config_from_mapping
from trainer.data.sources import ListBatchSource
from trainer.loop import train

STATE_FILES = ["meta.json", "rank_00000.pt", "train_state.pt"]


@pytest.fixture(autouse=True)
def _one_thread():
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def _raw(tmp_path: Path, **checkpoint) -> dict:
    return {
        "model": {"preset": "tiny", "vocab_size": 64},
        "train": {"max_steps": 3, "precision": "fp32", "device": "cpu", "tensorboard": False},
        "optim": {"warmup_steps": 0},
        "checkpoint": {"dir": str(tmp_path / "ck"), "interval": 1, "keep_last": 1} | checkpoint,
        "run_dir": str(tmp_path / "run"),
        "data": {"source": "synthetic", "batch_size": 2, "seq_len": 16},
    }


def _config(tmp_path: Path, max_steps: int = 3, **checkpoint) -> TrainerConfig:
    raw = _raw(tmp_path, **checkpoint)
    raw["train"]["max_steps"] = max_steps
    return config_from_mapping(raw)


def _batches() -> list[dict]:
    gen = torch.Generator().manual_seed(0)
    out = []
    for _ in range(3):
        ids = torch.randint(1, 64, (2, 16), generator=gen)
        out.append({"input_ids": ids, "labels": torch.roll(ids, -1, 1)})
    return out


class _AfterStart(ListBatchSource):
    """Batches that run ``action`` once, when training asks for the first one (after the
    checkpoint folder was checked): a user writing into ``checkpoint.dir`` mid-run."""

    def __init__(self, action: Callable[[], object]) -> None:
        super().__init__(_batches())
        self.action: Callable[[], object] | None = action

    def __iter__(self) -> Iterator[dict]:
        if self.action is not None:
            self.action, action = None, self.action
            action()
        yield from super().__iter__()


def _user_step_folder(path: Path, meta: bool) -> Path:
    """A user's folder named like a checkpoint (with a ``meta.json`` of its own or not)."""
    path.mkdir(parents=True)
    (path / "results.csv").write_text("a,b\n1,2\n")
    if meta:
        (path / "meta.json").write_text(json.dumps({"note": "my experiment"}))
    return path


def _complete_steps(ck: Path) -> list[str]:
    """The ``step_*`` folders in ``ck``, each checked to hold every file of a checkpoint."""
    names = sorted(p.name for p in ck.glob("step_*"))
    for name in names:
        assert sorted(p.name for p in (ck / name).iterdir() if p.name != OUTPUT_MARKER) == (
            STATE_FILES
        ), name
    return names


def test_rotation_never_deletes_a_users_folder_named_like_a_checkpoint(tmp_path: Path) -> None:
    user = tmp_path / "ck" / "step_00000000"  # sorts first: the first to rotate out
    source = _AfterStart(lambda: _user_step_folder(user, meta=True))
    train(_config(tmp_path), "pretrain", source=source)  # keep_last 1: steps 1, 2 go
    assert sorted(p.name for p in user.iterdir()) == ["meta.json", "results.csv"]
    assert (user / "results.csv").read_text() == "a,b\n1,2\n"
    assert sorted(p.name for p in (tmp_path / "ck").glob("step_*")) == [
        "step_00000000",
        "step_00000003",
    ]


def test_a_resave_of_the_same_step_never_deletes_a_users_folder(tmp_path: Path) -> None:
    user = tmp_path / "ck" / "step_00000002"
    source = _AfterStart(lambda: _user_step_folder(user, meta=False))
    with pytest.raises(ConfigError, match="step_00000002: not a checkpoint dataforge train"):
        train(_config(tmp_path), "pretrain", resume="scratch", source=source)
    assert sorted(p.name for p in user.iterdir()) == ["results.csv"]


def _tree(root: Path) -> list[str]:
    """Every path under ``root``: folders, files and symlinks (not followed)."""
    return sorted(str(Path(d) / n) for d, dirs, files in os.walk(root) for n in dirs + files)


def _project(ck: Path) -> None:
    (ck / "src").mkdir(parents=True)
    (ck / "README.md").write_text("my project\n")
    (ck / "src" / "main.py").write_text("print('hello')\n")


def _step_symlink(ck: Path) -> None:
    target = ck.parent / "elsewhere"
    _user_step_folder(target, meta=True)
    ck.mkdir()
    (ck / OUTPUT_MARKER).write_text("{}\n")
    (ck / "step_00000001").symlink_to(target, target_is_directory=True)


def _checkpoints_and_a_user_step(ck: Path) -> None:
    """A checkpoint.dir the trainer wrote, plus a user's ``step_*`` folder."""
    ck.mkdir()
    (ck / OUTPUT_MARKER).write_text("{}\n")
    _user_step_folder(ck / "step_00000002", meta=False)


def _user_tmp(ck: Path) -> None:
    ck.mkdir()
    (ck / OUTPUT_MARKER).write_text("{}\n")
    _project(ck / ".tmp-step_00000002")


@pytest.mark.parametrize(
    "make, named",
    [
        (_project, "ck: a non-empty folder dataforge train did not write"),
        (_step_symlink, "step_00000001: is not a checkpoint dataforge train wrote"),
        (_checkpoints_and_a_user_step, "step_00000002: is not a checkpoint dataforge train"),
        (_user_tmp, ".tmp-step_00000002: is not a partial checkpoint"),
    ],
    ids=["users-folder", "step-symlink", "users-step-folder", "users-tmp-folder"],
)
@pytest.mark.parametrize("scratch", [False, True], ids=["auto", "from-scratch"])
def test_a_checkpoint_dir_holding_what_is_not_ours_is_refused_in_one_line(
    tmp_path: Path, capsys, make, named: str, scratch: bool
) -> None:
    ck = tmp_path / "ck"
    make(ck)
    config = tmp_path / "c.yaml"
    config.write_text(json.dumps(_raw(tmp_path)))
    before = _tree(tmp_path), snapshot(tmp_path)
    assert main(["pretrain", str(config), *(["--from-scratch"] if scratch else [])]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("error: checkpoint.dir "), err
    assert named in err, err
    assert (_tree(tmp_path), snapshot(tmp_path)) == before  # nothing made, changed or removed


def _unmark(ck: Path) -> None:
    """Turn the checkpoints in ``ck`` into ones written before markers existed."""
    for marker in ck.rglob(OUTPUT_MARKER):
        marker.unlink()


def test_checkpoints_from_before_markers_resume_and_rotate(tmp_path: Path) -> None:
    full = train(_config(tmp_path / "full", 4), "pretrain", source=ListBatchSource(_batches()))
    config = _config(tmp_path, 4, keep_last=2)
    train(config, "pretrain", source=ListBatchSource(_batches()), stop_after=2)
    ck = tmp_path / "ck"
    _unmark(ck)
    assert sorted(p.name for p in ck.iterdir()) == ["step_00000001", "step_00000002"]
    resumed = train(config, "pretrain", source=ListBatchSource(_batches()))
    assert resumed.steps == 4 and len(resumed.losses) == 2  # steps 3, 4 from step 2
    assert resumed.losses == pytest.approx(full.losses[2:], abs=1e-6)
    assert _complete_steps(ck) == ["step_00000003", "step_00000004"]  # old ones rotated out
    assert (ck / OUTPUT_MARKER).is_file() and (ck / "step_00000004" / OUTPUT_MARKER).is_file()
    scratch = train(config, "pretrain", resume="scratch", source=ListBatchSource(_batches()))
    assert scratch.losses == pytest.approx(full.losses, abs=1e-6)
    assert len(list(ck.glob("superseded-*/step_*"))) == 2  # moved aside, not deleted


def test_a_kill_while_saving_or_rotating_leaves_no_step_that_looks_complete(
    tmp_path: Path, monkeypatch
) -> None:
    config, ck = _config(tmp_path, 4), tmp_path / "ck"
    real_rmtree, real_save = shutil.rmtree, torch.save

    def killed_rmtree(path, *args, **kwargs):  # dies after the first file of a checkpoint
        if (Path(path) / "train_state.pt").is_file():
            (Path(path) / "train_state.pt").unlink()
            raise KeyboardInterrupt
        return real_rmtree(path, *args, **kwargs)

    monkeypatch.setattr(shutil, "rmtree", killed_rmtree)
    with pytest.raises(KeyboardInterrupt):  # rotating step 1 out after step 2
        train(config, "pretrain", source=ListBatchSource(_batches()))
    assert _complete_steps(ck) == ["step_00000002"]
    monkeypatch.setattr(shutil, "rmtree", real_rmtree)

    def killed_save(obj, path, *args, **kwargs):
        if Path(path).name == "train_state.pt" and "step_00000003" in str(path):
            Path(path).write_bytes(b"half")
            raise KeyboardInterrupt
        return real_save(obj, path, *args, **kwargs)

    monkeypatch.setattr(torch, "save", killed_save)
    with pytest.raises(KeyboardInterrupt):  # writing step 3
        train(config, "pretrain", source=ListBatchSource(_batches()))
    assert _complete_steps(ck) == ["step_00000002"]
    monkeypatch.setattr(torch, "save", real_save)

    done = train(config, "pretrain", source=ListBatchSource(_batches()))
    assert done.steps == 4 and len(done.losses) == 2  # resumed from step 2
    assert _complete_steps(ck) == ["step_00000004"]
    assert sorted(p.name for p in ck.iterdir() if p.name.startswith(".")) == [OUTPUT_MARKER]


@pytest.mark.parametrize(
    "content", ["my notes\n", '{"step": 1, "loss": 2.0}\n[1, 2]\n'], ids=["text", "json-lines"]
)
def test_a_users_metrics_file_in_run_dir_is_never_rewritten(tmp_path: Path, content: str) -> None:
    metrics = tmp_path / "run" / "metrics.jsonl"
    metrics.parent.mkdir()
    metrics.write_text(content)
    with pytest.raises(ConfigError, match="metrics.jsonl: not a metrics file dataforge train"):
        train(_config(tmp_path), "pretrain", source=ListBatchSource(_batches()))
    assert metrics.read_text() == content
    assert sorted(p.name for p in metrics.parent.iterdir()) == ["metrics.jsonl"]
