"""Batch sources: what the loop pulls micro-batches from.

The trainer needs three things of its data (:class:`BatchSource`): iterate batches, and
save/restore the position. ``dataforge.loader.build_dataloader`` provides them for real
data (as :class:`LoaderBatchSource`, which makes a corrupt shard one line);
:class:`ListBatchSource` (fixed batches, for tests and the overhead benchmark) and
:class:`SyntheticBatchSource` (random tokens, for throughput runs) are the others.

Batch keys (torch tensors): ``input_ids``, ``labels`` (already shifted: ``labels[:, t]``
is the target at position ``t``; -100 = none), ``attention_mask``, ``position_ids`` and,
for packed rows, ``cu_seqlens`` (int32 boundaries over the flattened rows).
DPO batches carry the same keys prefixed ``chosen_`` and ``rejected_``, and optionally
``ref_chosen_logps``/``ref_rejected_logps``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import torch

from trainer.config import ConfigError, TrainerConfig

if TYPE_CHECKING:  # annotations only: data and objectives are independent layers
    from dataforge.loader.batching import LengthStats
    from trainer.objectives import Objective

__all__ = [
    "BatchSource",
    "ListBatchSource",
    "LoaderBatchSource",
    "SyntheticBatchSource",
    "TokenCoverage",
    "build_batch_source",
    "check_data_vocab",
]

Batch = dict[str, torch.Tensor]


@runtime_checkable
class BatchSource(Protocol):
    """An iterable of batches whose position can be saved and restored.

    ``iter()`` continues from the current position and ends at the end of an epoch; the
    next ``iter()`` starts the next epoch. ``state_dict()`` taken between batches, loaded
    into a fresh source, makes it yield the batches that would have come next.
    """

    def __iter__(self) -> Iterator[Batch]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class ListBatchSource:
    """Fixed batches in order, epoch after epoch."""

    def __init__(self, batches: Sequence[Batch]) -> None:
        if not batches:
            raise ValueError("ListBatchSource needs at least one batch")
        self.batches = list(batches)
        self.epoch, self.index = 0, 0

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self) -> Iterator[Batch]:
        while self.index < len(self.batches):
            self.index += 1
            yield self.batches[self.index - 1]
        self.epoch, self.index = self.epoch + 1, 0

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "index": self.index}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch, self.index = int(state["epoch"]), int(state["index"])


class SyntheticBatchSource:
    """Uniform random tokens, a pure function of (seed, rank, batch index); endless."""

    def __init__(
        self, vocab_size: int, batch_size: int, seq_len: int, seed: int = 0, rank: int = 0
    ) -> None:
        self.vocab_size, self.batch_size, self.seq_len = vocab_size, batch_size, seq_len
        self.seed, self.rank, self.index = seed, rank, 0

    def __iter__(self) -> Iterator[Batch]:
        while True:
            gen = torch.Generator().manual_seed(hash((self.seed, self.rank, self.index)) & 2**62)
            self.index += 1
            ids = torch.randint(self.vocab_size, (self.batch_size, self.seq_len), generator=gen)
            labels = torch.full_like(ids, -100)
            labels[:, :-1] = ids[:, 1:]
            yield {
                "input_ids": ids,
                "labels": labels,
                "attention_mask": torch.ones_like(ids),
                "position_ids": torch.arange(self.seq_len).expand_as(ids).contiguous(),
            }

    def state_dict(self) -> dict[str, Any]:
        return {"index": self.index}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.index = int(state["index"])


TOKENIZING_OPS = ("tokenize", "format_sft", "format_dpo")


def check_data_vocab(stream: str, vocab_size: int) -> None:
    """Refuse shards whose pipeline tokenizer (from the run's ``manifest.json`` next to a
    local ``mds/``) has more ids than the model has embeddings.

    Raises:
        ConfigError: the tokenizer is larger than the model.
    """
    from dataforge.tokenization.hf_tokenizer import tokenizer_vocab_size

    manifest = Path(stream).parent / "manifest.json"
    if "://" in stream or not manifest.is_file():
        return
    try:
        recorded = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return  # not ours to judge here; the loader reads the shards themselves
    pipeline = recorded.get("config") if isinstance(recorded, dict) else None
    stages = pipeline.get("stages") if isinstance(pipeline, dict) else None
    for stage in stages if isinstance(stages, list) else []:
        if not isinstance(stage, dict) or stage.get("op") not in TOKENIZING_OPS:
            continue
        if not isinstance(stage.get("tokenizer"), str) or not stage["tokenizer"]:
            continue
        path = Path(str(pipeline.get("base_dir", "."))) / stage["tokenizer"]
        try:
            ids = tokenizer_vocab_size(path)
        except (OSError, ValueError):
            continue  # moved or deleted since the run: nothing to compare with
        if ids > vocab_size:
            raise ConfigError(
                f"data.loader.streams {stream}: tokenized with {path} ({ids} ids) but the "
                f"model has {vocab_size} embeddings; token ids past the table would fail mid-step"
            )


def build_batch_source(
    config: TrainerConfig, objective: Objective, rank: int, world_size: int
) -> BatchSource:
    """The source ``config.data`` names, for data-parallel rank ``rank`` of ``world_size``.

    Raises:
        ConfigError: the loader section does not fit ``LoaderConfig``, or its mode
            contradicts the stage.
    """
    if config.data.source == "synthetic":
        if not objective.synthetic_data:
            raise ConfigError(
                f"data.source synthetic gives pretraining batches; {type(objective).__name__} "
                "needs the loader"
            )
        return SyntheticBatchSource(
            config.model.vocab_size,
            config.data.batch_size,
            config.data.seq_len,
            seed=config.train.seed,
            rank=rank,
        )
    from dataforge.loader import LoaderConfig, build_dataloader
    from dataforge.typed_config import from_mapping

    raw = dict(config.data.loader)
    mode = objective.loader_mode
    if raw.setdefault("mode", mode) != mode:
        raise ConfigError(f"data.loader.mode {raw['mode']!r} does not match the stage's {mode!r}")
    if raw.get("shift_labels", True) is not True:
        raise ConfigError(
            "data.loader.shift_labels must be true for this trainer (its loss "
            "takes shifted labels; false is for transformers models)"
        )
    raw.setdefault("max_seq_len", config.model.max_seq_len)
    if raw["max_seq_len"] > config.model.max_seq_len:
        raise ConfigError(
            f"data.loader.max_seq_len {raw['max_seq_len']} > model.max_seq_len "
            f"{config.model.max_seq_len}"
        )
    raw.setdefault("vocab_size", config.model.vocab_size)
    if config.distributed.model_parallel:  # the dp group's tp ranks and stages share batches
        raw.setdefault("rank", rank)
        raw.setdefault("world_size", world_size)
    if not isinstance(raw["vocab_size"], int) or raw["vocab_size"] > config.model.vocab_size:
        raise ConfigError(
            f"data.loader.vocab_size {raw['vocab_size']!r}; valid: an integer up to "
            f"model.vocab_size {config.model.vocab_size}"
        )
    loader_config = from_mapping(LoaderConfig, raw, "data.loader")
    for stream in loader_config.streams:
        check_data_vocab(stream.path, config.model.vocab_size)
    try:
        return LoaderBatchSource(build_dataloader(loader_config))
    except (OSError, ValueError) as exc:  # missing, unsafe or corrupt shards; missing columns
        raise ConfigError(f"data.loader: {exc}") from None


class LoaderBatchSource:
    """The dataforge loader as a batch source: a shard found corrupt mid-run (a token id
    past the embeddings, a shard cut while open) ends the run with one line naming the
    shard and sample, instead of a traceback out of the training step."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[Batch]:
        try:
            yield from self.loader
        except ValueError as exc:  # the loader's MDSCorruptError, or an inconsistent sample
            raise ConfigError(f"data.loader: {exc}") from None

    def state_dict(self) -> dict[str, Any]:
        return self.loader.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.loader.load_state_dict(state)

    def close(self) -> None:
        self.loader.close()


