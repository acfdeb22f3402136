"""The ``clean`` op: Unicode, markup and whitespace normalization of the text column.

Cleaning itself is :func:`dataforge.text.clean.clean_text` (the steps are listed there);
this op applies it to the live records and accounts for what it removes.

With ``convert`` (OpenCC script conversion, step 8 of ``clean_text``) the number of
records the conversion changed is counted as the event ``convert:<name>``.

Drop reasons: ``empty`` (nothing left after cleaning), ``invalid_utf8`` (the record holds
U+FFFD and ``invalid_utf8: drop``). The number of U+FFFD characters found in a record is
stored as ``meta.invalid_chars`` (when > 0) unless the record is dropped for it.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dataforge.ops.base import Mapper, set_drop_reasons
from dataforge.records import with_meta
from dataforge.text.clean import REPLACEMENT_CHAR, CleanConfig, clean_text
from dataforge.text.script import convert_script

__all__ = ["Clean"]


class Clean(Mapper):
    """Normalize Unicode, strip markup and control characters, tidy whitespace."""

    name: ClassVar[str] = "clean"
    Config = CleanConfig

    def transform(self, live: pa.Table) -> pa.Table:
        text = pc.fill_null(live.column("text").combine_chunks(), "")
        invalid = pc.count_substring(text, REPLACEMENT_CHAR).to_numpy(False)
        cleaned = self._clean_and_convert(text)
        is_empty = pc.equal(pc.utf8_length(cleaned), 0).to_numpy(False)
        reasons = np.full(live.num_rows, None, dtype=object)
        reasons[is_empty] = "empty"
        if self.config.invalid_utf8 == "drop":
            reasons[invalid > 0] = "invalid_utf8"
        elif invalid.any():
            live = with_meta(live, "invalid_chars", [int(n) if n else None for n in invalid])
        dropped = np.flatnonzero(reasons != None)  # noqa: E711 - elementwise on object array
        if len(dropped):
            cleaned = pc.if_else(pa.array(reasons != None), "", cleaned)  # noqa: E711
        live = live.set_column(live.schema.get_field_index("text"), "text", cleaned)
        if len(dropped):
            live = set_drop_reasons(live, reasons.tolist())
        return live

    def _clean_and_convert(self, text: pa.Array) -> pa.Array:
        """``clean_text``, with its last step (script conversion) run here to count it."""
        conversion = self.config.convert
        if conversion is None:
            return clean_text(text, self.config)
        cleaned = clean_text(text, dataclasses.replace(self.config, convert=None))
        converted = convert_script(cleaned, conversion)
        self.events[f"convert:{conversion}"] += (
            pc.sum(pc.not_equal(converted, cleaned)).as_py() or 0
        )
        return converted
