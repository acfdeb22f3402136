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

Raw text is first normalized as the pipeline's ``clean`` op normalized the training text
(:class:`TextNormalizer`, settings in ``tokenizer_config.json``'s ``normalization``), so a
prompt typed with full-width punctuation, traditional characters or odd spaces gets the ids
the model was trained on. Each stretch of text between special tokens is normalized on its
own, as ``format_sft`` encodes each turn's content on its own.
"""

from __future__ import annotations

import json
import os
import re
import unicodedata

from tokenizers import Tokenizer as BPETokenizer
from transformers import BatchEncoding, PreTrainedTokenizer

__all__ = ["DataforgeTokenizer"]

MARKER = "\ue000"
SP_SPACE = "\u2581"
CHUNK_CHARS = 1 << 15
_ESCAPED = re.compile(f"([{MARKER}{SP_SPACE}])")
_SURROGATE = re.compile("[\ud800-\udfff]")
_CJK = ((0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF), (0x20000, 0x2FA1F))
_HAS_CJK = re.compile("[" + "".join(f"{chr(lo)}-{chr(hi)}" for lo, hi in _CJK) + "]")
CONTROL = ("<pad>", "<bos>", "<eos>", "<unk>")
_NOT_WITH_MASK = (
    "padding",
    "truncation",
    "max_length",
    "return_tensors",
    "tokenizer_kwargs",
    "continue_final_message",
)
"""``apply_chat_template`` options this tokenizer does not combine with the assistant mask."""


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


# The character rules of dataforge.text.clean (steps 1-4, 7 and 8 of clean_text), in
# Python's re instead of Arrow's RE2: the same classes, the same order.
_LINE_BREAKS = re.compile(r"\r\n?|[\x0b\x0c\x85\u2028\u2029]")
_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1f\x7f-\x9f\ufffe\uffff]")
_INVISIBLE = re.compile(r"[\xad\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]")
_FULLWIDTH = {0xFF01 + i: 0x21 + i for i in range(0x5E)} | {0x3000: 0x20}
_UNICODE_SPACES = re.compile(r"[\xa0\u1680\u2000-\u200a\u202f\u205f\u3000]")
_BLANK_BEFORE_NEWLINE = re.compile(r"[ \t]+\n")
_SPACE_RUN_AFTER_TEXT = re.compile(r"([^ \t\n])  +")
_SPACE_RUN = re.compile("  +")
NORMALIZATION_KEYS = (
    "normalization",
    "fullwidth_to_halfwidth",
    "remove_invisible",
    "invalid_utf8",
    "normalize_whitespace",
    "keep_indentation",
    "max_blank_lines",
    "convert",
)
"""The ``clean`` settings (same names) a :class:`TextNormalizer` applies."""


class TextNormalizer:
    """The ``clean`` op's normalization of one string: line breaks, control and invisible
    characters, the Unicode form, full-width ASCII, U+FFFD, whitespace, OpenCC conversion.

    Markup, URL and e-mail removal are not applied: they remove content, which a prompt
    keeps (a question about HTML has tags). Python's Unicode tables may be older than
    Arrow's: characters assigned since normalize as Python knows them.
    """

    def __init__(self, settings: dict) -> None:
        unknown = sorted(set(settings) - set(NORMALIZATION_KEYS))
        if unknown:
            raise ValueError(
                f"normalization: unknown keys {unknown}; valid: {', '.join(NORMALIZATION_KEYS)}"
            )
        self.settings = dict(settings)
        get = settings.get
        self.form = get("normalization", "NFKC")
        self.fullwidth = get("fullwidth_to_halfwidth", True) and self.form not in ("NFKC", "NFKD")
        self.remove_invisible = get("remove_invisible", True)
        self.remove_replacement = get("invalid_utf8", "remove") == "remove"
        self.whitespace = get("normalize_whitespace", True)
        indent = get("keep_indentation", True)
        self.space_run = (_SPACE_RUN_AFTER_TEXT, r"\1 ") if indent else (_SPACE_RUN, " ")
        keep = int(get("max_blank_lines", 1)) + 1
        self.blank_lines = (re.compile(f"\n{{{keep + 1},}}"), "\n" * keep)
        self.convert = None
        if get("convert"):
            import opencc  # the recipe converted scripts: its OpenCC is needed here too

            self.convert = opencc.OpenCC(f"{get('convert')}.json").convert

    def __call__(self, text: str) -> str:
        text = _SURROGATE.sub("\ufffd", text)  # what a reader does before clean
        text = _CONTROL.sub("", _LINE_BREAKS.sub("\n", text))
        if self.remove_invisible:
            text = _INVISIBLE.sub("", text)
        if self.fullwidth:
            text = text.translate(_FULLWIDTH)
        if self.form != "none":
            text = unicodedata.normalize(self.form, text)
        if self.remove_replacement:
            text = text.replace("\ufffd", "")
        if self.whitespace:
            text = _BLANK_BEFORE_NEWLINE.sub("\n", _UNICODE_SPACES.sub(" ", text))
            text = self.space_run[0].sub(self.space_run[1], text)
            text = self.blank_lines[0].sub(self.blank_lines[1], text).strip(" \t\n")
        if self.convert is not None and _HAS_CJK.search(text):
            text = self.convert(text)
        return text


class DataforgeTokenizer(PreTrainedTokenizer):
    """Jieba word boundaries + byte-fallback BPE; ``decode(encode(x))`` is ``x`` as the
    normalization (if any) rewrites it."""

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
        # None (an export from before normalization was recorded): text is encoded as given.
        normalization = kwargs.pop("normalization", None)
        self.normalizer = TextNormalizer(normalization) if normalization is not None else None
        user = [t.content for t in self.bpe.get_added_tokens_decoder().values()]
        user = sorted((t for t in user if t != MARKER and t not in CONTROL), key=len, reverse=True)
        self._special_text = re.compile("|".join(map(re.escape, user))) if user else None
        kwargs.setdefault("clean_up_tokenization_spaces", False)
        super().__init__(add_bos_token=self.add_bos_token, normalization=normalization, **kwargs)

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
        """Pieces of ``text`` as dataforge encodes its normalized form (no BOS/EOS added).
        A text that begins with ``<bos>`` (as the chat template renders a conversation)
        begins with the BOS piece; ``<bos>`` anywhere else is text."""
        return [piece for piece, _, _ in self.pieces_and_spans(text)]

    def pieces_and_spans(self, text: str) -> list[tuple[str, int, int]]:
        """``(piece, start, end)`` for every piece of ``text``: a special token's own
        characters, or the whole stretch of text between special tokens that the piece
        comes from (normalization may rewrite a stretch, so finer offsets are not kept)."""
        out: list[tuple[str, int, int]] = []
        start = len("<bos>") if text.startswith("<bos>") else 0
        if start:
            out.append(("<bos>", 0, start))
        specials = self._special_text.finditer(text, start) if self._special_text else ()
        for match in (*specials, None):
            end = match.start() if match else len(text)
            if end > start:
                out.extend((piece, start, end) for piece in self._encode_text(text[start:end]))
            if match:
                out.append((match.group(), match.start(), match.end()))
                start = match.end()
        return out

    def _encode_text(self, text: str) -> list[str]:
        """Pieces of text holding no special token, normalized first."""
        if self.normalizer is not None:
            text = self.normalizer(text)
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

    def apply_chat_template(self, conversation, *args, **kwargs):
        """transformers' ``apply_chat_template``; with ``return_assistant_tokens_mask`` the
        mask is computed here: transformers maps the template's ``{% generation %}`` spans
        to tokens with a fast tokenizer's offsets, which this tokenizer has not. A token is
        marked when the text it comes from (:meth:`pieces_and_spans`) overlaps a span."""
        if not kwargs.get("return_assistant_tokens_mask") or not kwargs.get("tokenize", True):
            return super().apply_chat_template(conversation, *args, **kwargs)
        if not kwargs.get("return_dict"):
            raise ValueError("`return_assistant_tokens_mask=True` needs `return_dict=True`")
        unsupported = [key for key in _NOT_WITH_MASK if kwargs.get(key)]
        if args or unsupported or isinstance(conversation[0], (list, tuple)):
            raise ValueError(
                "with return_assistant_tokens_mask this tokenizer takes one conversation "
                f"and keyword arguments, without {', '.join(unsupported or _NOT_WITH_MASK)}"
            )
        text, spans = self._render_with_spans(conversation, kwargs)
        pieces = self.pieces_and_spans(text)
        ids = [self._convert_token_to_id(piece) for piece, _, _ in pieces]
        mask = [int(any(s < b and a < e for a, b in spans)) for _, s, e in pieces]
        return BatchEncoding(
            {"input_ids": ids, "attention_mask": [1] * len(ids), "assistant_masks": mask}
        )

    def _render_with_spans(self, conversation, kwargs: dict) -> tuple[str, list[tuple[int, int]]]:
        """The rendered conversation and the character spans of its ``{% generation %}``
        blocks, from the renderer transformers' own ``apply_chat_template`` uses."""
        from transformers.utils.chat_template_utils import render_jinja_template

        options = ("tools", "documents", "add_generation_prompt", "continue_final_message")
        skip = {"chat_template", "tokenize", "return_dict", "return_assistant_tokens_mask"}
        skip |= {*options, *_NOT_WITH_MASK}
        extra = {k: v for k, v in kwargs.items() if k not in skip}
        template = self.get_chat_template(kwargs.get("chat_template"), kwargs.get("tools"))
        rendered, spans = render_jinja_template(
            conversations=[conversation],
            chat_template=template,
            return_assistant_tokens_mask=True,
            **{k: kwargs[k] for k in options if k in kwargs},
            **(self.special_tokens_map | extra),
        )
        return rendered[0], [tuple(span) for span in spans[0]]

    def save_vocabulary(self, save_directory: str, filename_prefix: str | None = None):
        prefix = f"{filename_prefix}-" if filename_prefix else ""
        bpe_path = os.path.join(save_directory, prefix + "dataforge_bpe.json")
        seg_path = os.path.join(save_directory, prefix + "dataforge_segmenter.json")
        self.bpe.save(bpe_path)
        with open(seg_path, "w", encoding="utf-8") as f:
            json.dump(self.segmenter, f, ensure_ascii=False)
        return bpe_path, seg_path
