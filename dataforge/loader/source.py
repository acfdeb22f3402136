"""Samples by global id over checked shards, with ``streaming.StreamingDataset`` as the
sample-id space and its /dev/shm state isolated per run and cleaned up after a crash.

StreamingDataset registers its local directories in shared memory and refuses a local
directory that a live (or crashed, killed -9) dataset registered before. Every run
therefore gets its own local directory ``<cache_dir>/<run_id>/stream<i>``, holding a
checked copy of the stream's ``index.json`` and the shards this run inflated or downloaded
(:mod:`dataforge.loader.shard_files`, the only reader of shard bytes: streaming never
reads or writes a shard). An ``owner.json`` there names the process and the shm
prefix; a later run removes the directories of dead owners and unlinks exactly their shm
segments (after checking that the segment still lists the dead run's directories) — never
another live job's, unlike ``streaming``'s global ``clean_stale_shared_memory()``.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import sys
import tempfile
import uuid
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np

from dataforge.io.mds import MDSCorruptError, decode_sample, int_column
from dataforge.io.streaming_shm import (
    close_segments,
    dataset_segments,
    dataset_shm_prefix,
    release_created_shm,
    shm_locals,
    unlink_shm,
)
from dataforge.loader.config import MODE_COLUMNS, LoaderConfig
from dataforge.loader.order import Layout
from dataforge.loader.shard_files import ShardReader, StreamFiles

__all__ = ["StreamSource", "cleanup_dead_runs", "default_cache_dir"]

log = logging.getLogger(__name__)

_PRODUCER = {"pretrain": "the tokenize op", "sft": "the format_sft op", "dpo": "the format_dpo op"}
TOKEN_COLUMNS = ("tokens", "prompt_tokens", "chosen_tokens", "rejected_tokens")
MAX_OPEN_SHARDS = 64
"""Shard files a process keeps open (least recently used closed first): far below the
usual 1024 descriptors, and enough for a shuffle block that spans many shards."""
_DECODE_ERRORS = (ValueError, TypeError, IndexError, KeyError, UnicodeDecodeError, StopIteration)


def default_cache_dir() -> Path:
    return Path(tempfile.gettempdir()) / "dataforge-loader"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _unlink_run_shm(prefix_int: int, run_dir: Path) -> int:
    """Unlink the shm segments of ``prefix_int`` if they belong to ``run_dir``; returns count."""
    their_locals = shm_locals(prefix_int)
    if not their_locals or not all(Path(p).is_relative_to(run_dir) for p in their_locals):
        return 0  # the prefix was reused by another live dataset: not ours to remove
    return unlink_shm(prefix_int)


def cleanup_dead_runs(cache_dir: Path) -> int:
    """Remove run directories (and their shm) whose owning process on this host is gone.

    Returns:
        the number of run directories removed.
    """
    if not cache_dir.is_dir():
        return 0
    cache_dir = cache_dir.resolve()  # shm segments list resolved run directories
    removed = 0
    host = socket.gethostname()
    for owner_file in sorted(cache_dir.glob("*/owner.json")):
        try:
            owner = json.loads(owner_file.read_text())
        except (OSError, ValueError) as exc:
            log.warning("unreadable loader run marker %s: %s", owner_file, exc)
            continue
        if owner.get("host") != host or _pid_alive(int(owner["pid"])):
            continue
        run_dir = owner_file.parent
        if run_dir.is_symlink() or run_dir.parent != cache_dir:
            continue  # never made by a loader run: not ours to remove
        if owner.get("shm_prefix") is not None:
            n = _unlink_run_shm(int(owner["shm_prefix"]), run_dir)
            log.info("removed %d stale shm segments of dead loader run %s", n, run_dir.name)
        shutil.rmtree(run_dir, ignore_errors=True)  # ours: a loader's owner.json, no link
        removed += 1
    return removed


class StreamSource:
    """The streams of one loader as a single random-access sample space."""

    def __init__(self, config: LoaderConfig, run_id: str | None = None, owner: bool = True) -> None:
        self.config = config
        cache_dir = Path(config.cache_dir) if config.cache_dir else default_cache_dir()
        cache_dir.mkdir(parents=True, exist_ok=True)
        cleanup_dead_runs(cache_dir)
        self.run_dir = (cache_dir / (run_id or f"{os.getpid()}-{uuid.uuid4().hex[:8]}")).resolve()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        # The owner (the process, or local rank 0 of a distributed run) marks and removes the dir.
        self._owner = owner
        self._pid = os.getpid()  # copies in worker processes never close the owner's state
        if self._owner:
            self._write_owner(None)
        self._readers: OrderedDict[int, ShardReader] = OrderedDict()
        try:
            self._open_streams()
            self._check_columns()
        except BaseException:  # an unsafe or corrupt stream: leave no directory or shm
            self.close()
            raise

    def _open_streams(self) -> None:
        from streaming import Stream, StreamingDataset

        self.files = [
            StreamFiles(spec.path, spec.is_remote, self.run_dir / f"stream{i}",
                        self.config.verify_hashes)
            for i, spec in enumerate(self.config.streams)
        ]  # fmt: skip
        # (stream id, index entry) of every shard, in streaming's global shard order.
        self.entries = [
            (i, shard)
            for i, files in enumerate(self.files)
            for shard in files.stage_index()["shards"]
        ]
        # Only the checked index is there: streaming has no remote to download from.
        streams = [Stream(local=str(files.local)) for files in self.files]
        self.dataset = StreamingDataset(streams=streams, shuffle=False, batch_size=1)
        if self._owner:
            self._write_owner(dataset_shm_prefix(self.dataset))
        self.layout = Layout(
            samples_per_shard=np.asarray(self.dataset.samples_per_shard, np.int64),
            shards_per_stream=np.asarray(self.dataset.shards_per_stream, np.int64),
        )
        assert len(self.entries) == len(self.dataset.shards)
        self.index_digests = [self._index_digest(i) for i in range(len(streams))]

    def __getstate__(self) -> dict[str, Any]:
        # Open shard files are per process (a spawned worker opens its own).
        return {**self.__dict__, "_readers": OrderedDict()}

    def _write_owner(self, shm_prefix: int | None) -> None:
        owner = {"pid": os.getpid(), "host": socket.gethostname(), "shm_prefix": shm_prefix}
        tmp = self.run_dir / "owner.json.tmp"
        tmp.write_text(json.dumps(owner))
        tmp.replace(self.run_dir / "owner.json")

    def _index_digest(self, stream_id: int) -> str:
        import hashlib

        return hashlib.sha256(
            (self.run_dir / f"stream{stream_id}" / "index.json").read_bytes()
        ).hexdigest()

    def _check_columns(self) -> None:
        required = MODE_COLUMNS[self.config.mode]
        shard = 0
        for stream_id, spec in enumerate(self.config.streams):
            for reader in self.dataset.shards[
                shard : shard + int(self.layout.shards_per_stream[stream_id])
            ]:
                present = list(getattr(reader, "column_names", []))
                missing = [c for c in required if c not in present]
                if missing:
                    raise ValueError(
                        f"stream {spec.path!r}: shards lack column {missing[0]!r} required by mode "
                        f"{self.config.mode!r} (it needs {', '.join(required)}; the shards have "
                        f"{', '.join(present)}); produce it with {_PRODUCER[self.config.mode]}"
                    )
            shard += int(self.layout.shards_per_stream[stream_id])

    def __len__(self) -> int:
        return self.layout.num_samples

    def get(self, sample_id: int, columns: tuple[str, ...] | None = None) -> dict[str, Any]:
        """Decode one sample by global id (``columns``: only those), from its checked shard.

        Raises:
            MDSCorruptError: the sample does not decode, holds a token id outside
                ``vocab_size``, or its shard changed since it was checked (names both).
        """
        shard_id, index = self.dataset.spanner[int(sample_id)]
        reader = self._reader(shard_id)
        try:
            record = decode_sample(reader.sample(index), reader.layout, columns)
        except MDSCorruptError as exc:
            raise MDSCorruptError(f"{self._where(shard_id)} sample {index}: {exc}") from None
        except _DECODE_ERRORS as exc:
            raise MDSCorruptError(
                f"{self._where(shard_id)} sample {index}: {type(exc).__name__}: {exc}"
            ) from None
        if self.config.vocab_size is not None:
            self._check_token_ids(record, shard_id, index)
        return record

    def _check_token_ids(self, record: dict[str, Any], shard_id: int, index: int) -> None:
        # An id past the embedding table is an IndexError deep in a training step.
        for column in TOKEN_COLUMNS:
            ids = record.get(column)
            if ids is None or not len(ids):
                continue
            low, high = int(np.min(ids)), int(np.max(ids))
            if low < 0 or high >= self.config.vocab_size:
                raise MDSCorruptError(
                    f"{self._where(shard_id)} sample {index}: {column} holds token id "
                    f"{high if high >= self.config.vocab_size else low}, outside the "
                    f"vocabulary of {self.config.vocab_size} ids"
                )

    def _where(self, shard_id: int) -> str:
        stream_id, shard = self.entries[shard_id]
        return f"stream {self.config.streams[stream_id].path!r} shard {shard['raw_data']['basename']!r}"

    def _reader(self, shard_id: int) -> ShardReader:
        """The open reader of a shard, checked on first use in this process."""
        reader = self._readers.get(shard_id)
        if reader is not None:
            self._readers.move_to_end(shard_id)
            return reader
        stream_id, shard = self.entries[shard_id]
        try:
            reader = ShardReader(self.files[stream_id].raw_path(shard), shard)
        except MDSCorruptError as exc:
            raise MDSCorruptError(
                f"stream {self.config.streams[stream_id].path!r}: {exc}"
            ) from None
        self._readers[shard_id] = reader
        if len(self._readers) > MAX_OPEN_SHARDS:
            self._readers.popitem(last=False)[1].close()
        return reader

    def lengths(self, begin: int = 0, end: int | None = None) -> np.ndarray:
        """``num_tokens`` of samples ``[begin, end)``, read straight from the raw MDS bytes
        (no text or token decoding)."""
        end = len(self) if end is None else end
        out = np.zeros(end - begin, np.int64)
        offsets = self.layout.shard_offsets()
        first = int(np.searchsorted(offsets, begin, side="right")) - 1
        for shard_id in range(first, len(self.layout.samples_per_shard)):
            lo, hi = max(begin, offsets[shard_id]), min(end, offsets[shard_id + 1])
            if lo >= end:
                break
            if hi > lo:
                values = self._shard_num_tokens(shard_id)
                out[lo - begin : hi - begin] = values[
                    lo - offsets[shard_id] : hi - offsets[shard_id]
                ]
        return out

    def _shard_num_tokens(self, shard_id: int) -> np.ndarray:
        reader = self._reader(shard_id)
        return int_column(reader.whole(), reader.layout, "num_tokens")

    def __del__(self) -> None:
        # A loader dropped without close(): its shared memory and directory go now, not at
        # exit (a process building loader after loader would run out of descriptors).
        if getattr(self, "_pid", None) == os.getpid() and not sys.is_finalizing():
            self.close()

    def close(self) -> None:
        """Drop the dataset and remove this run's directory (the owner process only)."""
        dataset = getattr(self, "dataset", None)
        if dataset is not None:
            release_created_shm(dataset)  # every rank: the owner alone unlinks (below)
            if self._owner:  # the live dataset holds the prefix: ours, no locals check
                unlink_shm(dataset_shm_prefix(dataset))
            segments = dataset_segments(dataset)
            del self.dataset, dataset
            close_segments(segments)
        while self._readers:
            self._readers.popitem()[1].close()
        if self._owner:
            shutil.rmtree(self.run_dir, ignore_errors=True)  # ours: made by this owner
