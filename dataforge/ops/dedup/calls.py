"""What each prepared part sends to the dedup index shards (steps 2-4 of
:mod:`dataforge.ops.dedup.planner`): ``(shard, method, args)`` calls, made per part on
the planner's reading threads and sent in task order."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dataforge.ops.dedup import Dedup
from dataforge.ops.dedup.buckets import key_owners

__all__ = ["Calls", "index_calls", "payload_calls", "signature_calls", "text_hash_calls"]

Calls = list[tuple[int, str, tuple]]
"""What one part sends to the index: ``(shard, method, args)`` in order."""


def index_calls(
    count: int,
    op: Dedup,
    signatures: pa.Array,
    node_keys: np.ndarray,
    copies: np.ndarray | None = None,
) -> Calls:
    """Bucket entries of the records, to the shards that own their bucket keys
    (``copies``: a mask by key of the records left out, copies of a head)."""
    if copies is not None:
        heads = ~copies[node_keys]
        signatures, node_keys = signatures.filter(pa.array(heads)), node_keys[heads]
    entries = op.method.bucket_keys(signatures)
    if len(entries.rows) == 0:
        return []
    per_row = entries.keys.shape[1]
    keys = entries.keys.reshape(-1)
    nodes = np.repeat(node_keys[entries.rows], per_row).astype(np.uint32)
    fps = entries.fingerprints
    fps = None if fps is None else np.repeat(fps, per_row)
    owner = key_owners(keys, count, op.method.key_bits)
    order = np.argsort(owner, kind="stable")
    bounds = np.searchsorted(owner[order], np.arange(count + 1, dtype=np.uint64))
    calls = []
    for shard in range(count):
        sel = order[bounds[shard] : bounds[shard + 1]]
        if len(sel):
            part_fps = None if fps is None else fps[sel]
            calls.append((shard, "add", (keys[sel], nodes[sel], part_fps)))
    return calls


def text_hash_calls(count: int, op: Dedup, hashes: pa.Array, node_keys: np.ndarray) -> Calls:
    """The records' text hashes, to the shards that own them (by hash: a group of equal
    texts is whole on one shard)."""
    valid = pc.is_valid(hashes).to_numpy(zero_copy_only=False)
    values = hashes.filter(pa.array(valid)).to_numpy(zero_copy_only=False)
    nodes = node_keys[valid]
    owner = key_owners(values, count)
    return [
        (shard, "add_text_hashes", (values[owner == shard], nodes[owner == shard]))
        for shard in range(count)
        if (owner == shard).any()
    ]


def payload_calls(count, op, signatures, node_keys, needed, texts=None) -> Calls:
    """Signatures and (with ``texts``: a table of text and lang) the texts of the
    candidate records, to the shards that own them (which shingle them: ``add_texts``)."""
    rows, values = op.method.values(signatures)
    wanted = np.isin(node_keys[rows], needed)
    rows, values = rows[wanted], values[wanted]
    nodes = node_keys[rows]
    picked = None if texts is None or not len(rows) else texts.take(pa.array(rows))
    owner = nodes % count
    calls = []
    for shard in range(count):
        sel = np.flatnonzero(owner == shard)
        if not len(sel):
            continue
        if picked is None:
            calls.append((shard, "add_payload", (nodes[sel], values[sel], None)))
        else:
            calls.append((shard, "add_texts", (nodes[sel], values[sel], picked.take(sel))))
    return calls


def signature_calls(count, op, signatures, node_keys, needed) -> Calls:
    """Signatures of the candidate records to the shards that own them (screening)."""
    rows, values = op.method.values(signatures)
    wanted = np.isin(node_keys[rows], needed)
    nodes, values = node_keys[rows][wanted], values[wanted]
    owner = nodes % count
    return [
        (shard, "add_signatures", (nodes[owner == shard], values[owner == shard]))
        for shard in range(count)
        if (owner == shard).any()
    ]
