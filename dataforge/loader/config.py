"""Loader configuration: one frozen dataclass, validated where it is defined.

The fields that shape the batch plan (everything except the DataLoader plumbing
``num_workers``, ``pin_memory``, ``prefetch_factor``, ``persistent_workers``, ``cache_dir``
and the checks ``vocab_size``, ``verify_hashes``) enter the resume fingerprint, so a checkpoint can only be resumed with the same plan.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, Literal

from dataforge.typed_config import check_choices

__all__ = ["MODES", "MODE_COLUMNS", "LoaderConfig", "StreamSpec"]

LoaderMode = Literal["pretrain", "sft", "dpo"]
MODES: tuple[str, ...] = typing.get_args(LoaderMode)

# Columns a stream must have for each mode (see docs/loader.md for their meaning).
MODE_COLUMNS: dict[str, tuple[str, ...]] = {
    "pretrain": ("tokens", "num_tokens"),
    "sft": ("tokens", "loss_mask", "num_tokens"),
    "dpo": ("prompt_tokens", "chosen_tokens", "rejected_tokens", "num_tokens"),
}


@dataclasses.dataclass(frozen=True)
class StreamSpec:
    """One MDS dataset (a directory with ``index.json``), local or remote.

    Attributes:
        path: a local directory or a remote URL (``s3://``, ``gs://``, ``https://`` ...).
        proportion: relative share of the epoch (all streams or none); with ``epoch_size``.
        repeat: samples of this stream per epoch = ``repeat`` x its size (may be fractional).
        choose: samples of this stream per epoch, absolute.
    """

    path: str
    proportion: float | None = None
    repeat: float | None = None
    choose: int | None = None

    def __post_init__(self) -> None:
        if not self.path:
            raise ValueError("a stream needs a non-empty 'path'")
        given = [k for k in ("proportion", "repeat", "choose") if getattr(self, k) is not None]
        if len(given) > 1:
            raise ValueError(
                f"stream {self.path!r}: give at most one of proportion/repeat/choose, got {given}"
            )
        for key in given:
            if getattr(self, key) < 0:
                raise ValueError(
                    f"stream {self.path!r}: {key} must be >= 0, got {getattr(self, key)}"
                )

    @property
    def is_remote(self) -> bool:
        return "://" in self.path and not self.path.startswith("file://")


@dataclasses.dataclass(frozen=True)
class LoaderConfig:
    """How to turn MDS shards into token-budget batches.

    ``streams`` accepts dicts (``{"path": ..., "proportion": ...}``) or :class:`StreamSpec`;
    they are normalised to a tuple of :class:`StreamSpec`.
    """

    streams: tuple[Any, ...]
    mode: LoaderMode = "pretrain"
    max_tokens: int = 16384
    """Token budget per batch, padding included: rows x padded length (DPO: 2 x pairs x length)."""
    max_seq_len: int = 2048
    """Longest row; longer samples are split, truncated or dropped (``long_samples``)."""
    bucket_boundaries: Any = "auto"
    """``"auto"``: batches are runs of neighbouring lengths in the sorted shuffle buffer (the
    finest bucketing the buffer allows); a list of ints: additionally a batch never mixes
    lengths from different ``(b[i-1], b[i]]`` buckets."""
    packing: bool = False
    """Pack documents into ``max_seq_len`` rows (pretrain and sft; not dpo)."""
    shuffle: bool = True
    seed: int = 0
    shuffle_buffer: int = 32768
    """Samples held in the bounded buffer that batches (and packed rows) are drawn from."""
    shuffle_block_size: int = 1 << 16
    """Samples shuffled together in the read order after the shard order is shuffled."""
    long_samples: Literal["auto", "split", "truncate", "drop"] = "auto"
    """Samples longer than ``max_seq_len``: ``split`` into pieces of ``max_seq_len`` tokens
    (the last one the remainder), each batched or packed as a document of its own, so every
    token is trained on (pretrain only); ``truncate`` keeps the start (DPO: see
    :func:`~dataforge.loader.collate.dpo_truncation`); ``drop`` leaves them out. ``auto``:
    ``split`` in mode pretrain, ``truncate`` in sft and dpo, where a piece of a conversation
    or pair would be a sample it never was."""
    pad_to_multiple_of: int = 1
    pad_id: int = 0
    shift_labels: bool = True
    """True: ``labels[t]`` is the target of position ``t`` (the dataforge trainer). False:
    the transformers convention, ``labels[t] = input_ids[t]`` where that token is a target
    (the model shifts inside its loss); each document's first token is -100, so a packed
    row's previous document never predicts it."""
    epoch_size: int | None = None
    """Samples per epoch when streams use ``proportion`` (default: all samples)."""
    num_workers: int = 0
    pin_memory: bool = False
    prefetch_factor: int | None = None
    persistent_workers: bool = False
    rank: int | None = None
    """None: ``torch.distributed`` rank if initialised, else 0. Set both rank and
    world_size to simulate ranks in one process."""
    world_size: int | None = None
    cache_dir: str | None = None
    """Where per-run stream directories live (default: ``$TMPDIR/dataforge-loader``)."""
    vocab_size: int | None = None
    """Token ids must be below this (the model's embedding rows): a sample holding another
    is an error naming its shard and sample. None: not checked (the trainer sets it)."""
    verify_hashes: bool = True
    """Check each shard against the hashes its index records before first use (sizes,
    headers and sample layouts are always checked)."""

    def __post_init__(self) -> None:
        streams = self.streams
        if isinstance(streams, (dict, StreamSpec, str)):
            streams = [streams]
        if not streams:
            raise ValueError(
                "LoaderConfig.streams: give at least one stream, e.g. [{'path': 'out/demo/mds'}]"
            )
        object.__setattr__(self, "streams", tuple(_stream_spec(s) for s in streams))
        check_choices(self)
        for name in (
            "max_tokens",
            "max_seq_len",
            "shuffle_buffer",
            "shuffle_block_size",
            "pad_to_multiple_of",
        ):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)!r}")
        rows_per_sample = 2 if self.mode == "dpo" else 1
        longest = _round_up(self.max_seq_len, self.pad_to_multiple_of)
        if self.max_tokens < rows_per_sample * longest:
            raise ValueError(
                f"max_tokens={self.max_tokens} cannot hold one {self.mode} sample of max_seq_len="
                f"{self.max_seq_len} (needs >= {rows_per_sample * longest})"
            )
        if self.packing and self.mode == "dpo":
            raise ValueError("packing=True is not supported in mode 'dpo' (pairs are padded rows)")
        object.__setattr__(self, "long_samples", _long_sample_policy(self.long_samples, self.mode))
        object.__setattr__(self, "bucket_boundaries", _boundaries(self.bucket_boundaries))
        if self.num_workers < 0:
            raise ValueError(f"num_workers must be >= 0, got {self.num_workers}")
        if self.prefetch_factor is not None and (self.num_workers == 0 or self.prefetch_factor < 1):
            raise ValueError("prefetch_factor needs num_workers > 0 and a value >= 1")
        if self.persistent_workers and self.num_workers == 0:
            raise ValueError("persistent_workers=True needs num_workers > 0")
        if (self.rank is None) != (self.world_size is None):
            raise ValueError("give both rank and world_size, or neither")
        if self.world_size is not None and not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank {self.rank} outside world_size {self.world_size}")
        weighted = [s.proportion is not None for s in self.streams]
        if any(weighted) and not all(weighted):
            raise ValueError("proportion must be given on all streams or on none")
        if self.vocab_size is not None and (
            not isinstance(self.vocab_size, int) or self.vocab_size < 1
        ):
            raise ValueError(
                f"vocab_size must be a positive integer or None, got {self.vocab_size!r}"
            )
        if self.epoch_size is not None and self.epoch_size < 1:
            raise ValueError(f"epoch_size must be >= 1, got {self.epoch_size}")

    def padded_len(self, length: int) -> int:
        """Row length after rounding up to ``pad_to_multiple_of``."""
        return _round_up(length, self.pad_to_multiple_of)

    def plan_fields(self) -> dict[str, Any]:
        """The fields that determine the batch plan (they enter the resume fingerprint)."""
        skip = {"num_workers", "pin_memory", "prefetch_factor", "persistent_workers", "cache_dir",
                "vocab_size", "verify_hashes"}  # fmt: skip
        out = {}
        for field in dataclasses.fields(self):
            if field.name in skip:
                continue
            value = getattr(self, field.name)
            if field.name == "streams":
                value = [dataclasses.asdict(s) for s in value]
            out[field.name] = value
        return out


