"""Chinese word boundaries for the BPE model: jieba (or rjieba) segments CJK runs, and a
boundary marker goes between two adjacent CJK characters wherever the segmenter ends a word.

The marker is a sentencepiece user-defined symbol: it is never merged with a neighbour, so
no BPE piece crosses a jieba word boundary, in training and in encoding alike. The
tokenizer removes the marker's id after encoding, so boundaries never reach decoded text.
Boundaries are only placed *between two CJK ideographs*; everything else (English, digits,
spaces, punctuation) is left whole to sentencepiece, which does its own splitting there.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from dataforge.text.cjk import cjk_mask, has_cjk

__all__ = [
    "ENGINES",
    "MARKER",
    "Segmenter",
]

ENGINES = ("jieba", "rjieba")

MARKER = "\ue000"
"""Private-use code point marking a word boundary (a user-defined symbol in the model)."""
_MARKER_CP = ord(MARKER)


def _load_user_dict(path: Path) -> list[tuple[str, int | None, str | None]]:
    """Parse a jieba user dictionary: one ``word [freq] [tag]`` per line."""
    entries = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        parts = line.strip().split()
        if not parts:
            continue
        if len(parts) > 3 or (len(parts) >= 2 and not parts[1].isdigit()):
            raise ValueError(f"{path}:{lineno}: expected 'word [freq] [tag]', got {line!r}")
        freq = int(parts[1]) if len(parts) >= 2 else None
        tag = parts[2] if len(parts) == 3 else None
        entries.append((parts[0], freq, tag))
    return entries


def _make_cut(engine: str, hmm: bool, user_dict: Path | None) -> Callable[[str], list[str]]:
    entries = _load_user_dict(user_dict) if user_dict else []
    if engine == "rjieba":
        import rjieba

        seg = rjieba.Jieba()
        for word, freq, tag in entries:
            seg.add_word(word, freq, tag)
        return lambda text: seg.cut(text, hmm)
    if engine == "jieba":
        import logging

        import jieba

        # A private Tokenizer, so that a user dictionary never leaks into jieba's global one.
        seg = jieba.Tokenizer()
        jieba.setLogLevel(logging.WARNING)
        seg.initialize()
        for word, freq, tag in entries:
            seg.add_word(word, freq, tag)
        return lambda text: seg.lcut(text, HMM=hmm)
    raise ValueError(f"segmentation engine {engine!r}; valid: {', '.join(ENGINES)}")


class Segmenter:
    """Inserts :data:`MARKER` at the segmenter's word boundaries inside CJK runs.

    Args:
        engine: ``jieba`` (the Python reference) or ``rjieba`` (jieba-rs, same dictionary).
        hmm: let the segmenter find out-of-dictionary words with its HMM.
        user_dict: optional jieba-format user dictionary (``word [freq] [tag]`` lines).
    """

    def __init__(self, engine: str = "rjieba", hmm: bool = True, user_dict: Path | None = None):
        self.engine = engine
        self.hmm = hmm
        self.cut = _make_cut(engine, hmm, user_dict)

    def mark_batch(self, texts: Sequence[str]) -> list[str]:
        """Return each text with :data:`MARKER` inserted between CJK words.

        The texts containing CJK are joined with ``\\n`` and segmented in one call; ``\\n`` is a
        hard break for both engines, so the result equals segmenting each text alone (a text's
        boundaries never depend on the batch it came in). The texts must not contain
        :data:`MARKER` themselves (the tokenizer escapes it first).
        """
        out = list(texts)
        idx = [i for i, t in enumerate(texts) if not t.isascii() and has_cjk(t)]
        if not idx:
            return out
        joined = "\n".join(texts[i] for i in idx)
        # Join ALL words with the marker (one C-level join), then delete the markers that do
        # not sit between two CJK ideographs.
        cps = np.frombuffer(MARKER.join(self.cut(joined)).encode("utf-32-le"), np.uint32)
        markers = np.flatnonzero(cps == _MARKER_CP)
        if len(cps) - len(markers) != len(joined):
            raise RuntimeError(f"{self.engine} returned words that do not add up to its input")
        cjk = np.append(cjk_mask(cps), False)  # the pad answers markers[0]-1 == -1 and len+1
        inner = cjk[markers - 1] & cjk[markers + 1]
        keep = np.ones(len(cps), dtype=bool)
        keep[markers[~inner]] = False
        marked = cps[keep].tobytes().decode("utf-32-le")
        # kept marker i sits before joined[markers[i] - i]
        cuts = (markers - np.arange(len(markers)))[inner]
        lengths = np.fromiter((len(texts[i]) for i in idx), np.int64, count=len(idx))
        starts = np.concatenate([[0], np.cumsum(lengths + 1)[:-1]])
        ends = starts + lengths
        # A cut is never at a text's first or last position (its neighbour is \n), so the
        # number of markers before a position shifts it exactly.
        new_starts = starts + np.searchsorted(cuts, starts)
        new_ends = ends + np.searchsorted(cuts, ends)
        for i, s, e in zip(idx, new_starts.tolist(), new_ends.tolist(), strict=True):
            out[i] = marked[s:e]
        return out
