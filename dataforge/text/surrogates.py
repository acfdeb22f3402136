"""Lone UTF-16 surrogates: Python strings may hold them, UTF-8 (and Arrow) cannot."""

from __future__ import annotations

import re

__all__ = ["LONE_SURROGATE", "has_surrogates", "replace_each_surrogate", "replace_lone_surrogates"]

LONE_SURROGATE = re.compile("[\ud800-\udfff]")
"""Any surrogate code point; in a decoded ``str`` every one of them is unpaired."""


def has_surrogates(text: str) -> bool:
    """Whether ``text`` holds any surrogate code point (one C pass, no regex)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def replace_lone_surrogates(text: str) -> str:
    """Replace unpaired UTF-16 surrogates (e.g. from a JSON ``"\\ud800"`` escape) with U+FFFD.

    Arrow strings must be valid UTF-8, so readers call this before building a batch;
    the clean op then applies its ``invalid_utf8`` policy to the U+FFFD characters.
    Valid surrogate pairs (``"\\ud83d\\ude00"``) are joined into their character.
    """
    if not has_surrogates(text):
        return text
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def replace_each_surrogate(text: str) -> str:
    """Replace every surrogate code point with U+FFFD, pairs included (one U+FFFD each).

    What the tokenizer does before encoding, so that training text and encoded text agree.
    """
    return LONE_SURROGATE.sub("\ufffd", text)
