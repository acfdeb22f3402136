"""Collation per mode: decoded MDS samples -> a dict of torch tensors.

With ``shift_labels`` (the default) labels are already shifted: ``labels[b, t]`` is the
target of the logits at position
``t`` (``input_ids[b, t + 1]`` when that token is a training target, else -100), so the
loss is ``cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)``
with no further shift. The last token of every document has label -100, so no
document's first token is ever the target of the previous document (packing).
Unshifted labels (``shift_labels=False``, transformers' convention) are the same targets
one position later: ``labels[t + 1]`` of the shifted form, -100 at each document's start.

A piece of a split sample (``long_samples: split``) is collated as a document of its own:
its positions restart at 0 and packing gives it its own ``cu_seqlens`` segment. It holds
the sample's tokens as they are: the first piece keeps the sample's BOS, the last its EOS,
and no piece gets a new one (a continuation is not a document start, and a BOS there
would be a token the data never had). The token that ends one piece is not trained to
predict the first of the next, as at any document boundary.
"""

from __future__ import annotations

import numpy as np
import torch

from dataforge.loader.config import LoaderConfig

__all__ = ["IGNORE_INDEX", "collate", "dpo_truncation", "piece"]

IGNORE_INDEX = -100


def _doc(sample: dict, mode: str, max_len: int) -> tuple[np.ndarray, np.ndarray]:
    """Tokens of one pretrain/sft sample (truncated) and which of them are targets."""
    _check_num_tokens(sample, len(sample["tokens"]))
    tokens = np.asarray(sample["tokens"], np.int64)[:max_len]
    if mode == "sft":
        targets = np.asarray(sample["loss_mask"], bool)[:max_len]
        if len(targets) != len(tokens):
            raise ValueError(f"sample {sample.get('id')!r}: loss_mask and tokens differ in length")
    else:
        targets = np.ones(len(tokens), bool)
    return tokens, targets


def _check_num_tokens(sample: dict, length: int) -> None:
    # The plan sized the batch from num_tokens: a mismatch could break the token budget.
    if "num_tokens" in sample and int(sample["num_tokens"]) != length:
        raise ValueError(
            f"sample {sample.get('id', '?')!r}: num_tokens={sample['num_tokens']} but its "
            f"tokens give a row of {length}; the shards are inconsistent"
        )


def piece(sample: dict, start: int) -> dict:
    """A pretrain ``sample`` from token ``start`` on: a later piece of a split sample
    (:func:`collate` cuts it to ``max_seq_len``); the sample itself when ``start`` is 0."""
    if start == 0:
        return sample
    _check_num_tokens(sample, len(sample["tokens"]))
    tokens = sample["tokens"][start:]
    return {**sample, "tokens": tokens, "num_tokens": len(tokens)}


def _labels(tokens: np.ndarray, targets: np.ndarray, shift: bool) -> np.ndarray:
    labels = np.full(len(tokens), IGNORE_INDEX, np.int64)
    if shift:
        labels[:-1] = np.where(targets[1:], tokens[1:], IGNORE_INDEX)
    else:  # the first token is nobody's target within the document
        labels[1:] = np.where(targets[1:], tokens[1:], IGNORE_INDEX)
    return labels


