"""Chinese script normalization for dedup: traditional -> simplified through OpenCC.

A traditional and a simplified copy of one text share almost no character shingles;
converting both to simplified first (OpenCC's ``t2s`` profile: characters and phrases)
makes them the same text. Only used when ``dedup.normalize.t2s`` is set; the converter is
built once per process.
"""

from __future__ import annotations

import functools

import pyarrow as pa

__all__ = ["to_simplified"]


@functools.lru_cache(maxsize=1)
def _converter():
    try:
        import opencc
    except ImportError as exc:  # a declared dependency; say how to get it
        raise ImportError("dedup normalize.t2s needs OpenCC: pip install opencc") from exc
    return opencc.OpenCC("t2s")


def to_simplified(texts: pa.Array) -> pa.Array:
    """Each text converted to simplified Chinese (others pass unchanged; nulls stay null)."""
    convert = _converter().convert
    return pa.array(
        [None if t is None else convert(t) for t in texts.to_pylist()], type=pa.string()
    )
