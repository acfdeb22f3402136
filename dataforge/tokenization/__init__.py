"""Jieba + BPE tokenizer: train it, load it, encode and decode losslessly.

``from dataforge.tokenization import Tokenizer; tok = Tokenizer.load("tokenizers/demo")``.

The names below load on first use (PEP 562): ``dataforge`` commands that never touch a
tokenizer (``run`` without a ``tokenize`` stage, ``validate``, ``inspect``) import the
package only for its ``cli`` module and skip the tokenizer modules (0.05 s of every command).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dataforge.lazy import lazy_exports

if TYPE_CHECKING:
    from dataforge.tokenization.tokenizer import FORMAT_VERSION, Tokenizer, read_tokenizer_json
    from dataforge.tokenization.train import (
        DEFAULT_ENGINE,
        TokenizerSpec,
        load_spec,
        train_tokenizer,
    )

_HOMES = {
    "FORMAT_VERSION": "dataforge.tokenization.tokenizer",
    "Tokenizer": "dataforge.tokenization.tokenizer",
    "read_tokenizer_json": "dataforge.tokenization.tokenizer",
    "DEFAULT_ENGINE": "dataforge.tokenization.train",
    "TokenizerSpec": "dataforge.tokenization.train",
    "load_spec": "dataforge.tokenization.train",
    "train_tokenizer": "dataforge.tokenization.train",
}

__all__ = [
    "DEFAULT_ENGINE",
    "FORMAT_VERSION",
    "Tokenizer",
    "TokenizerSpec",
    "load_spec",
    "read_tokenizer_json",
    "train_tokenizer",
]
__getattr__ = lazy_exports(__name__, _HOMES)
