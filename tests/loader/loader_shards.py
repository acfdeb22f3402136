"""Small MDS datasets written with streaming's MDSWriter in the pipeline's column layout.

Every sample's first token is ``FIRST + i`` (its index in the dataset) so that a batch
row can be traced back to the sample it came from.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from streaming import MDSWriter

FIRST = 1000
BASE_COLUMNS = {"id": "str", "text": "str", "source": "str", "lang": "str", "meta": "json"}


def pretrain_sample(i: int, length: int, rng: np.random.Generator) -> dict:
    tokens = rng.integers(1, 900, length).astype(np.uint16)
    tokens[0] = FIRST + i
    return {"tokens": tokens, "num_tokens": length}


def sft_sample(i: int, length: int, rng: np.random.Generator) -> dict:
    sample = pretrain_sample(i, length, rng)
    prompt = int(rng.integers(1, length)) if length > 1 else 1
    sample["loss_mask"] = (np.arange(length) >= prompt).astype(np.uint8)
    return sample


def dpo_sample(i: int, length: int, rng: np.random.Generator) -> dict:
    prompt_len = max(1, length // 3)
    chosen_len = max(1, length - prompt_len)
    rejected_len = int(rng.integers(1, chosen_len + 1))
    prompt = rng.integers(1, 900, prompt_len).astype(np.uint16)
    prompt[0] = FIRST + i
    chosen = np.full(chosen_len, 901, np.uint16)  # chosen tokens are 901, rejected 902
    rejected = np.full(rejected_len, 902, np.uint16)
    return {
        "prompt_tokens": prompt,
        "chosen_tokens": chosen,
        "rejected_tokens": rejected,
        "num_tokens": prompt_len + max(chosen_len, rejected_len),
    }


MAKERS = {"pretrain": pretrain_sample, "sft": sft_sample, "dpo": dpo_sample}
EXTRA_COLUMNS = {
    "pretrain": {"tokens": "ndarray:uint16", "num_tokens": "int"},
    "sft": {"tokens": "ndarray:uint16", "loss_mask": "ndarray:uint8", "num_tokens": "int"},
    "dpo": {
        "prompt_tokens": "ndarray:uint16",
        "chosen_tokens": "ndarray:uint16",
        "rejected_tokens": "ndarray:uint16",
        "num_tokens": "int",
    },
}


def write_mds(
    out: Path,
    lengths: list[int],
    mode: str = "pretrain",
    seed: int = 0,
    size_limit: int = 1 << 14,
    compression: str | None = None,
    drop_columns: tuple[str, ...] = (),
) -> list[dict]:
    """Write one MDS dataset at ``out`` with samples of the given lengths; returns them."""
    rng = np.random.default_rng(seed)
    columns = {**BASE_COLUMNS, **EXTRA_COLUMNS[mode]}
    for name in drop_columns:
        columns.pop(name)
    samples = []
    with MDSWriter(
        out=str(out), columns=columns, size_limit=size_limit, compression=compression
    ) as writer:
        for i, length in enumerate(lengths):
            sample = {
                "id": f"doc-{i}",
                "text": f"document {i}",
                "source": "synthetic",
                "lang": "en",
                "meta": json.loads("{}"),
                **MAKERS[mode](i, length, rng),
            }
            writer.write({k: v for k, v in sample.items() if k in columns})
            samples.append(sample)
    return samples
