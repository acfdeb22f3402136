"""The ``pii`` op: find personal data (:mod:`dataforge.ops.pii_patterns`) and redact,
drop or tag it.

* ``mode: redact`` replaces every span by its kind's token (``<EMAIL>``, ``<PHONE>``,
  ``<ID>``, ``<CARD>``, ``<IP>`` unless ``tokens`` says otherwise);
* ``mode: drop`` drops a record holding any span, reason ``pii:<kind>`` of its first span;
* ``mode: tag`` keeps the text and writes ``meta.pii`` = ``{kind: spans}``.

In every mode the spans found are counted per kind as events ``pii:<kind>`` (the
manifest's ``counts.by_source.<source>.events``), and the records holding any as
``pii:records``.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import ClassVar, Literal

import numpy as np
import pyarrow as pa

from dataforge.ops.base import Mapper, set_drop_reasons
from dataforge.ops.pii_patterns import PII_KINDS, PiiSpan, find_pii
from dataforge.records import with_meta
from dataforge.typed_config import check_choices

__all__ = ["DEFAULT_TOKENS", "Pii", "redact"]

DEFAULT_TOKENS: dict[str, str] = {
    "email": "<EMAIL>",
    "phone_cn": "<PHONE>",
    "phone_intl": "<PHONE>",
    "id_cn": "<ID>",
    "bank_card": "<CARD>",
    "ipv4": "<IP>",
    "ipv6": "<IP>",
}


def redact(text: str, spans: list[PiiSpan], tokens: dict[str, str]) -> str:
    """``text`` with every span replaced by ``tokens[span.kind]``."""
    pieces = []
    pos = 0
    for span in spans:
        pieces.append(text[pos : span.start])
        pieces.append(tokens[span.kind])
        pos = span.end
    pieces.append(text[pos:])
    return "".join(pieces)


class Pii(Mapper):
    """Detect personal data and redact, drop or tag it (see the module docstring)."""

    name: ClassVar[str] = "pii"

    @dataclasses.dataclass(frozen=True)
    class Config:
        mode: Literal["redact", "drop", "tag"] = "redact"
        """What to do with a record holding personal data."""
        kinds: tuple[str, ...] = PII_KINDS
        """Kinds to detect: email, ipv6, id_cn, bank_card, phone_cn, phone_intl, ipv4."""
        tokens: dict[str, str] = dataclasses.field(default_factory=dict)
        """Replacement token per kind for ``redact`` (missing kinds: the defaults)."""

        def __post_init__(self) -> None:
            check_choices(self)
            for key, names in (("kinds", self.kinds), ("tokens", tuple(self.tokens))):
                unknown = sorted(set(names) - set(PII_KINDS))
                if unknown:
                    raise ValueError(
                        f"pii.{key}: unknown kind(s) {unknown}; valid: {', '.join(PII_KINDS)}"
                    )
            if not self.kinds:
                raise ValueError(f"pii.kinds is empty; valid: {', '.join(PII_KINDS)}")

        @property
        def resolved_tokens(self) -> dict[str, str]:
            return {**DEFAULT_TOKENS, **self.tokens}

    def transform(self, live: pa.Table) -> pa.Table:
        cfg = self.config
        tokens = cfg.resolved_tokens
        texts = live.column("text").to_pylist()
        out_texts: list[str] = []
        reasons = np.full(live.num_rows, None, dtype=object)
        tags: list[dict[str, int] | None] = []
        for i, text in enumerate(texts):
            spans = find_pii(text or "", cfg.kinds)
            per_kind = Counter(span.kind for span in spans)
            for kind, n in per_kind.items():
                self.events[f"pii:{kind}"] += n
            if spans:
                self.events["pii:records"] += 1
            tags.append(dict(sorted(per_kind.items())) if spans else None)
            if spans and cfg.mode == "redact":
                out_texts.append(redact(text, spans, tokens))
            else:
                out_texts.append(text)
            if spans and cfg.mode == "drop":
                reasons[i] = f"pii:{spans[0].kind}"
        if cfg.mode == "redact":
            index = live.schema.get_field_index("text")
            return live.set_column(index, "text", pa.array(out_texts, pa.string()))
        if cfg.mode == "tag":
            return with_meta(live, "pii", tags)
        return set_drop_reasons(live, reasons.tolist())
