"""Document perplexity under a KenLM model, CCNet-style, over a batch of documents.

A document is split on ``"\\n"``; every line is normalized (:mod:`dataforge.text.normalize`)
and tokenized (as the model card's segmentation says, :mod:`dataforge.lm.tokens`); KenLM
scores each line as a sentence (with ``<s>`` and ``</s>``), and

    ppl(doc) = 10 ** (-sum(log10 p(line)) / sum(tokens(line) + 1))

(the ``+ 1`` is ``</s>``), as CCNet's ``DocLM``. Unlike CCNet's DocLM, lines that are
empty after normalization are skipped instead of scored as ``<s> </s>``: blank lines carry
no text, and scoring them would lower the perplexity of documents with many blank lines.
A document with no non-empty line has no perplexity (NaN).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from dataforge.lm import native as native_ids
from dataforge.lm.card import read_card
from dataforge.lm.tokens import (
    CharRenderer,
    PieceTokenizer,
    TokenRenderer,
    load_encoder,
    make_renderer,
)
from dataforge.text.normalize import normalize_documents

__all__ = ["DocumentScores", "PerplexityScorer", "perplexity"]


def perplexity(log10_prob: np.ndarray, length: np.ndarray) -> np.ndarray:
    """CCNet's ``pp``: ``10 ** (-log10_prob / length)``; NaN where ``length == 0``."""
    log10_prob = np.asarray(log10_prob, np.float64)
    length = np.asarray(length, np.float64)
    out = np.full(log10_prob.shape, np.nan)
    nonzero = length > 0
    out[nonzero] = 10.0 ** (-log10_prob[nonzero] / length[nonzero])
    return out


class DocumentScores:
    """Per-document results of :meth:`PerplexityScorer.score_documents`.

    Attributes:
        log10_prob: sum of line log10 probabilities (float64).
        length: sum over scored lines of ``tokens + 1`` (int64; 0 for empty documents).
        ppl: perplexity (NaN for empty documents).
    """

    def __init__(self, log10_prob: np.ndarray, length: np.ndarray) -> None:
        self.log10_prob = log10_prob
        self.length = length
        self.ppl = perplexity(log10_prob, length)


class PerplexityScorer:
    """A KenLM model plus the tokenizer it was trained with; load once per actor.

    Args:
        model_path: KenLM binary (or ARPA) file.
        tokenizer: the encoder whose ids the model was trained on (for a model card's
            segmentation, :func:`dataforge.lm.tokens.load_encoder` gives it; or use
            :meth:`for_model`).
        native: score token ids in C++ (:mod:`dataforge.lm.native`): None (default)
            where the extension is built, False never (strings through
            ``kenlm.Model.score``; the same values), True always (RuntimeError if it is
            not built). Not used for the ``chars`` segmentation.

    Raises:
        FileNotFoundError: no model file; OSError: KenLM cannot read it.
    """

    def __init__(
        self,
        model_path: str | Path,
        tokenizer: PieceTokenizer | CharRenderer,
        *,
        native: bool | None = None,
    ) -> None:
        path = Path(model_path)
        if not path.is_file():
            raise FileNotFoundError(f"KenLM model {path} not found")
        self.path = path
        self.renderer = make_renderer(tokenizer)
        self._model = None
        # Token ids scored in C++ (dataforge.lm.native) where the extension is built;
        # the chars segmentation has no ids and always scores strings.
        use_ids = isinstance(self.renderer, TokenRenderer) and (
            native or (native is None and native_ids.available())
        )
        self.ids: native_ids.IdScorer | None = (
            native_ids.IdScorer(path, tokenizer.vocab_size) if use_ids else None
        )
        if self.ids is None:
            self.model  # noqa: B018 - load now: a bad model fails here, not at the first batch

    @property
    def model(self):
        """The ``kenlm.Model`` (loaded on first use where ids are scored natively)."""
        if self._model is None:
            import kenlm  # deferred: only actors that score need the extension

            # Default load method POPULATE_OR_READ: mmap and pre-fault the pages, as CCNet.
            self._model = kenlm.Model(str(self.path))
        return self._model

    @classmethod
    def for_model(
        cls, model_path: str | Path, tokenizer: str | Path | PieceTokenizer | None = None
    ) -> PerplexityScorer:
        """A scorer that tokenizes as the model's card says (segmentation, tokenizer dir).

        Args:
            model_path: KenLM model with its card beside it.
            tokenizer: tokenizer directory (or loaded tokenizer) to use instead of the one
                the card names; it must have the card's fingerprint.

        Raises:
            FileNotFoundError, ValueError: missing model, card or tokenizer files; a
                tokenizer that is not the one the model was trained with.
        """
        card = read_card(model_path)
        if tokenizer is None and card.tokenizer_path:
            tokenizer = Path(model_path).parent / card.tokenizer_path
        encoder = load_encoder(tokenizer, card.segmentation)
        if encoder.fingerprint != card.tokenizer_fingerprint:
            raise ValueError(
                f"{model_path}: tokenizer {tokenizer} is not the one the model was trained with"
            )
        return cls(model_path, encoder)

    def score_documents(self, texts: Sequence[str]) -> DocumentScores:
        """Score whole documents (see the module docstring for the formula)."""
        lines, counts = normalize_documents(texts)
        doc_of_line = np.repeat(np.arange(len(texts)), counts)
        non_empty = np.fromiter(map(bool, lines), bool, count=len(lines))
        kept = [line for line in lines if line]
        # A line's score depends on the line alone: each distinct line is tokenized and
        # scored once (boilerplate, repeated headers: 3-13% of the demo's lines).
        distinct = list(dict.fromkeys(kept))
        line_log10, num_tokens = self.score_lines(distinct)
        if len(distinct) < len(kept):
            position = {line: i for i, line in enumerate(distinct)}
            of_line = np.fromiter(map(position.__getitem__, kept), np.int64, count=len(kept))
            line_log10, num_tokens = line_log10[of_line], num_tokens[of_line]
        owners = doc_of_line[non_empty]
        log10_prob = np.bincount(owners, weights=line_log10, minlength=len(texts))
        length = np.bincount(owners, weights=num_tokens + 1, minlength=len(texts)).astype(np.int64)
        return DocumentScores(log10_prob, length)

    def score_lines(self, lines: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """log10 probability and token count of normalized, non-empty lines: ids scored
        natively where the extension is built, else rendered strings through KenLM."""
        if self.ids is not None:
            ids, offsets = self.renderer.encode(lines)  # checks the ids' range
            return self.ids.score(ids, offsets, checked=True), np.diff(offsets)
        sentences, num_tokens = self.renderer.render(lines)
        return self.score_sentences(sentences), num_tokens

    def score_sentences(self, sentences: Sequence[str]) -> np.ndarray:
        """log10 probability of pre-tokenized sentences (bos and eos included)."""
        return np.fromiter(map(self.model.score, sentences), np.float64, count=len(sentences))