def _tensors(arrays: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    return {k: torch.from_numpy(v) for k, v in arrays.items()}


def _padded(
    docs: list[tuple[np.ndarray, np.ndarray]],
    config: LoaderConfig,
    prefix: str = "",
    width: int = 0,
) -> dict:
    width = width or config.padded_len(max(len(t) for t, _ in docs))
    shape = (len(docs), width)
    out = {
        "input_ids": np.full(shape, config.pad_id, np.int64),
        "labels": np.full(shape, IGNORE_INDEX, np.int64),
        "attention_mask": np.zeros(shape, np.int64),
        "position_ids": np.zeros(shape, np.int64),
    }
    for i, (tokens, targets) in enumerate(docs):
        n = len(tokens)
        out["input_ids"][i, :n] = tokens
        out["labels"][i, :n] = _labels(tokens, targets, config.shift_labels)
        out["attention_mask"][i, :n] = 1
        out["position_ids"][i, :n] = np.arange(n)
    return {prefix + k: v for k, v in out.items()}


def _packed(rows: list[list[tuple[np.ndarray, np.ndarray]]], config: LoaderConfig) -> dict:
    width = config.padded_len(config.max_seq_len)
    shape = (len(rows), width)
    out = {
        "input_ids": np.full(shape, config.pad_id, np.int64),
        "labels": np.full(shape, IGNORE_INDEX, np.int64),
        "attention_mask": np.zeros(shape, np.int64),
        "position_ids": np.zeros(shape, np.int64),
    }
    # cu_seqlens index the flattened [rows * width] view; each row's padding tail is a
    # segment of its own, so varlen attention over the flat view never mixes documents.
    segments = []
    for i, row in enumerate(rows):
        offset = 0
        for tokens, targets in row:
            n = len(tokens)
            out["input_ids"][i, offset : offset + n] = tokens
            out["labels"][i, offset : offset + n] = _labels(tokens, targets, config.shift_labels)
            out["position_ids"][i, offset : offset + n] = np.arange(n)
            offset += n
            segments.append(n)
        if offset > width:
            raise AssertionError("packed row longer than max_seq_len")
        out["attention_mask"][i, :offset] = 1
        if offset < width:
            segments.append(width - offset)
    out["cu_seqlens"] = np.concatenate([[0], np.cumsum(segments)]).astype(np.int32)
    return out


def dpo_truncation(prompt: int, chosen: int, rejected: int, max_len: int) -> tuple[int, int]:
    """Kept (prompt, response) token counts of a DPO pair so that each row fits ``max_len``.

    The longer response decides: if ``prompt + max(chosen, rejected)`` is too long, the
    responses keep ``max(max_len - prompt, max_len // 2)`` tokens and the prompt keeps its
    last tokens (the ones next to the response). The row is then exactly
    ``min(prompt + max(chosen, rejected), max_len)`` long, which the batch plan relies on.
    """
    longest = max(chosen, rejected)
    if prompt + longest <= max_len:
        return prompt, longest
    response = min(longest, max(max_len - prompt, max_len // 2))
    return max_len - response, response


def _dpo(pairs: list[dict], config: LoaderConfig) -> dict:
    chosen_docs, rejected_docs = [], []
    for sample in pairs:
        prompt = np.asarray(sample["prompt_tokens"], np.int64)
        chosen = np.asarray(sample["chosen_tokens"], np.int64)
        rejected = np.asarray(sample["rejected_tokens"], np.int64)
        _check_num_tokens(sample, len(prompt) + max(len(chosen), len(rejected)))
        keep_prompt, keep_response = dpo_truncation(
            len(prompt), len(chosen), len(rejected), config.max_seq_len
        )
        prompt = prompt[len(prompt) - keep_prompt :]
        for response, docs in (
            (chosen[:keep_response], chosen_docs),
            (rejected[:keep_response], rejected_docs),
        ):
            tokens = np.concatenate([prompt, response])
            targets = np.arange(len(tokens)) >= len(prompt)
            docs.append((tokens, targets))
    width = config.padded_len(max(len(t) for t, _ in chosen_docs + rejected_docs))
    return {
        **_padded(chosen_docs, config, "chosen_", width),
        **_padded(rejected_docs, config, "rejected_", width),
    }


def collate(rows: list[list[dict]], config: LoaderConfig) -> dict[str, torch.Tensor]:
    """Collate one planned batch (rows of decoded samples) for ``config.mode``."""
    if config.mode == "dpo":
        return _tensors(_dpo([row[0] for row in rows], config))
    docs = [[_doc(s, config.mode, config.max_seq_len) for s in row] for row in rows]
    if config.packing:
        return _tensors(_packed(docs, config))
    return _tensors(_padded([row[0] for row in docs], config))