def _long_sample_policy(policy: str, mode: str) -> str:
    if policy == "auto":
        return "split" if mode == "pretrain" else "truncate"
    if policy == "split" and mode != "pretrain":
        raise ValueError(
            f"long_samples='split' does not work in mode {mode!r}: a piece of a cut "
            "conversation or pair is not a sample; valid in that mode: 'truncate', 'drop' "
            "('split' is for mode 'pretrain')"
        )
    return policy


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def _stream_spec(raw: Any) -> StreamSpec:
    if isinstance(raw, StreamSpec):
        return raw
    if isinstance(raw, str):
        return StreamSpec(path=raw)
    if not isinstance(raw, dict):
        raise ValueError(
            f"a stream is a dict with 'path' (+ proportion/repeat/choose), got {raw!r}"
        )
    valid = {f.name for f in dataclasses.fields(StreamSpec)}
    unknown = set(raw) - valid
    if unknown:
        raise ValueError(f"unknown stream key(s) {sorted(unknown)}; valid: {sorted(valid)}")
    if "path" not in raw:
        raise ValueError(f"stream {raw!r} lacks 'path'")
    return StreamSpec(**raw)


def _boundaries(raw: Any) -> str | tuple[int, ...]:
    if raw == "auto" or raw is None:
        return "auto"
    if isinstance(raw, str) or not isinstance(raw, (list, tuple)):
        raise ValueError(
            f"bucket_boundaries must be 'auto' or a list of increasing ints, got {raw!r}"
        )
    values = tuple(raw)
    if not values or any(not isinstance(v, int) or v < 1 for v in values):
        raise ValueError(f"bucket_boundaries must be positive ints, got {raw!r}")
    if any(b <= a for a, b in zip(values, values[1:], strict=False)):
        raise ValueError(f"bucket_boundaries must increase strictly, got {raw!r}")
    return values
