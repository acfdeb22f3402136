"""Candidate pairs from bucket entries, and routing of edges to the shards that own them.

Node keys are integers below ``2^31``; node ``x`` is owned by shard ``x % shards``. Every
bucket (documents that share a key) gives candidate pairs: each member with up to
``max_partners`` members before it in key order. A bucket of up to ``max_partners + 1``
documents gives all its pairs (a member whose nearest bucket-mate is not the smallest one
is still compared with it); a huge bucket (10^5 exact copies) costs ``max_partners`` pairs
per member, not 10^10, and every member is still paired with the smallest one. Buckets
with the same members give the same pairs: only the first is expanded (the ``b`` MinHash
bands of ``k`` exact copies are ``b`` such buckets: ``max_partners * k`` pairs, not ``b``
times that before the pairs are made unique).
"""

from __future__ import annotations

import numpy as np

from dataforge.ops.dedup.shingles import mix64

__all__ = [
    "MAX_NODE",
    "bucket_pair_edges",
    "kept_key_bits",
    "key_owners",
    "packed_bucket_pair_edges",
    "repeated_buckets",
    "route_edges",
    "route_packed",
    "unpack_edges",
]

MAX_NODE = (1 << 31) - 1


def bucket_pair_edges(
    bucket_keys: np.ndarray,
    nodes: np.ndarray,
    max_partners: int = 1,
    ordered: bool = False,
    packed: bool = False,
) -> np.ndarray:
    """Pairs ``(node, earlier member)`` of every bucket with 2+ nodes: each member with the
    smallest member and the ``max_partners - 1`` members just before it (``ordered``: the
    entries are already sorted by key, then node).

    Returns:
        ``(k, 2)`` int64 array, sorted, unique, larger node first; never a self loop
        (``packed``: the same pairs as one int64 each, ``larger << 32 | smaller``).
    """
    if len(nodes) == 0:
        return np.zeros(0, np.int64) if packed else np.zeros((0, 2), dtype=np.int64)
    nodes = nodes.astype(np.int64, copy=False)
    keys = bucket_keys
    if not ordered:
        order = np.lexsort((nodes, bucket_keys))
        keys, nodes = bucket_keys[order], nodes[order]
        del order
    starts = np.flatnonzero(np.concatenate([[True], keys[1:] != keys[:-1]]))
    sizes = np.diff(np.append(starts, len(keys)))
    repeated = repeated_buckets(nodes, starts, sizes)
    if repeated.any():
        nodes, sizes = nodes[np.repeat(~repeated, sizes)], sizes[~repeated]
        starts = np.cumsum(sizes) - sizes
    # Buckets in chunks of about _PAIR_CHUNK entries, their pairs packed one per int64 and
    # made unique per chunk: the transient is a chunk's pairs, not max_partners copies of
    # every entry as (k, 2) rows (3 GB for 13M entries).
    pieces = [np.zeros(0, np.int64)]
    ends = np.cumsum(sizes)
    cut = np.searchsorted(ends, np.arange(_PAIR_CHUNK, len(nodes), _PAIR_CHUNK)) + 1
    bounds = np.unique(np.concatenate([[0], cut, [len(sizes)]])).tolist()
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        first, stop = int(ends[lo] - sizes[lo]), int(ends[hi - 1])
        pieces.append(_chunk_pairs(nodes[first:stop], sizes[lo:hi], max_partners))
        pending = sum(len(p) for p in pieces[1:])
        if pending > max(_PAIR_CHUNK, len(pieces[0])):  # the other bands' repeats: merged
            pieces = [np.unique(np.concatenate(pieces))]
    pairs = np.unique(np.concatenate(pieces)) if len(pieces) > 1 else pieces[0]
    return pairs if packed else _unpack(pairs)


_PAIR_CHUNK = 1 << 20
"""Bucket entries whose pairs are made at once (a bucket is never split)."""


def _chunk_pairs(nodes: np.ndarray, sizes: np.ndarray, max_partners: int) -> np.ndarray:
    """The distinct pairs of whole buckets (``nodes`` sorted within each, ``sizes``
    entries each), packed ``larger << 32 | smaller``; no self loops."""
    starts = np.cumsum(sizes) - sizes
    first = np.repeat(starts, sizes)
    local = np.arange(len(nodes)) - first
    pieces = [(nodes << 32 | nodes[first])[local > 0]]
    for back in range(1, max_partners):
        idx = np.flatnonzero(local > back)  # partner i - back exists and is not the first
        pieces.append(nodes[idx] << 32 | nodes[idx - back])
    pairs = np.unique(np.concatenate(pieces))
    return pairs[(pairs >> 32) != (pairs & 0xFFFFFFFF)]


def _unpack(packed: np.ndarray) -> np.ndarray:
    return np.stack([packed >> 32, packed & 0xFFFFFFFF], axis=1)


