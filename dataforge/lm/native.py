"""KenLM scoring of token ids without strings: the compiled ``_kenlm_ids`` extension.

``kenlm.Model.score`` takes one space-separated string per line and hashes every word back
to its vocabulary index; the perplexity op has its tokens as ids already. :class:`IdScorer`
maps each tokenizer id to its KenLM index once per model (the model was trained on the
ids rendered as decimal strings, so id ``i`` is the word ``str(i)``) and scores a whole
batch of lines from flat arrays in C++, with the GIL released. Each line gets exactly the
value ``kenlm.Model.score`` gives its rendered string (same float sum, same order).

The extension is built by ``make kenlm-ids`` (part of ``make test`` and ``make demo``) from
the KenLM sources the Makefile already compiles; where it is missing (dataforge installed
with pip alone) :func:`load_id_scorer` returns None and the scorer renders strings for
``kenlm.Model.score`` instead: same values, about twice the op's time.
"""

from __future__ import annotations

import os
import threading
import weakref
from pathlib import Path

import numpy as np

__all__ = ["IdScorer", "available", "load_id_scorer"]

try:
    from dataforge.lm import _kenlm_ids
except ImportError:  # not built: the string path of PerplexityScorer is used
    _kenlm_ids = None


def available() -> bool:
    """Whether the extension is built (``make kenlm-ids``)."""
    return _kenlm_ids is not None


class _LoadedModel:
    """One KenLM model loaded by the extension (its capsule), shared by the scorers of a
    process: the driver's threads each build their own ops, and KenLM's queries are
    thread-safe, so an ARPA model is parsed, and held in memory, once."""

    __slots__ = ("capsule", "__weakref__")

    def __init__(self, capsule: object) -> None:
        self.capsule = capsule


_LOADED: weakref.WeakValueDictionary[tuple, _LoadedModel] = weakref.WeakValueDictionary()
_LOADED_LOCK = threading.Lock()


def _load_shared(path: Path) -> _LoadedModel:
    """The process's loaded model of ``path`` (the same file: real path, device, inode,
    size, mtime; a model retrained in place is a new file), loaded now if no live scorer
    holds it; a second thread asking meanwhile waits."""
    try:
        st = path.stat()
    except OSError:  # let KenLM report it, naming the file
        return _LoadedModel(_kenlm_ids.load(str(path)))
    key = (os.path.realpath(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    with _LOADED_LOCK:
        model = _LOADED.get(key)
        if model is None:
            model = _LoadedModel(_kenlm_ids.load(str(path)))
            _LOADED[key] = model
    return model


class IdScorer:
    """A KenLM model scored by token id.

    Args:
        model_path: KenLM binary (or ARPA) file.
        vocab_size: ids the tokenizer produces (``[0, vocab_size)``).

    Raises:
        OSError: the model cannot be read (names the file and KenLM's reason).
        RuntimeError: the extension is not built.
    """

    def __init__(self, model_path: str | Path, vocab_size: int) -> None:
        if _kenlm_ids is None:
            raise RuntimeError("dataforge.lm._kenlm_ids is not built: run `make kenlm-ids`")
        self._loaded = _load_shared(Path(model_path))
        self._model = self._loaded.capsule
        words = [str(i) for i in range(vocab_size)]
        self._index = np.frombuffer(_kenlm_ids.index(self._model, words), np.uint32)

    def score(self, ids: np.ndarray, offsets: np.ndarray, *, checked: bool = False) -> np.ndarray:
        """log10 probability (bos and eos included) of each line.

        Args:
            ids: token ids of all lines, concatenated (any integer dtype, in
                ``[0, vocab_size)``).
            offsets: ``lines + 1`` offsets into ``ids`` (0 first, ``len(ids)`` last).
            checked: the caller has checked the ids' range (``TokenRenderer.encode`` does):
                skip that pass.

        Raises:
            ValueError: an id outside ``[0, vocab_size)``, or offsets that do not frame
                ``ids``.
        """
        ids = np.asarray(ids)
        if not checked and ids.size and (ids.min() < 0 or ids.max() >= len(self._index)):
            raise ValueError(
                f"token ids outside [0, {len(self._index)}): min {ids.min()}, max {ids.max()}"
            )
        indexes = self._index[ids] if ids.size else np.zeros(0, np.uint32)
        offsets = np.ascontiguousarray(offsets, np.int64)
        out = np.empty(max(len(offsets) - 1, 0), np.float64)
        _kenlm_ids.score(self._model, indexes, offsets, out)
        return out


def load_id_scorer(model_path: str | Path, vocab_size: int) -> IdScorer | None:
    """An :class:`IdScorer`, or None where the extension is not built."""
    return IdScorer(model_path, vocab_size) if available() else None
