"""CJK ideographs: which code points get word boundaries and count as Chinese."""

from __future__ import annotations

import re

import numpy as np

__all__ = ["CJK_RANGES", "cjk_mask", "has_cjk"]

# CJK Unified Ideographs (+ Extension A, compatibility ideographs, Extensions B..F and the
# supplement). Kana, Hangul and punctuation are not ideographs and get no boundaries.
CJK_RANGES = ((0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF), (0x20000, 0x2FA1F))
"""Inclusive code point ranges of the CJK ideographs."""
_CJK_CLASS = "".join(f"{chr(lo)}-{chr(hi)}" for lo, hi in CJK_RANGES)
_HAS_CJK = re.compile(f"[{_CJK_CLASS}]")


def has_cjk(text: str) -> bool:
    """True if ``text`` contains a CJK ideograph."""
    return _HAS_CJK.search(text) is not None


def cjk_mask(codepoints: np.ndarray) -> np.ndarray:
    """Boolean mask of the CJK ideographs in an array of code points."""
    mask = np.zeros(codepoints.shape, dtype=bool)
    for lo, hi in CJK_RANGES:
        mask |= (codepoints >= lo) & (codepoints <= hi)
    return mask