LOST_TOKENS_WARNING = 0.01
"""Share of an epoch's tokens that truncated or dropped samples may take before the trainer
warns: a few outliers are expected, more means ``max_seq_len`` or ``long_samples`` does not
fit the data."""


@dataclasses.dataclass(frozen=True)
class TokenCoverage:
    """How many of the data's tokens one epoch of the loader trains on (all ranks)."""

    epoch: int
    stats: LengthStats
    long_samples: str
    max_seq_len: int
    mode: str

    @classmethod
    def of(cls, source: BatchSource) -> TokenCoverage | None:
        """The current epoch's coverage; None for a source other than the loader."""
        if not isinstance(source, LoaderBatchSource):
            return None
        loader = source.loader
        config = loader.config
        return cls(loader.epoch, loader.stats, config.long_samples, config.max_seq_len, config.mode)

    def start_lines(self) -> list[str]:
        """What an epoch trains on, and a warning when more than 1% of the tokens are lost."""
        s = self.stats
        share = s.tokens_used / s.tokens if s.tokens else 1.0
        what = (
            f"{s.split:,} split into {s.pieces:,} pieces"
            if self.long_samples == "split"
            else f"{s.truncated:,} truncated, {s.dropped_long:,} dropped"
        )
        lines = [
            f"data: epoch {self.epoch} trains on {s.tokens_used:,} of the data's {s.tokens:,} "
            f"tokens ({share:.1%}); samples over max_seq_len {self.max_seq_len} "
            f"(data.loader.long_samples {self.long_samples}): {what} of {s.samples:,}"
        ]
        if s.tokens_lost > LOST_TOKENS_WARNING * s.tokens:
            fix = (
                "set long_samples: split to train on every token"
                if self.mode == "pretrain"
                else "a larger max_seq_len or shorter samples keep them"
            )
            lines.append(
                f"warning: {1 - share:.1%} of the data's tokens ({s.tokens_lost:,}) never reach "
                f"the model (data.loader.long_samples {self.long_samples}, max_seq_len "
                f"{self.max_seq_len}); {fix}"
            )
        return lines

    def end_line(self, tokens_seen: int) -> str:
        """Tokens trained on over the run against the tokens of an epoch."""
        s = self.stats
        if self.mode == "dpo":  # both rows of a pair count, so no epoch count
            return (
                f"data: {tokens_seen:,} tokens seen in chosen and rejected rows; an epoch's "
                f"pairs hold {s.tokens_used:,} of the data's {s.tokens:,} (prompt + longer response)"
            )
        epochs = tokens_seen / s.tokens_used if s.tokens_used else 0.0
        return (
            f"data: {tokens_seen:,} tokens seen = {epochs:.3f} epochs of the {s.tokens_used:,} "
            f"tokens an epoch trains on (the data holds {s.tokens:,})"
        )
