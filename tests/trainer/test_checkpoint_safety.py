"""A checkpoint is read as data: a crafted pickle in any of its files (``.metadata``, a
``.distcp`` value, ``train_state.pt``, ``rank_<r>.pt``) runs nothing and is refused in one
line (exit 2) by ``train export``, by resume and by ``init_from``; real checkpoints, full
state dicts and the distributed layout, still export and resume alike."""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp
from safetensors.torch import load_file
from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

from dataforge.cli import main as dataforge_main
from trainer.__main__ import main
from trainer.checkpoint.model_state import DCP_DIR, sharded_state
from trainer.checkpoint.safe_load import _METADATA_GLOBALS, METADATA_FILE, read_dcp_metadata
from trainer.config import ConfigError, config_from_mapping
from trainer.control.optim import build_optimizer
from trainer.model.transformer import Transformer

STEP = "step_00000002"


class _Payload:
    """What a stranger's pickle can do: unpickling it creates the file ``path``."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def _config(root: Path, **extra: str) -> Path:
    """A tiny pretraining run on synthetic tokens: 3 steps, a checkpoint at step 2."""
    lines = {
        "model": "{preset: tiny, vocab_size: 64}",
        "train": "{max_steps: 3, precision: fp32, device: cpu, tensorboard: false}",
        "optim": "{warmup_steps: 0}",
        "data": "{source: synthetic, batch_size: 2, seq_len: 16}",
        "run_dir": str(root / "run"),
        "checkpoint": f"{{dir: {root / 'ck'}, interval: 2}}",
        **extra,
    }
    path = root / "c.yaml"
    path.write_text("".join(f"{k}: {v}\n" for k, v in lines.items()))
    return path


def _as_distributed(step: Path, poison: Path | None = None) -> None:
    """Rewrite checkpoint ``step`` (full state dicts) in the layout a tp/pp run saves: the
    model and optimizer in ``model/`` (``dcp.save``), ``train_state.pt`` without them. With
    ``poison``, the optimizer's first lr value is a :class:`_Payload` creating that file."""
    state = torch.load(step / "train_state.pt", weights_only=True)
    config = config_from_mapping(json.loads(state["config"]))
    model = Transformer(config.model)
    optimizer = build_optimizer(model, config.optim, torch.device("cpu"))
    torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)  # adds initial_lr, as the run's
    full = StateDictOptions(full_state_dict=True)
    set_state_dict(model, optimizer, model_state_dict=state.pop("model"),
                   optim_state_dict=state.pop("optimizer"), options=full)  # fmt: skip
    sharded = sharded_state(model, optimizer)
    if poison is not None:
        lr = next(k for k in sharded["optimizer"] if k.endswith(".lr"))
        sharded["optimizer"][lr] = _Payload(poison)
    dcp.save(sharded, checkpoint_id=step / DCP_DIR)
    torch.save(state, step / "train_state.pt")


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """``ck/step_00000002`` of a 3-step run, and the same checkpoint in the distributed
    layout under ``dcp/ck``."""
    root = tmp_path_factory.mktemp("trained")
    assert main(["pretrain", str(_config(root))]) == 0
    shutil.copytree(root / "ck" / STEP, root / "dcp" / "ck" / STEP)
    _as_distributed(root / "dcp" / "ck" / STEP)
    return root


def _checkpoint_dir(trained: Path, tmp_path: Path, layout: str) -> Path:
    """A fresh ``checkpoint.dir`` holding only the step-2 checkpoint of ``layout``."""
    source = trained / "ck" if layout == "full" else trained / "dcp" / "ck"
    (tmp_path / "ck").mkdir()
    shutil.copy(trained / "ck" / ".dataforge-output", tmp_path / "ck")
    shutil.copytree(source / STEP, tmp_path / "ck" / STEP)
    return tmp_path / "ck" / STEP


def _one_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("error: "), err
    return err


def test_the_allow_list_reads_a_real_save_as_pickle_does(trained):
    folder = trained / "dcp" / "ck" / STEP / DCP_DIR
    seen: set[tuple[str, str]] = set()

    class Recording(pickle.Unpickler):
        def find_class(self, module, name):
            seen.add((module, name))
            return super().find_class(module, name)

    with (folder / METADATA_FILE).open("rb") as file:
        plain = Recording(file).load()
    dtypes = {
        (m, n) for m, n in seen if m == "torch" and isinstance(getattr(torch, n), torch.dtype)
    }
    assert seen - dtypes <= _METADATA_GLOBALS and dtypes == {("torch", "float32")}
    checked = read_dcp_metadata(folder)
    assert checked.state_dict_metadata == plain.state_dict_metadata
    assert checked.storage_data == plain.storage_data
    assert any(k.startswith("model.") for k in checked.state_dict_metadata)


