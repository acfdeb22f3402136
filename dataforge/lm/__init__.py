"""KenLM perplexity models: CCNet normalization, training (lmplz), document scoring.

Heavy modules (kenlm, the tokenizer) load only when a scorer or a training run needs them;
the names below load on first use (PEP 562), so that ``dataforge`` commands that register
the ``lm`` subcommand but never score import none of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dataforge.lazy import lazy_exports

if TYPE_CHECKING:
    from dataforge.lm.card import ModelCard, read_card, write_card
    from dataforge.lm.score import PerplexityScorer, perplexity
    from dataforge.lm.train import find_kenlm_tool, train_lm
    from dataforge.text.normalize import (
        NORMALIZATION,
        normalize_documents,
        normalize_line,
        normalize_lines,
    )

_HOMES = {
    "ModelCard": "dataforge.lm.card",
    "read_card": "dataforge.lm.card",
    "write_card": "dataforge.lm.card",
    "PerplexityScorer": "dataforge.lm.score",
    "perplexity": "dataforge.lm.score",
    "find_kenlm_tool": "dataforge.lm.train",
    "train_lm": "dataforge.lm.train",
    "NORMALIZATION": "dataforge.text.normalize",
    "normalize_documents": "dataforge.text.normalize",
    "normalize_line": "dataforge.text.normalize",
    "normalize_lines": "dataforge.text.normalize",
}

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
__getattr__ = lazy_exports(__name__, _HOMES)
