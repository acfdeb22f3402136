"""Training text for the tokenizer: read inputs, sample deterministically by id hash.

Inputs are file globs (jsonl / jsonl.gz / jsonl.zst / parquet / txt, read by the pipeline's
own readers so ids and repairs match a run) or a ``dataforge run`` output directory
(its MDS dataset). The sample is the records with the smallest salted hash of their id, up
to a character budget: it does not depend on file order, and a larger budget only adds
records.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dataforge.io.documents import iter_documents
from dataforge.io.mds import iter_samples

__all__ = ["Sample", "iter_records", "sample_texts"]


@dataclass(frozen=True)
class Sample:
    """The texts chosen for training, in hash order, and what identifies them."""

    texts: list[str]
    num_records: int
    """Records seen in the inputs (before sampling)."""
    sha256: str
    """Hash of the chosen (id, text) pairs in order: identifies the training data."""


def _iter_files(pattern: str, text_key: str, id_key: str | None) -> Iterator[tuple[str, str]]:
    for batch in iter_documents(pattern, source="tokenizer", text_key=text_key, id_key=id_key):
        yield from zip(
            batch.column("id").to_pylist(), batch.column("text").to_pylist(), strict=True
        )


def _iter_run_dir(path: Path) -> Iterator[tuple[str, str]]:
    for sample in iter_samples(path):
        if sample.get("text"):
            yield str(sample["id"]), sample["text"]


def iter_records(
    inputs: Sequence[str], text_key: str = "text", id_key: str | None = "id"
) -> Iterator[tuple[str, str]]:
    """Yield ``(id, text)`` of every usable record of the inputs, in a fixed order.

    Args:
        inputs: file globs, or ``dataforge run`` output directories.
        text_key: JSON/parquet key of the text.
        id_key: key of a stable id; None derives ``<source>/<relpath>:<line>`` ids.
    """
    for item in inputs:
        if Path(item).is_dir():
            yield from _iter_run_dir(Path(item))
        else:
            yield from _iter_files(item, text_key, id_key)


def _id_hash(salt: bytes, rid: str) -> int:
    return int.from_bytes(
        hashlib.blake2b(rid.encode("utf-8", "surrogatepass"), digest_size=8, key=salt).digest(),
        "little",
    )


def sample_texts(
    inputs: Sequence[str],
    max_chars: int,
    seed: int = 0,
    text_key: str = "text",
    id_key: str | None = "id",
) -> Sample:
    """Choose up to ``max_chars`` characters of records, deterministically.

    Two passes over the inputs: the first hashes ids and keeps lengths, the second collects
    the chosen texts, so memory holds only the sample.
    """
    salt = seed.to_bytes(8, "little", signed=True)
    hashes, lengths = [], []
    for rid, text in iter_records(inputs, text_key, id_key):
        hashes.append(_id_hash(salt, rid))
        lengths.append(len(text))
    if not hashes:
        raise ValueError(f"inputs {list(inputs)} hold no usable text")
    hash_arr = np.array(hashes, np.uint64)
    order = np.argsort(hash_arr, kind="stable")
    within = np.cumsum(np.asarray(lengths, np.int64)[order]) <= max_chars
    take = max(int(within.sum()), 1)  # at least one record, even if it is over the budget
    cutoff = int(hash_arr[order[take - 1]])
    chosen: list[tuple[int, str, str]] = []
    for rid, text in iter_records(inputs, text_key, id_key):
        h = _id_hash(salt, rid)
        if h <= cutoff:
            chosen.append((h, rid, text))
    chosen.sort()
    digest = hashlib.sha256()
    for _, rid, text in chosen:
        for field in (rid, text):
            data = field.encode("utf-8", "surrogatepass")
            digest.update(len(data).to_bytes(8, "little") + data)
    return Sample([text for _, _, text in chosen], len(hashes), digest.hexdigest())
