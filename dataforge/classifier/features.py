"""Documents -> fastText input lines, identical at training and scoring time.

Each document is normalized line by line as CCNet does
(:func:`dataforge.text.normalize.normalize_documents`: lowercase, accents stripped, digits
to 0, punctuation to ASCII), Chinese runs are split into words by the project's jieba
engine (:class:`dataforge.tokenization.segment.Segmenter`), and the lines are joined with
spaces, because fastText reads one example per line.
"""

from __future__ import annotations

from collections.abc import Sequence

from dataforge.classifier import LANGS
from dataforge.text.normalize import NORMALIZATION, normalize_documents
from dataforge.tokenization.segment import MARKER, Segmenter

__all__ = ["FEATURES", "LANGS", "FeatureMaker"]

FEATURES = f"{NORMALIZATION}+jieba-words"
"""Recorded in the model card; the op refuses a model whose card names other features."""
MAX_CHARS = 100_000
"""Characters of a document that are scored: enough for any quality judgement, and it
bounds the cost of one pathological document."""


class FeatureMaker:
    """Builds fastText input lines for documents of one language setting.

    Args:
        lang: ``zh`` or ``auto`` segment text containing CJK ideographs with jieba (``auto``
            suits mixed corpora; both only touch CJK runs); ``en`` never segments.
        engine: the jieba engine (``rjieba`` or ``jieba``).
    """

    def __init__(self, lang: str = "auto", engine: str = "rjieba") -> None:
        if lang not in LANGS:
            raise ValueError(f"lang {lang!r}; valid: {', '.join(LANGS)}")
        self.lang = lang
        self.engine = engine
        self._segmenter: Segmenter | None = None

    def lines(self, texts: Sequence[str | None]) -> list[str]:
        """One fastText input line (no label) per text; an empty text gives ``""``."""
        clipped = [(t or "")[:MAX_CHARS].replace(MARKER, " ") for t in texts]
        lines, counts = normalize_documents(clipped)
        docs, start = [], 0
        for n in counts:
            docs.append(" ".join(line for line in lines[start : start + n] if line))
            start += n
        if self.lang != "en":
            if self._segmenter is None:
                self._segmenter = Segmenter(self.engine)
            docs = [d.replace(MARKER, " ") for d in self._segmenter.mark_batch(docs)]
        # fastText splits on whitespace and treats \v \f \r as line ends: keep one line.
        return [" ".join(d.split()) for d in docs]
