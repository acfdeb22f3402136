"""The trained tokenizer: jieba word boundaries + a sentencepiece BPE model, lossless.

A tokenizer directory holds ``spm.model`` (sentencepiece BPE, identity normalization, byte
fallback), ``spm.vocab`` (for reading), ``tokenizer.json`` (format version, segmenter
settings, special token ids, training data hash, versions) and, if one was used,
``userdict.txt``.

Encoding a batch: escape the two characters sentencepiece cannot carry through
(:data:`~dataforge.tokenization.segment.MARKER` and U+2581, which it would decode as a
space) as raw byte ids, mark the jieba boundaries, cut long texts at boundaries that no
piece crosses, run ONE ``sp.encode`` over all chunks (``num_threads`` threads), and drop the
boundary ids with numpy. ``decode(encode(x)) == x`` for every string (lone surrogates, which
no UTF-8 text can hold, become U+FFFD).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dataforge.io.node_cache import fetch_to_cache
from dataforge.text.surrogates import replace_each_surrogate
from dataforge.tokenization.segment import MARKER, Segmenter
from dataforge.tokenization.spm_batch import BatchEncoder

__all__ = ["FORMAT_VERSION", "Tokenizer", "read_tokenizer_json"]

FORMAT_VERSION = 1
"""Bump when the encoding of a given text could change; older directories are refused."""

CHUNK_CHARS = 1 << 15
"""Texts longer than this are encoded in chunks, which keeps BPE linear and threads busy."""

_SP_SPACE = "\u2581"
_ESCAPED = re.compile(f"([{MARKER}{_SP_SPACE}])")


def _needs_escape(text: str) -> bool:
    """Does ``text`` hold the marker, U+2581 or a lone surrogate? (str methods, not a regex:
    this runs over every character of every batch)"""
    if text.isascii():
        return False
    if MARKER in text or _SP_SPACE in text:
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def read_tokenizer_json(path: str | Path) -> dict[str, Any]:
    """Read and check ``path/tokenizer.json`` (without loading the model).

    Raises:
        FileNotFoundError: the directory or one of its files is missing.
        ValueError: the directory is from an incompatible format version or is unreadable.
    """
    path = Path(path)
    meta_path = path / "tokenizer.json"
    if not path.is_dir():
        raise FileNotFoundError(f"tokenizer directory {str(path)!r} does not exist")
    for name in ("tokenizer.json", "spm.model"):
        if not (path / name).is_file():
            raise FileNotFoundError(
                f"tokenizer directory {str(path)!r} has no {name} (not trained?)"
            )
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{meta_path}: unreadable ({exc})") from exc
    version = meta.get("format_version") if isinstance(meta, dict) else None
    if version != FORMAT_VERSION:
        raise ValueError(
            f"{meta_path}: tokenizer format version {version!r} is not supported "
            f"(this dataforge reads version {FORMAT_VERSION}); retrain it with `dataforge tokenizer train`"
        )
    return meta


class Tokenizer:
    """A trained Jieba + BPE tokenizer. Build one with :meth:`load`.

    Attributes:
        vocab_size: number of ids (all ids are ``< vocab_size``).
        bos_id, eos_id, pad_id, unk_id: the control token ids.
        special_tokens: piece -> id for the control tokens, chat markers and reserved ids.
        fingerprint: sha256 of ``spm.model``.
        meta: the parsed ``tokenizer.json``.
    """

    def __init__(
        self,
        model_bytes: bytes,
        meta: dict[str, Any],
        user_dict: Path | None = None,
        num_threads: int = 1,
    ) -> None:
        import sentencepiece as spm

        self.meta = meta
        self._sp = spm.SentencePieceProcessor(model_proto=model_bytes)
        seg = meta["segmenter"]
        self._segmenter = Segmenter(seg["engine"], hmm=seg["hmm"], user_dict=user_dict)
        self._num_threads = num_threads
        self.vocab_size: int = self._sp.get_piece_size()
        if self.vocab_size != meta["vocab_size"]:
            raise ValueError(
                f"spm.model has {self.vocab_size} ids, tokenizer.json says {meta['vocab_size']}"
            )
        self.special_tokens: dict[str, int] = dict(meta["special_tokens"])
        self.pad_id: int = self.special_tokens["<pad>"]
        self.bos_id: int = self.special_tokens["<bos>"]
        self.eos_id: int = self.special_tokens["<eos>"]
        self.unk_id: int = self.special_tokens["<unk>"]
        self.boundary_id: int = self._sp.piece_to_id(MARKER)
        self.fingerprint: str = hashlib.sha256(model_bytes).hexdigest()
        self._escape_ids = {ch: self._byte_ids(ch) for ch in (MARKER, _SP_SPACE)}
        self.batch = BatchEncoder(self._sp, model_bytes, num_threads)

    @classmethod
    def load(cls, path: str | Path, num_threads: int = 1) -> Tokenizer:
        """Load a tokenizer directory written by ``dataforge tokenizer train``.

        Args:
            path: the directory (``spm.model`` + ``tokenizer.json``), or a URI of one
                (``s3://...``), copied once to this node's cache.
            num_threads: sentencepiece encode threads per ``encode_batch`` call.

        Raises:
            FileNotFoundError: the directory or a file in it is missing.
            ValueError: incompatible format version or inconsistent files.
            StorageError: a URI's storage cannot be used.
        """
        path = fetch_to_cache(str(path))
        meta = read_tokenizer_json(path)
        model_bytes = (path / "spm.model").read_bytes()
        expected = meta.get("spm_model_sha256")
        if expected and hashlib.sha256(model_bytes).hexdigest() != expected:
            raise ValueError(
                f"{path / 'spm.model'}: sha256 does not match tokenizer.json (mixed files?)"
            )
        user_dict = meta["segmenter"].get("user_dict")
        return cls(
            model_bytes,
            meta,
            user_dict=path / user_dict if user_dict else None,
            num_threads=num_threads,
        )

    def _byte_ids(self, text: str) -> np.ndarray:
        return np.array(
            [self._sp.piece_to_id(f"<0x{b:02X}>") for b in text.encode("utf-8")], np.int32
        )

    def token_to_id(self, piece: str) -> int:
        """The id of ``piece``.

        Raises:
            KeyError: the piece is not in the vocabulary.
        """
        piece_id = self._sp.piece_to_id(piece)
        if piece_id == self.unk_id and piece != "<unk>":
            raise KeyError(f"{piece!r} is not in the vocabulary")
        return piece_id

    def id_to_token(self, token_id: int) -> str:
        """The piece of ``token_id`` (sentencepiece spelling: U+2581 for a space)."""
        if not 0 <= token_id < self.vocab_size:
            raise IndexError(f"token id {token_id} out of range [0, {self.vocab_size})")
        return self._sp.id_to_piece(token_id)

    # -- encoding -----------------------------------------------------------------------
    def encode(self, text: str, add_bos: bool = False, add_eos: bool = False) -> list[int]:
        """Token ids of ``text`` (optionally framed by BOS/EOS)."""
        return self.encode_batch([text], add_bos=add_bos, add_eos=add_eos)[0]

    def encode_batch(
        self, texts: Sequence[str], add_bos: bool = False, add_eos: bool = False
    ) -> list[list[int]]:
        """Token ids of each text; same result as :meth:`encode` one by one, faster."""
        values, offsets = self.encode_batch_flat(texts, add_bos=add_bos, add_eos=add_eos)
        flat = values.tolist()
        bounds = offsets.tolist()
        return [flat[bounds[i] : bounds[i + 1]] for i in range(len(texts))]

    def encode_batch_flat(
        self, texts: Sequence[str], add_bos: bool = False, add_eos: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """Token ids of a batch as one int32 array plus ``len(texts) + 1`` int64 offsets
        (text ``i`` is ``values[offsets[i]:offsets[i+1]]``), the layout of an Arrow list array.
        """
        if not texts:
            return np.zeros(0, np.int32), np.zeros(1, np.int64)
        chunks, fixed, chunks_per_text = self._chunks(texts)
        values, chunk_lens = self._encode_chunks(chunks, fixed)
        token_bounds = np.concatenate([[0], np.cumsum(chunk_lens)])
        if chunks_per_text is not None:
            token_bounds = token_bounds[np.concatenate([[0], np.cumsum(chunks_per_text)])]
        # Drop the boundary markers; each text loses the markers that fell inside it.
        keep = values != self.boundary_id
        offsets = np.concatenate([[0], np.cumsum(keep)])[token_bounds]
        values = values[keep]
        if add_bos or add_eos:
            values, offsets = _frame(
                values, offsets, self.bos_id if add_bos else None, self.eos_id if add_eos else None
            )
        return values, offsets.astype(np.int64, copy=False)

    def _encode_chunks(
        self, chunks: list[str], fixed: dict[int, np.ndarray]
    ) -> tuple[np.ndarray, np.ndarray]:
        """Ids of all chunks (int32) and the number of each chunk's ids
        (:class:`~dataforge.tokenization.spm_batch.BatchEncoder`); a batch with escaped
        characters goes to sentencepiece, their ids put in place of the empty stand-ins."""
        if not fixed:
            return self.batch.encode(chunks)
        arrays = self._sp.encode(chunks, out_type="numpy", num_threads=self._num_threads)
        for i, ids in fixed.items():
            arrays[i] = ids
        chunk_lens = np.fromiter(map(len, arrays), np.int64, count=len(arrays))
        return np.concatenate(arrays).astype(np.int32, copy=False), chunk_lens

    def _chunks(
        self, texts: Sequence[str]
    ) -> tuple[list[str], dict[int, np.ndarray], list[int] | None]:
        """Split texts into the strings handed to sentencepiece.

        Returns the chunks, the chunks whose ids are fixed (escaped characters; an empty
        string stands in for each), and the number of chunks per text, or None when that is
        one for every text (the common case, kept free of per-text Python work).
        """
        if not any(map(_needs_escape, texts)):
            marked = self._segmenter.mark_batch(texts)
            if max(map(len, marked)) <= CHUNK_CHARS:
                return marked, {}, None
            return self._split_parts(marked, [None] * len(marked), [1] * len(marked))
        # Escaped characters split a text into parts; each part is segmented on its own,
        # which equals segmenting the whole (escaped characters are not CJK).
        parts: list[str] = []
        part_escape: list[str | None] = []
        parts_per_text: list[int] = []
        for text in texts:
            if not _needs_escape(text):
                parts.append(text)
                part_escape.append(None)
                parts_per_text.append(1)
                continue
            # Lone surrogates cannot be UTF-8: they become U+FFFD (the one lossy case).
            pieces = _ESCAPED.split(replace_each_surrogate(text))  # [plain, escaped, ..., plain]
            for k, piece in enumerate(pieces):
                parts.append("" if k % 2 else piece)
                part_escape.append(piece if k % 2 else None)
            parts_per_text.append(len(pieces))
        return self._split_parts(self._segmenter.mark_batch(parts), part_escape, parts_per_text)

    def _split_parts(
        self, marked: list[str], part_escape: list[str | None], parts_per_text: list[int]
    ) -> tuple[list[str], dict[int, np.ndarray], list[int]]:
        chunks: list[str] = []
        fixed: dict[int, np.ndarray] = {}
        per_part: list[int] = []
        for part, escaped in zip(marked, part_escape, strict=True):
            if escaped is not None:
                fixed[len(chunks)] = self._escape_ids[escaped]
                chunks.append("")
                per_part.append(1)
            elif len(part) <= CHUNK_CHARS:
                chunks.append(part)
                per_part.append(1)
            else:
                pieces = split_long(part)
                chunks.extend(pieces)
                per_part.append(len(pieces))
        part_bounds = np.concatenate([[0], np.cumsum(parts_per_text)])
        chunk_counts = np.add.reduceat(np.asarray(per_part, np.int64), part_bounds[:-1])
        return chunks, fixed, chunk_counts.tolist()

    # -- decoding -----------------------------------------------------------------------
    def decode(self, ids: Sequence[int] | np.ndarray) -> str:
        """Text of ``ids``; control tokens (pad, BOS, EOS) decode to nothing."""
        if isinstance(ids, np.ndarray):
            ids = ids.tolist()
        return self._sp.decode(list(ids))

    def decode_batch(self, batch: Sequence[Sequence[int]]) -> list[str]:
        """:meth:`decode` for each id sequence."""
        return [self.decode(ids) for ids in batch]


def split_long(text: str, size: int = CHUNK_CHARS) -> list[str]:
    """Cut ``text`` into pieces of at most ``size`` characters at boundaries no BPE piece crosses.

    Preferred cuts, searched in the second half of each window: just before a boundary
    marker (markers are never merged), else at the start of a run of spaces (no piece has a
    space after a non-space). Only a window with neither is cut at its end, which can change
    that one position's tokens but never losslessness or determinism.
    """
    out = []
    start = 0
    n = len(text)
    while n - start > size:
        lo, hi = start + size // 2, start + size
        cut = text.rfind(MARKER, lo, hi)
        if cut <= start:
            cut = text.rfind(" ", lo, hi)
            while cut > lo and text[cut - 1] == " ":
                cut -= 1
            if cut <= start or text[cut - 1] == " ":
                cut = hi
        out.append(text[start:cut])
        start = cut
    out.append(text[start:])
    return out


def _frame(
    values: np.ndarray, offsets: np.ndarray, bos: int | None, eos: int | None
) -> tuple[np.ndarray, np.ndarray]:
    """Insert BOS before and/or EOS after every sequence of a flat (values, offsets) pair."""
    n = len(offsets) - 1
    columns = []
    if bos is not None:
        columns.append((offsets[:-1], bos))
    if eos is not None:
        columns.append((offsets[1:], eos))
    # Row-major order (BOS_0, EOS_0, BOS_1, ...) is already sorted by position, and np.insert
    # keeps the given order among equal positions, so an empty text still gets BOS, EOS.
    positions = np.stack([pos for pos, _ in columns], axis=1).ravel()
    tokens = np.tile(np.array([tok for _, tok in columns], np.int32), n)
    new_values = np.insert(values, positions, tokens)
    new_offsets = offsets + len(columns) * np.arange(n + 1)
    return new_values, new_offsets
