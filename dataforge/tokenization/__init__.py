"""Jieba + BPE tokenizer: train it, load it, encode and decode losslessly.

``from dataforge.tokenization import Tokenizer; tok = Tokenizer.load("tokenizers/demo")``.
"""

from dataforge.tokenization.tokenizer import FORMAT_VERSION, Tokenizer, read_tokenizer_json
from dataforge.tokenization.train import DEFAULT_ENGINE, TokenizerSpec, load_spec, train_tokenizer

__all__ = [
    "DEFAULT_ENGINE",
    "FORMAT_VERSION",
    "Tokenizer",
    "TokenizerSpec",
    "load_spec",
    "read_tokenizer_json",
    "train_tokenizer",
]
