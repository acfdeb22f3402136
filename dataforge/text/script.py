"""Chinese script conversion with OpenCC: Traditional <-> Simplified and regional variants.

``convert_script(texts, "t2s")`` converts an Arrow string array with OpenCC's own
conversion configs (phrase-level, not character by character: 頭髮 -> 头发 but 發現 ->
发现, 乾燥 -> 干燥). The names are OpenCC's: ``s2t``/``t2s`` (OpenCC's traditional
standard), ``s2tw``/``tw2s`` (Taiwan), ``s2hk``/``hk2s`` (Hong Kong), ``s2twp``/``tw2sp``
and ``s2hkp``/``hk2sp`` (with regional phrases: 鼠标 <-> 滑鼠), ``t2tw``, ``tw2t``, ``t2hk``,
``hk2t`` (between traditional standards), ``t2jp``/``jp2t`` (Japanese shinjitai).

Only rows holding a CJK ideograph are handed to OpenCC; nulls stay null. OpenCC 1.4.2
passes all 556 pairs of its own test cases (tests/fixtures/opencc_cases.tsv).
"""

from __future__ import annotations

import functools

import pyarrow as pa
import pyarrow.compute as pc

from dataforge.text.cjk import CJK_RANGES

__all__ = ["CONVERSIONS", "check_conversion", "convert_script"]

CONVERSIONS = (
    "t2s",
    "s2t",
    "tw2s",
    "s2tw",
    "hk2s",
    "s2hk",
    "tw2sp",
    "s2twp",
    "hk2sp",
    "s2hkp",
    "t2tw",
    "tw2t",
    "t2hk",
    "hk2t",
    "t2jp",
    "jp2t",
)

# Only rows holding a CJK ideograph can change (RE2 syntax for Arrow).
_HAN = "[" + "".join(f"\\x{{{lo:X}}}-\\x{{{hi:X}}}" for lo, hi in CJK_RANGES) + "]"


def check_conversion(name: str) -> str:
    """Validate a conversion name; returns it.

    Raises:
        ValueError: not one of :data:`CONVERSIONS` (the message lists them).
    """
    if name not in CONVERSIONS:
        raise ValueError(f"conversion {name!r} is not valid; valid: {', '.join(CONVERSIONS)}")
    return name


@functools.cache
def _converter(name: str):
    try:
        import opencc
    except ImportError as exc:  # pragma: no cover - a declared dependency
        raise ImportError("script conversion needs OpenCC: pip install 'opencc==1.4.2'") from exc
    return opencc.OpenCC(f"{name}.json")


def convert_script(texts: pa.Array | pa.ChunkedArray, conversion: str) -> pa.Array:
    """Convert every string of ``texts`` with the OpenCC config ``conversion``.

    Args:
        texts: strings (nulls allowed).
        conversion: one of :data:`CONVERSIONS`.

    Returns:
        A string array of the same length; rows without a CJK ideograph are unchanged.
    """
    check_conversion(conversion)
    if isinstance(texts, pa.ChunkedArray):
        texts = texts.combine_chunks()
    has_han = pc.fill_null(pc.match_substring_regex(texts, pattern=_HAN), False)
    if not pc.any(has_han).as_py():
        return texts
    convert = _converter(conversion).convert
    converted = [convert(t) for t in texts.filter(has_han).to_pylist()]
    return pc.replace_with_mask(texts, has_han, pa.array(converted, pa.string()))
