"""The input formats by name (a new format: its module, and one line here)."""

from __future__ import annotations

from dataforge.io.formats.base import InputFormat
from dataforge.io.formats.html import HtmlFormat
from dataforge.io.formats.jsonl import JsonlFormat
from dataforge.io.formats.parquet import ParquetFormat
from dataforge.io.formats.txt import TxtFormat
from dataforge.io.formats.warc import WarcFormat
from dataforge.io.formats.wet import WetFormat

__all__ = ["FORMATS", "format_for_suffix", "input_format"]

FORMATS: dict[str, InputFormat] = {
    fmt.name: fmt
    for fmt in (
        JsonlFormat(),
        ParquetFormat(),
        TxtFormat(),
        WarcFormat(),
        WetFormat(),
        HtmlFormat(),
    )
}


def input_format(name: str) -> InputFormat:
    """The format ``inputs[].format`` names (checked when the source was built)."""
    return FORMATS[name]


def format_for_suffix(path: str) -> str:
    """The input format a file name implies (a format's ``suffixes``).

    Raises:
        ValueError: no known suffix; the message lists the valid ones.
    """
    name = path.lower()
    for fmt in FORMATS.values():
        if fmt.suffixes and name.endswith(fmt.suffixes):
            return fmt.name
    valid = ", ".join(s for fmt in FORMATS.values() for s in fmt.suffixes)
    raise ValueError(f"{path}: unknown input format; valid suffixes: {valid}")
