"""``tokenize``: add ``tokens`` (Arrow list<int32>) and ``num_tokens`` (int64) to live records.

A record that encodes to no token at all (empty text with neither BOS nor EOS) is dropped
with reason ``tokenize:empty``: an MDS ndarray column cannot hold an empty array.

The tokenizer is loaded once per actor in :meth:`Tokenize.setup`; each batch is encoded
in one call (jieba over the whole batch, one multi-threaded sentencepiece call), and the
ids go straight from numpy into an Arrow list array without per-token Python objects.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from dataforge.ops.base import Mapper, OpContext, set_drop_reasons

if TYPE_CHECKING:
    from dataforge.tokenization import Tokenizer

__all__ = ["Tokenize"]


class Tokenize(Mapper):
    """Encode each live record's text with a trained Jieba + BPE tokenizer."""

    name = "tokenize"

    @dataclasses.dataclass(frozen=True)
    class Config:
        tokenizer: str
        """Tokenizer directory (``dataforge tokenizer train``, or a Hugging Face tokenizer with
        ``tokenizer.json``); relative to the pipeline file."""
        add_bos: bool = False
        """Start every document with ``<bos>``."""
        add_eos: bool = True
        """End every document with ``<eos>`` (the document separator when packing)."""
        num_threads: int = 1
        """sentencepiece threads per actor; actors already use one CPU each."""

        def __post_init__(self) -> None:
            if not self.tokenizer:
                raise ValueError("tokenizer: give the path of a trained tokenizer directory")
            if self.num_threads < 1:
                raise ValueError(f"num_threads must be >= 1: {self.num_threads}")

    def __init__(self, config: Config, context: OpContext | None = None) -> None:
        super().__init__(config, context)
        self._tokenizer: Tokenizer | None = None

    def tokenizer_dir(self) -> Path:
        """The tokenizer directory, resolved against the pipeline's base directory."""
        return self.context.local_path(self.config.tokenizer)

    def validate(self) -> list[str]:
        from dataforge.tokenization.hf_tokenizer import tokenizer_vocab_size

        try:
            tokenizer_vocab_size(self.tokenizer_dir())
        except (FileNotFoundError, ValueError) as exc:
            return [f"tokenize: {exc}"]
        return []

    def setup(self) -> None:
        from dataforge.tokenization.hf_tokenizer import load_tokenizer

        self._tokenizer = load_tokenizer(self.tokenizer_dir(), num_threads=self.config.num_threads)

    @property
    def tokenizer(self) -> Tokenizer:
        """The loaded tokenizer (``setup()`` loads it; used directly if it was not called)."""
        if self._tokenizer is None:
            self.setup()
        return self._tokenizer

    def mds_encodings(self) -> dict[str, str]:
        """uint16 ids while the vocabulary fits (half the bytes), else int32."""
        from dataforge.tokenization.hf_tokenizer import tokenizer_vocab_size

        try:
            vocab_size = tokenizer_vocab_size(self.tokenizer_dir())
        except (FileNotFoundError, ValueError):
            vocab_size = 1 << 16  # unknown here; validate() reports the problem, int32 is safe
        dtype = "uint16" if vocab_size < (1 << 16) else "int32"
        return {"tokens": f"ndarray:{dtype}", "num_tokens": "int"}

    def transform(self, live: pa.Table) -> pa.Table:
        texts = live.column("text").to_pylist()
        texts = ["" if t is None else t for t in texts]
        values, offsets = self.tokenizer.encode_batch_flat(
            texts, add_bos=self.config.add_bos, add_eos=self.config.add_eos
        )
        tokens = pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(values))
        num_tokens = pa.array(np.diff(offsets), pa.int64())
        for name, column in (("tokens", tokens), ("num_tokens", num_tokens)):
            if name in live.column_names:
                live = live.drop_columns([name])
            live = live.append_column(pa.field(name, column.type), column)
        empty = np.diff(offsets) == 0
        if empty.any():
            live = set_drop_reasons(live, ["tokenize:empty" if e else None for e in empty.tolist()])
        return live
