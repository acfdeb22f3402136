"""Hugging Face tokenizers in the pipeline: a local directory with ``tokenizer.json`` (and
``tokenizer_config.json`` with its ``chat_template``), used by ``tokenize``, ``format_sft``
and ``format_dpo`` in place of a trained Jieba+BPE directory, so data for an existing model
is prepared with that model's tokenizer and chat template.

Chat records are rendered with the template itself. A conversation becomes text pieces by
rendering growing prefixes: each turn is what its rendering adds to the previous one, and
an assistant turn splits into the header the template writes for a generation prompt
(``add_generation_prompt=True``, not learned) and the rest (content and end-of-turn text,
learned). This needs a template whose renderings of a conversation's prefixes are prefixes
of each other, which holds for the common ones (Llama 3, Qwen2, Mistral, ChatML); another
template is refused with the turn where it breaks. Pieces are encoded one by one with the
template's special tokens parsed from the text (the model's convention; a user writing
``<|im_start|>`` gets the token).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from dataforge.io.node_cache import fetch_to_cache
from dataforge.tokenization.tokenizer import read_tokenizer_json

__all__ = [
    "HFTokenizer",
    "is_hf_tokenizer_dir",
    "load_tokenizer",
    "local_tokenizer_dir",
    "tokenizer_vocab_size",
]


def local_tokenizer_dir(path: str | Path) -> Path:
    """A local directory for tokenizer ``path``: itself, or for a URI (``s3://...``) this
    node's cached copy (:mod:`dataforge.io.node_cache`)."""
    return fetch_to_cache(str(path))


def is_hf_tokenizer_dir(path: str | Path) -> bool:
    """A Hugging Face tokenizer directory (``tokenizer.json`` with a ``model``, no spm.model)?"""
    path = Path(path)
    if (path / "spm.model").is_file() or not (path / "tokenizer.json").is_file():
        return False
    try:
        return "model" in json.loads((path / "tokenizer.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False


def tokenizer_vocab_size(path: str | Path) -> int:
    """Ids of either kind of tokenizer directory, without loading a segmenter.

    Raises:
        FileNotFoundError: no tokenizer there.
        ValueError: an unreadable or incompatible tokenizer.
    """
    path = fetch_to_cache(str(path))  # a URI: this node's cached copy
    if is_hf_tokenizer_dir(path):
        from tokenizers import Tokenizer as FastTokenizer

        try:
            fast = FastTokenizer.from_file(str(Path(path) / "tokenizer.json"))
        except Exception as exc:  # tokenizers raises a bare Exception on a bad file
            raise ValueError(f"{path}/tokenizer.json: unreadable ({exc})") from exc
        return fast.get_vocab_size(with_added_tokens=True)
    return int(read_tokenizer_json(path)["vocab_size"])


def load_tokenizer(path: str | Path, num_threads: int = 1):
    """A :class:`~dataforge.tokenization.Tokenizer` or an :class:`HFTokenizer`, by kind (a
    URI is copied once to this node's cache)."""
    path = fetch_to_cache(str(path))
    if is_hf_tokenizer_dir(path):
        return HFTokenizer(path)
    from dataforge.tokenization.tokenizer import Tokenizer

    return Tokenizer.load(path, num_threads=num_threads)


class HFTokenizer:
    """A local Hugging Face (fast) tokenizer behind the interface the ops use."""

    def __init__(self, path: str | Path) -> None:
        from transformers import AutoTokenizer

        self.path = Path(path)
        self._tok = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        self.vocab_size: int = len(self._tok)
        self.bos_id = self._tok.bos_token_id
        self.eos_id = self._tok.eos_token_id
        pad = self._tok.pad_token_id
        self.pad_id: int = pad if pad is not None else (self.eos_id or 0)
        self.special_tokens = {
            t: self._tok.convert_tokens_to_ids(t) for t in self._tok.all_special_tokens
        }
        self.chat_template: str | None = self._tok.chat_template
        self.fingerprint = hashlib.sha256((self.path / "tokenizer.json").read_bytes()).hexdigest()

    def encode_batch(
        self, texts: Sequence[str], add_bos: bool = False, add_eos: bool = False
    ) -> list[list[int]]:
        """Ids of each text (special-token text parsed, nothing added unless asked)."""
        ids = self._tok(list(texts), add_special_tokens=False)["input_ids"] if texts else []
        head = [self.bos_id] if add_bos and self.bos_id is not None else []
        tail = [self.eos_id] if add_eos and self.eos_id is not None else []
        return [head + row + tail for row in ids]

    def encode(self, text: str, add_bos: bool = False, add_eos: bool = False) -> list[int]:
        return self.encode_batch([text], add_bos, add_eos)[0]

    def encode_batch_flat(
        self, texts: Sequence[str], add_bos: bool = False, add_eos: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """Ids as one int32 array plus ``len(texts) + 1`` offsets (Arrow list layout)."""
        rows = self.encode_batch(texts, add_bos, add_eos)
        lengths = np.fromiter(map(len, rows), np.int64, count=len(rows))
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        values = np.fromiter((i for row in rows for i in row), np.int32, count=int(offsets[-1]))
        return values, offsets

    def decode(self, ids: Sequence[int] | np.ndarray) -> str:
        return self._tok.decode(list(np.asarray(ids).tolist()))

    def _render(self, turns: list[tuple[str, str]], generation_prompt: bool) -> str:
        if not turns and not generation_prompt:
            return ""
        messages = [{"role": role, "content": content} for role, content in turns]
        return self._tok.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=generation_prompt
        )

    def chat_pieces(
        self, turns: list[tuple[str, str]], targets: set[int], open_assistant: bool
    ) -> list[tuple[str, bool]]:
        """(text, learned) pieces of a conversation rendered by the chat template.

        Raises:
            ValueError: no chat template, or one whose prefixes are not stable.
        """
        if not self.chat_template:
            raise ValueError(f"{self.path}: tokenizer_config.json has no chat_template")
        pieces: list[tuple[str, bool]] = []
        done = ""
        for k, (role, _) in enumerate(turns):
            if role == "assistant":
                header = self._render(turns[:k], generation_prompt=True)
                pieces.append((self._after(done, header, k), False))
                done = header
            full = self._render(turns[: k + 1], generation_prompt=False)
            pieces.append((self._after(done, full, k), k in targets))
            done = full
        if open_assistant:
            pieces.append((self._after(done, self._render(turns, True), len(turns)), False))
        return [(text, learn) for text, learn in pieces if text]

    def _after(self, prefix: str, text: str, turn: int) -> str:
        if not text.startswith(prefix):
            raise ValueError(
                f"{self.path}: the chat template renders turn {turn} so that the earlier "
                "turns' text changes; it cannot be split into learned and prompt tokens"
            )
        return text[len(prefix) :]