def _forge(step: Path, what: str, marker: Path) -> None:
    """Replace one file of checkpoint ``step`` (full state dicts; for the first two kinds
    rewritten in the distributed layout first) by a pickle creating ``marker``."""
    if what == "metadata":
        _as_distributed(step)
        (step / DCP_DIR / METADATA_FILE).write_bytes(pickle.dumps(_Payload(marker)))
    elif what == "distcp value":
        _as_distributed(step, poison=marker)
    elif what == "train_state":
        torch.save({"config": "{}", "loop": _Payload(marker)}, step / "train_state.pt")
    else:
        rank = torch.load(step / "rank_00000.pt", weights_only=True)
        torch.save(rank | {"data": _Payload(marker)}, step / "rank_00000.pt")


# (forged file, does export read it, the error's words)
FORGERIES = [
    ("metadata", True, f"{METADATA_FILE}: not a distributed checkpoint index"),
    ("distcp value", False, "a data file holds objects other than tensors"),
    ("train_state", True, "train_state.pt: not a checkpoint file dataforge train wrote"),
    ("rank", False, "rank_00000.pt: not a checkpoint file dataforge train wrote"),
]


@pytest.mark.parametrize(("what", "exported", "words"), FORGERIES)
def test_a_forged_file_runs_nothing_on_resume_or_export(
    trained, tmp_path, capsys, what, exported, words
):
    marker = tmp_path / "code-ran"
    step = _checkpoint_dir(trained, tmp_path, "full")
    _forge(step, what, marker)
    capsys.readouterr()

    assert main(["pretrain", str(_config(tmp_path))]) == 2  # resume: the latest checkpoint
    err = _one_error(capsys)
    assert words in err and str(step) in err, err
    assert not marker.exists()

    rc = dataforge_main(["train", "export", str(step), "-o", str(tmp_path / "out")])
    if exported:
        assert rc == 2 and words in _one_error(capsys)
        assert not (tmp_path / "out").exists()
    else:  # export reads only the model's tensors, which are intact
        assert rc == 0
    assert not marker.exists()


def test_init_from_reads_no_pickle(trained, tmp_path, capsys):
    marker = tmp_path / "code-ran"
    (tmp_path / "forged").mkdir()
    step = _checkpoint_dir(trained, tmp_path / "forged", "full")
    _forge(step, "metadata", marker)
    export = tmp_path / "export"
    shutil.copytree(trained / "ck" / "export", export)
    (export / "model.safetensors").write_bytes(pickle.dumps(_Payload(marker)))
    capsys.readouterr()
    for init_from, words in (
        (step, "no readable config.json"),
        (export, "a weights file is not safetensors"),
    ):
        config = _config(tmp_path, init_from=str(init_from))
        assert main(["pretrain", str(config), "--from-scratch"]) == 2
        err = _one_error(capsys)
        assert f"init_from {str(init_from)!r}" in err and words in err, err
        assert not marker.exists()


def test_the_distributed_layout_exports_and_resumes_like_the_full_one(trained, tmp_path):
    runs = {}
    for layout in ("full", "dcp"):
        root = tmp_path / layout
        root.mkdir()
        step = _checkpoint_dir(trained, root, layout)
        assert main(["export", str(step), "-o", str(root / "step2")]) == 0
        assert main(["pretrain", str(_config(root))]) == 0  # resumes at step 2, runs step 3
        runs[layout] = [
            load_file(root / name / "model.safetensors") for name in ("step2", "ck/export")
        ]
    for full, sharded in zip(runs["full"], runs["dcp"], strict=True):
        assert full.keys() == sharded.keys()
        assert all(torch.equal(full[k], sharded[k]) for k in full)
    assert not all(torch.equal(runs["full"][0][k], runs["full"][1][k]) for k in runs["full"][0])


def _rewrite_metadata(folder: Path, change) -> None:
    with (folder / METADATA_FILE).open("rb") as file:
        metadata = pickle.load(file)  # the test's own file
    change(metadata)
    (folder / METADATA_FILE).write_bytes(pickle.dumps(metadata))


def _point_outside(metadata) -> None:
    info = next(iter(metadata.storage_data.values()))
    info.relative_path = "../../train_state.pt"


def _claim_a_terabyte(metadata) -> None:
    entry = metadata.state_dict_metadata["model.embed.weight"]
    entry.size = torch.Size([1 << 20, 1 << 18])  # 2**40 bytes of float32


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (_point_outside, "points at '../../train_state.pt', not a __<rank>_<n>.distcp file"),
        (_claim_a_terabyte, "bytes of tensors but its data files hold"),
    ],
)
def test_an_index_is_checked_before_anything_is_read(trained, tmp_path, change, words):
    folder = tmp_path / DCP_DIR
    shutil.copytree(trained / "dcp" / "ck" / STEP / DCP_DIR, folder)
    _rewrite_metadata(folder, change)
    with pytest.raises(ConfigError, match="not a distributed checkpoint index") as info:
        read_dcp_metadata(folder)
    assert words in str(info.value)
