"""KenLM perplexity models: CCNet normalization, training (lmplz), document scoring.

Heavy modules (kenlm, the tokenizer) load only when a scorer or a training run needs them.
"""

from dataforge.lm.card import ModelCard, read_card, write_card
from dataforge.lm.score import PerplexityScorer, perplexity
from dataforge.lm.train import find_kenlm_tool, train_lm
from dataforge.text.normalize import (
    NORMALIZATION,
    normalize_documents,
    normalize_line,
    normalize_lines,
)

__all__ = [
    "NORMALIZATION",
    "ModelCard",
    "PerplexityScorer",
    "find_kenlm_tool",
    "normalize_documents",
    "normalize_line",
    "normalize_lines",
    "perplexity",
    "read_card",
    "train_lm",
    "write_card",
]
