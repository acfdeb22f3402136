"""The Jieba + BPE tokenizer as Hugging Face remote code (``tokenization_dataforge.py``).

An export copies this file next to the model; ``tokenizer_config.json`` names it in
``auto_map``, so ``AutoTokenizer.from_pretrained(path, trust_remote_code=True)`` loads
:class:`DataforgeTokenizer`. It imports only what a transformers user has (transformers,
tokenizers) plus the segmenter the tokenizer was trained with (``rjieba`` or ``jieba``),
never dataforge, and reproduces ``dataforge.tokenization.Tokenizer`` exactly: the same
escapes (U+E000 and U+2581 as raw bytes, lone surrogates as U+FFFD), the same word
boundaries between CJK ideographs, the same chunking of long texts, and the sentencepiece
BPE model converted to a ``tokenizers`` BPE with the same merge order (file
``dataforge_bpe.json``, written by ``dataforge.tokenization.hf_export``).
"""

from __future__ import annotations

import json
import os
import re

from tokenizers import Tokenizer as BPETokenizer
from transformers import PreTrainedTokenizer

__all__ = ["DataforgeTokenizer"]

MARKER = "\ue000"
SP_SPACE = "\u2581"
CHUNK_CHARS = 1 << 15
_ESCAPED = re.compile(f"([{MARKER}{SP_SPACE}])")
_SURROGATE = re.compile("[\ud800-\udfff]")
_CJK = ((0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF), (0x20000, 0x2FA1F))
_HAS_CJK = re.compile("[" + "".join(f"{chr(lo)}-{chr(hi)}" for lo, hi in _CJK) + "]")
CONTROL = ("<pad>", "<bos>", "<eos>", "<unk>")


def _is_cjk(char: str) -> bool:
    cp = ord(char)
    return any(lo <= cp <= hi for lo, hi in _CJK)


def _make_cut(engine: str, hmm: bool, entries: list):
    if engine == "rjieba":
        import rjieba

        seg = rjieba.Jieba()
        for word, freq, tag in entries:
            seg.add_word(word, freq, tag)
        return lambda text: seg.cut(text, hmm)
    import logging

    import jieba

    seg = jieba.Tokenizer()
    jieba.setLogLevel(logging.WARNING)
    seg.initialize()
    for word, freq, tag in entries:
        seg.add_word(word, freq, tag)
    return lambda text: seg.lcut(text, HMM=hmm)


def split_long(text: str, size: int = CHUNK_CHARS) -> list[str]:
    """Cut a marked text where no BPE piece crosses (same rule as dataforge's)."""
    out, start, n = [], 0, len(text)
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


class DataforgeTokenizer(PreTrainedTokenizer):
    """Jieba word boundaries + byte-fallback BPE; ``decode(encode(x)) == x``."""

    vocab_files_names = {
        "bpe_file": "dataforge_bpe.json",
        "segmenter_file": "dataforge_segmenter.json",
    }
    model_input_names = ["input_ids", "attention_mask"]

    def __init__(self, bpe_file: str, segmenter_file: str, **kwargs) -> None:
        self.bpe = BPETokenizer.from_file(bpe_file)
        with open(segmenter_file, encoding="utf-8") as f:
            seg = json.load(f)
        self.segmenter = seg
        self._cut = _make_cut(seg["engine"], seg["hmm"], seg.get("user_words") or [])
        self.vocab = self.bpe.get_vocab(with_added_tokens=True)
        self.pieces = {i: p for p, i in self.vocab.items()}
        self.marker_id = self.vocab[MARKER]
        self.control_ids = {self.vocab[p] for p in CONTROL}
        self.escape_pieces = {
            ch: [f"<0x{b:02X}>" for b in ch.encode("utf-8")] for ch in (MARKER, SP_SPACE)
        }
        for key, piece in (
            ("pad_token", "<pad>"),
            ("bos_token", "<bos>"),
            ("eos_token", "<eos>"),
            ("unk_token", "<unk>"),
        ):
            kwargs.setdefault(key, piece)
        self.add_bos_token = bool(kwargs.pop("add_bos_token", False))
        kwargs.setdefault("clean_up_tokenization_spaces", False)
        super().__init__(add_bos_token=self.add_bos_token, **kwargs)

    @property
    def vocab_size(self) -> int:
        return self.bpe.get_vocab_size(with_added_tokens=True)

    def get_vocab(self) -> dict[str, int]:
        return dict(self.vocab)

    def _mark(self, text: str) -> str:
        if text.isascii() or not _HAS_CJK.search(text):
            return text
        words = self._cut(text)
        out = [words[0]] if words else []
        for prev, word in zip(words, words[1:], strict=False):
            if prev and word and _is_cjk(prev[-1]) and _is_cjk(word[0]):
                out.append(MARKER)
            out.append(word)
        return "".join(out)

    def tokenize(self, text: str, **kwargs) -> list[str]:
        """Pieces of ``text`` exactly as dataforge encodes it (no BOS/EOS added). A text
        that begins with ``<bos>`` (as the chat template renders a conversation) begins
        with the BOS piece; ``<bos>`` anywhere else is text."""
        if text.startswith("<bos>"):
            return ["<bos>", *self.tokenize(text[len("<bos>") :])]
        pieces: list[str] = []
        parts = _ESCAPED.split(_SURROGATE.sub("\ufffd", text))
        for k, part in enumerate(parts):
            if k % 2:
                pieces.extend(self.escape_pieces[part])
                continue
            if not part:
                continue
            chunks = split_long(self._mark(part))
            for enc in self.bpe.encode_batch(chunks, add_special_tokens=False):
                pieces.extend(
                    p for p, i in zip(enc.tokens, enc.ids, strict=True) if i != self.marker_id
                )
        return pieces

    def _tokenize(self, text: str, **kwargs) -> list[str]:
        return self.tokenize(text)

    def _convert_token_to_id(self, token: str) -> int:
        return self.vocab.get(token, self.vocab["<unk>"])

    def _convert_id_to_token(self, index: int) -> str:
        return self.pieces[index]

    def convert_tokens_to_string(self, tokens: list[str]) -> str:
        return self._decode([self.vocab[t] for t in tokens])

    def build_inputs_with_special_tokens(self, token_ids_0, token_ids_1=None):
        bos = [self.bos_token_id] if self.add_bos_token else []
        if token_ids_1 is None:
            return bos + list(token_ids_0)
        return bos + list(token_ids_0) + bos + list(token_ids_1)

    def _decode(self, token_ids, skip_special_tokens: bool = False, **kwargs) -> str:
        if isinstance(token_ids, int):
            token_ids = [token_ids]
        # Control tokens decode to nothing (sentencepiece's rule); chat markers are text
        # unless skip_special_tokens.
        skip = self.control_ids | (set(self.all_special_ids) if skip_special_tokens else set())
        return self.bpe.decode([i for i in token_ids if i not in skip], skip_special_tokens=False)

    def save_vocabulary(self, save_directory: str, filename_prefix: str | None = None):
        prefix = f"{filename_prefix}-" if filename_prefix else ""
        bpe_path = os.path.join(save_directory, prefix + "dataforge_bpe.json")
        seg_path = os.path.join(save_directory, prefix + "dataforge_segmenter.json")
        self.bpe.save(bpe_path)
        with open(seg_path, "w", encoding="utf-8") as f:
            json.dump(self.segmenter, f, ensure_ascii=False)
        return bpe_path, seg_path