def repeated_buckets(nodes: np.ndarray, starts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Per bucket (``nodes[starts[i]:starts[i] + sizes[i]]``, each sorted), whether an
    earlier bucket has exactly the same members. Buckets of 2+ members are grouped by size
    and a sum of their members' mixed keys, then compared member by member."""
    repeated = np.zeros(len(starts), dtype=bool)
    multi = np.flatnonzero(sizes > 1)
    if len(multi) < 2:
        return repeated
    total = np.zeros(len(nodes) + 1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        np.cumsum(mix64(nodes), out=total[1:])
        digest = total[starts[multi] + sizes[multi]] - total[starts[multi]]
    del total
    order = np.lexsort((multi, digest, sizes[multi]))
    digest, size, bucket = digest[order], sizes[multi][order], multi[order]
    same = (digest[1:] == digest[:-1]) & (size[1:] == size[:-1])
    if not same.any():
        return repeated
    # Each bucket of a run of equal digests against the run's first bucket.
    head = bucket[np.maximum.accumulate(np.where(np.append(False, same), 0, np.arange(len(order))))]
    check = np.flatnonzero(np.append(False, same))
    todo, head = bucket[check], head[check]
    step = np.arange(sizes[todo].sum()) - np.repeat(
        np.cumsum(sizes[todo]) - sizes[todo], sizes[todo]
    )
    mine = nodes[np.repeat(starts[todo], sizes[todo]) + step]
    theirs = nodes[np.repeat(starts[head], sizes[todo]) + step]
    differs = np.repeat(np.arange(len(todo)), sizes[todo])[mine != theirs]
    equal = np.ones(len(todo), dtype=bool)
    equal[differs] = False
    repeated[todo[equal]] = True
    return repeated


def packed_bucket_pair_edges(packed: np.ndarray, max_partners: int = 1) -> np.ndarray:
    """:func:`bucket_pair_edges` for entries packed as ``key << 32 | node`` (uint32 each),
    its pairs packed too (``larger << 32 | smaller``, one int64 each).

    Sorts ``packed`` in place (no argsort, no gathered copies: the memory peak is the
    entries plus two uint32 views) and keeps only buckets with 2+ entries before building
    edges.
    """
    if len(packed) < 2:
        return np.zeros(0, dtype=np.int64)
    packed.sort()
    keys = (packed >> np.uint64(32)).astype(np.uint32)
    same = keys[1:] == keys[:-1]
    del keys
    in_bucket = np.zeros(len(packed), dtype=bool)
    in_bucket[1:] |= same
    in_bucket[:-1] |= same
    entries = packed[in_bucket]
    del in_bucket, same
    keys = (entries >> np.uint64(32)).astype(np.uint32)
    nodes = (entries & np.uint64(0xFFFFFFFF)).astype(np.int64)
    del entries
    return bucket_pair_edges(keys, nodes, max_partners, ordered=True, packed=True)


def unique_edges(edges: np.ndarray) -> np.ndarray:
    """Sorted unique rows; node keys fit 31 bits, so a row packs into one int64 (1-D
    ``np.unique`` is far faster than ``axis=0``)."""
    if len(edges) == 0:
        return np.zeros((0, 2), dtype=np.int64)
    return _unpack(np.unique((edges[:, 0].astype(np.int64) << 32) | edges[:, 1].astype(np.int64)))


def kept_key_bits(keys: np.ndarray, key_bits: int = 64) -> np.ndarray:
    """The bits of each bucket key an index shard keeps: the high ``key_bits`` (MinHash: 32;
    the rest zero). They are the bucket, and they choose its shard (:func:`key_owners`)."""
    keys = np.asarray(keys, dtype=np.uint64)
    if key_bits == 64:
        return keys
    return keys & np.uint64(((1 << key_bits) - 1) << (64 - key_bits))


def key_owners(keys: np.ndarray, shards: int, key_bits: int = 64) -> np.ndarray:
    """The shard that owns each bucket key, chosen from the bits a shard keeps: a bucket
    then holds the same entries, and gives the same candidate pairs, whatever the shard
    count."""
    keys = np.asarray(keys, dtype=np.uint64)
    return (keys >> np.uint64(64 - key_bits)) % np.uint64(shards)


def route_edges(edges: np.ndarray, shards: int) -> list[np.ndarray]:
    """``(k, 2)`` edges split by the owner of their first node, each in both directions
    (so each side's owner sees it) and packed ``first << 32 | second`` in one int64
    (:func:`unpack_edges`): :func:`route_packed` of the packed edges."""
    edges = edges.reshape(-1, 2).astype(np.int64, copy=False)  # packs into 64 bits below
    return route_packed(edges[:, 0] << 32 | edges[:, 1], shards)


def route_packed(packed: np.ndarray, shards: int) -> list[np.ndarray]:
    """Edges packed ``first << 32 | second`` (int64), each in both directions, split by
    the owner of the first node (a mask per shard: no doubled copy, no argsort)."""
    packed = np.asarray(packed, np.int64)
    out = []
    for shard in range(shards):
        mine = packed[(packed >> 32) % shards == shard]
        theirs = packed[(packed & 0xFFFFFFFF) % shards == shard]
        out.append(np.concatenate([mine, (theirs & 0xFFFFFFFF) << 32 | theirs >> 32]))
    return out


def unpack_edges(packed: np.ndarray) -> np.ndarray:
    """``(k, 2)`` rows of edges packed ``first << 32 | second`` (nodes below 2^31)."""
    return _unpack(np.asarray(packed, np.int64))
