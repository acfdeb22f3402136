"""The error every config reader raises, and the quoting its messages use."""

from __future__ import annotations

import reprlib
from typing import Any

__all__ = ["MAX_MESSAGE_CHARS", "ConfigError", "check_range", "short_repr"]

MAX_MESSAGE_CHARS = 600
"""A config error is one line; a key or value quoted in it never makes it longer."""
_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = _REPR.maxlong = 120
_REPR.maxlevel = 4


def short_repr(value: Any, limit: int = 200) -> str:
    """``repr(value)`` cut to ``limit`` characters (nested containers and long strings
    abbreviated with ``...``), for quoting a config value in an error."""
    text = _REPR.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_range(key: str, value: float | None, low: float, high: float | None = None) -> None:
    """For ``__post_init__`` rules: raise ``ValueError`` naming ``key`` and its valid range
    if ``value`` (None: unset) lies outside ``[low, high]``."""
    if value is None or (low <= value and (high is None or value <= high)):
        return
    valid = f"{low} to {high}" if high is not None else f">= {low}"
    raise ValueError(f"{key}={short_repr(value)}; valid range: {valid}")


class ConfigError(ValueError):
    """A config file (or override) that does not describe a valid configuration.

    The message is made one line of at most :data:`MAX_MESSAGE_CHARS` characters."""

    def __init__(self, message: str) -> None:
        line = " ".join(str(message).split("\n"))
        if len(line) > MAX_MESSAGE_CHARS:
            line = line[: MAX_MESSAGE_CHARS - 3] + "..."
        super().__init__(line)
