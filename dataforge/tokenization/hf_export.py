"""Write a dataforge tokenizer as a Hugging Face tokenizer (remote code, see
:mod:`dataforge.tokenization.hf_remote`).

The sentencepiece BPE model becomes a ``tokenizers`` BPE: the same vocabulary and ids,
every split of every normal piece into two pieces as a merge, ranked by the merged piece's
id (sentencepiece BPE ids follow the merge score), byte fallback, spaces as U+2581, and
the user-defined pieces (chat markers, the boundary marker) as added tokens matched before
BPE, as sentencepiece matches them (control pieces are never matched in text). The
segmenter settings (engine, HMM, user dictionary) go to ``dataforge_segmenter.json``.

``tokenizer_config.json`` records what training did around the ids: the ``clean``
settings the text went through (``normalization``, applied by the remote code to raw
text), whether sequences began with ``<bos>`` (``add_bos_token``), the trained sequence
length (``model_max_length``), and left padding (batched generation).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import shutil
from pathlib import Path
from typing import Any

from dataforge.text.clean import CleanConfig
from dataforge.tokenization.segment import MARKER
from dataforge.tokenization.tokenizer import read_tokenizer_json

__all__ = [
    "CHAT_TEMPLATE",
    "REMOTE_MODULE",
    "bpe_tokenizer_json",
    "end_of_turn_id",
    "normalization_settings",
    "write_hf_tokenizer",
]

REMOTE_MODULE = "tokenization_dataforge"
"""File (``<name>.py``) the export copies the remote tokenizer code into."""

_CONTROL = ("<pad>", "<bos>", "<eos>", "<unk>")
_CHAT_MARKERS = ("<|system|>", "<|user|>", "<|assistant|>", "<|end|>")

CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{{ '<|' + message['role'] + '|>' }}"
    "{% if message['role'] == 'assistant' %}"
    "{% generation %}{{ message['content'] + '<|end|>' }}{% endgeneration %}"
    "{% else %}{{ message['content'] + '<|end|>' }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)
"""The conversation layout of ``format_sft``/``format_dpo`` (``add_bos: true``, see
:mod:`dataforge.ops.formatting`) as a Jinja chat template: ``apply_chat_template`` gives
the ids those ops write; a generation prompt is the open ``<|assistant|>`` turn. The
``generation`` blocks are what ``format_sft`` (``train_on: all_assistant``) learns: each
assistant content and its ``<|end|>`` (``return_assistant_tokens_mask``)."""

_NOT_NORMALIZATION = (
    "strip_html",
    "remove_urls",
    "url_replacement",
    "remove_emails",
    "email_replacement",
)
"""``clean`` settings that remove content rather than normalize it: not applied to prompts."""


def bpe_tokenizer_json(spm_model: bytes) -> str:
    """The ``tokenizers`` JSON of a sentencepiece BPE model (see the module docstring)."""
    from tokenizers import AddedToken, Tokenizer, decoders, normalizers
    from tokenizers.models import BPE

    # The proto is parsed once: the conversion is linear in the vocabulary.
    pieces, user = _pieces(spm_model)
    vocab = {piece: i for i, (piece, _) in enumerate(pieces)}
    normal = {piece for piece, kind in pieces if kind == "normal"}
    merges = []
    for piece in normal:
        for k in range(1, len(piece)):
            left, right = piece[:k], piece[k:]
            if left in normal and right in normal:
                merges.append((vocab[piece], vocab[left], vocab[right], left, right))
    merges.sort()
    model = BPE(
        vocab=vocab,
        merges=[(left, right) for *_, left, right in merges],
        unk_token="<unk>",
        byte_fallback=True,
        fuse_unk=True,
    )
    tok = Tokenizer(model)
    tok.normalizer = normalizers.Replace(" ", "\u2581")
    tok.decoder = decoders.Sequence(
        [decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()]
    )
    # Only user-defined pieces are matched in text, as in sentencepiece: a literal "<unk>"
    # or "<bos>" in a document is text, not a control token.
    tok.add_special_tokens([AddedToken(p, normalized=False, special=True) for p in user])
    return tok.to_str()


def _pieces(spm_model: bytes) -> tuple[list[tuple[str, str]], list[str]]:
    """Every piece of the model with its kind (``normal``, ``user``, or ``other`` for
    control, unknown, byte and unused pieces), in id order, and the user-defined pieces."""
    from sentencepiece import sentencepiece_model_pb2 as model_pb2

    proto = model_pb2.ModelProto()
    proto.ParseFromString(spm_model)
    kinds = {
        model_pb2.ModelProto.SentencePiece.NORMAL: "normal",
        model_pb2.ModelProto.SentencePiece.USER_DEFINED: "user",
    }
    pieces = [(p.piece, kinds.get(p.type, "other")) for p in proto.pieces]
    return pieces, [piece for piece, kind in pieces if kind == "user"]


def normalization_settings(clean: CleanConfig | None) -> dict[str, Any] | None:
    """The ``normalization`` entry of ``tokenizer_config.json`` for text cleaned with
    ``clean`` (None: not cleaned): its settings but those that remove content."""
    if clean is None:
        return None
    return {
        f.name: getattr(clean, f.name)
        for f in dataclasses.fields(clean)
        if f.name not in _NOT_NORMALIZATION
    }


def write_hf_tokenizer(
    tokenizer_dir: str | Path,
    out_dir: str | Path,
    *,
    clean: CleanConfig | bool = True,
    add_bos: bool = True,
    max_seq_len: int | None = None,
) -> dict[str, int]:
    """Write the remote-code tokenizer files of ``tokenizer_dir`` into ``out_dir``.

    A tokenizer with the chat markers gets :data:`CHAT_TEMPLATE`.

    Args:
        tokenizer_dir: a trained dataforge tokenizer directory.
        out_dir: where the files go (created if needed).
        clean: the ``clean`` settings of the training text, applied to raw text before
            encoding; True: those the tokenizer's own training text went through (the
            defaults, or none if it was trained with ``clean: false``); False: none.
        add_bos: sequences began with ``<bos>`` in training (``add_bos_token``, and the
            chat template's first token).
        max_seq_len: the trained sequence length (``model_max_length``); None: unbounded.

    Returns:
        the special token ids (``bos_token_id``, ``eos_token_id``, ``pad_token_id``) for the
        model's ``config.json``.
    """
    # Located, not imported: importing it imports transformers (seconds).
    remote_code = importlib.util.find_spec("dataforge.tokenization.hf_remote").origin

    tokenizer_dir, out_dir = Path(tokenizer_dir), Path(out_dir)
    meta = read_tokenizer_json(tokenizer_dir)
    if clean is True:
        clean = CleanConfig() if meta.get("training_data", {}).get("clean", True) else None
    out_dir.mkdir(parents=True, exist_ok=True)
    spm_model = (tokenizer_dir / "spm.model").read_bytes()
    (out_dir / "dataforge_bpe.json").write_text(bpe_tokenizer_json(spm_model), encoding="utf-8")
    segmenter = _segmenter_settings(tokenizer_dir, meta["segmenter"])
    (out_dir / "dataforge_segmenter.json").write_text(
        json.dumps(segmenter, ensure_ascii=False), encoding="utf-8"
    )
    shutil.copyfile(remote_code, out_dir / f"{REMOTE_MODULE}.py")
    special = meta["special_tokens"]
    chat = [p for p in special if p not in _CONTROL and p != MARKER]
    config = {
        "tokenizer_class": "DataforgeTokenizer",
        "auto_map": {"AutoTokenizer": [f"{REMOTE_MODULE}.DataforgeTokenizer", None]},
        "bos_token": "<bos>",
        "eos_token": "<eos>",
        "pad_token": "<pad>",
        "unk_token": "<unk>",
        "additional_special_tokens": chat,
        "add_bos_token": add_bos,
        "clean_up_tokenization_spaces": False,
        "model_max_length": max_seq_len or 1 << 30,
        "padding_side": "left",
        "normalization": normalization_settings(clean or None),
    }
    if all(m in special for m in _CHAT_MARKERS):
        config["chat_template"] = (
            CHAT_TEMPLATE if add_bos else CHAT_TEMPLATE.removeprefix("{{ bos_token }}")
        )
    (out_dir / "tokenizer_config.json").write_text(
        json.dumps(config, ensure_ascii=False, indent=2), encoding="utf-8"
    )
    return {
        "bos_token_id": special["<bos>"],
        "eos_token_id": special["<eos>"],
        "pad_token_id": special["<pad>"],
    }


def _segmenter_settings(tokenizer_dir: Path, seg: dict[str, Any]) -> dict[str, Any]:
    """``dataforge_segmenter.json``: engine, HMM and the user dictionary's entries."""
    user_words = []
    if seg.get("user_dict"):
        for line in (tokenizer_dir / seg["user_dict"]).read_text(encoding="utf-8").splitlines():
            parts = line.split()
            if parts:
                freq = int(parts[1]) if len(parts) >= 2 else None
                user_words.append([parts[0], freq, parts[2] if len(parts) == 3 else None])
    return {"engine": seg["engine"], "hmm": seg["hmm"], "user_words": user_words}


def end_of_turn_id(tokenizer_dir: str | Path) -> int | None:
    """The ``<|end|>`` id of a tokenizer with the chat markers (None without them)."""
    special = read_tokenizer_json(Path(tokenizer_dir))["special_tokens"]
    return special["<|end|>"] if all(m in special for m in _CHAT_MARKERS) else None
