"""Tiny configs and batches for the trainer tests (CPU, fp32 unless a test says otherwise)."""

from __future__ import annotations

import pydoc
from pathlib import Path

import pytest
import torch

from trainer.config import TrainerConfig, config_from_mapping


@pytest.fixture(autouse=True)
def _one_thread():
    # The test machine's cores are shared; one intra-op thread also makes fp32 sums
    # bitwise repeatable between the runs a test compares.
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def tiny_config(tmp_path: Path, **sections) -> TrainerConfig:
    """A 2-layer, 64-wide model over a 64-token vocabulary; sections override keys."""
    raw = {
        "model": {"preset": "tiny", "vocab_size": 64},
        "train": {
            "max_steps": 20,
            "precision": "fp32",
            "device": "cpu",
            "tensorboard": False,
            "log_interval": 1000,
        },
        "optim": {"lr": 3e-3, "min_lr": 3e-4, "warmup_steps": 2},
        "checkpoint": {"dir": str(tmp_path / "ckpt"), "interval": 1000},
        "run_dir": str(tmp_path / "run"),
        "data": {"source": "synthetic", "batch_size": 4, "seq_len": 32},
    }
    for section, values in sections.items():
        if isinstance(values, dict):
            raw[section] = {**raw.get(section, {}), **values}
        else:
            raw[section] = values
    return config_from_mapping(raw)


def lm_batch(seed: int, rows: int = 4, width: int = 32, vocab: int = 64, pad: int = 0) -> dict:
    """Random tokens in the loader's layout; the last ``pad`` positions of each row are
    padding, so rows carry different numbers of targets when ``pad`` varies."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, vocab, (rows, width), generator=gen)
    mask = torch.ones_like(ids)
    if pad:
        ids[:, width - pad :] = 0
        mask[:, width - pad :] = 0
    labels = torch.full_like(ids, -100)
    labels[:, :-1] = torch.where(mask[:, 1:].bool(), ids[:, 1:], -100)
    positions = (torch.arange(width).expand(rows, width) * mask).contiguous()
    return {"input_ids": ids, "labels": labels, "attention_mask": mask, "position_ids": positions}


def real_text_docs(n: int) -> list[str]:
    """Docstrings of standard-library modules: real English text available offline."""
    docs = []
    for name in (
        "json",
        "csv",
        "heapq",
        "bisect",
        "textwrap",
        "shlex",
        "difflib",
        "fractions",
        "statistics",
        "string",
    ):
        module = __import__(name)
        for attr in dir(module):
            doc = pydoc.getdoc(getattr(module, attr, None))
            if attr.startswith("_") or len(doc) < 80:
                continue
            docs.append(doc)
    docs = sorted(set(docs))
    assert len(docs) >= n, len(docs)
    return docs[:n]


@pytest.fixture
def make_config():
    return tiny_config


@pytest.fixture
def make_batch():
    return lm_batch


@pytest.fixture
def text_docs():
    return real_text_docs
