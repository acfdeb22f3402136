"""``format_sft`` / ``format_dpo``: chat records -> token columns for the SFT / DPO loaders.

Fields come from the record's ``meta`` (the reader's ``meta_keys``); the prompt falls back
to the record's ``text`` when ``meta`` has no prompt (e.g. ``text_key: prompt``). The chat
template uses the tokenizer's reserved markers, inserted as ids, never parsed from text
(a user writing ``<|assistant|>`` gets the characters, not the marker)::

    [<bos>] [<|system|> system <|end|>] (<|user|> content <|end|> | <|assistant|> content <|end|>)...

Columns written (see docs/loader.md):

* SFT: ``tokens`` (the whole conversation), ``loss_mask`` (1 on the tokens the model is
  trained to produce: each assistant content and its ``<|end|>``; 0 elsewhere),
  ``num_tokens``.
* DPO: ``prompt_tokens`` (ends with ``<|assistant|>``), ``chosen_tokens`` and
  ``rejected_tokens`` (response + ``<|end|>``), ``num_tokens`` = prompt + the longer
  response (the padded row length the loader plans with).

With a Hugging Face tokenizer directory (``tokenizer.json`` + ``tokenizer_config.json``
with a ``chat_template``) the conversation is rendered by that template instead
(:mod:`dataforge.tokenization.hf_tokenizer`): learned tokens are each assistant turn's
content and end-of-turn text, ``add_bos`` is left to the template, and DPO prompts end
with the template's generation prompt.

Records that cannot be formatted are dropped with ``format:missing_field`` (a required
field is absent or not a string) or ``format:bad_messages`` (not a list of
``{role, content}`` turns with user/assistant roles and an assistant turn to learn).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa

from dataforge.ops.base import Mapper
from dataforge.records import DROP, meta_dicts
from dataforge.typed_config import check_choices

__all__ = ["CHAT_MARKERS", "FormatDPO", "FormatSFT"]

CHAT_MARKERS = {
    "system": "<|system|>",
    "user": "<|user|>",
    "assistant": "<|assistant|>",
    "end": "<|end|>",
}
ROLES = ("system", "user", "assistant")

# A rendered conversation: (marker or text, is_target) pieces; a str is text to encode,
# an int is a marker id.
Piece = tuple[int | str, bool]


class _BadRecord(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _ChatOp(Mapper):
    """Shared tokenizer handling and template rendering of the two chat ops."""

    def __init__(self, config: Any, context=None) -> None:  # noqa: ANN001 - OpContext
        super().__init__(config, context)
        self._tokenizer = None

    def tokenizer_dir(self) -> Path:
        return self.context.local_path(self.config.tokenizer)

    def validate(self) -> list[str]:
        from dataforge.tokenization import read_tokenizer_json
        from dataforge.tokenization.hf_tokenizer import is_hf_tokenizer_dir

        if is_hf_tokenizer_dir(self.tokenizer_dir()):
            return self._validate_hf()
        try:
            meta = read_tokenizer_json(self.tokenizer_dir())
        except (FileNotFoundError, ValueError) as exc:
            return [f"{self.name}: {exc}"]
        missing = [m for m in CHAT_MARKERS.values() if m not in meta.get("special_tokens", {})]
        return [f"{self.name}: tokenizer lacks chat markers {missing}"] if missing else []

    def _validate_hf(self) -> list[str]:
        config = self.tokenizer_dir() / "tokenizer_config.json"
        try:
            template = json.loads(config.read_text(encoding="utf-8")).get("chat_template")
        except (OSError, ValueError) as exc:
            return [f"{self.name}: {config}: unreadable ({exc})"]
        has_file = (self.tokenizer_dir() / "chat_template.jinja").is_file()
        return [] if template or has_file else [f"{self.name}: {config} has no chat_template"]

    def setup(self) -> None:
        from dataforge.tokenization.hf_tokenizer import load_tokenizer

        self.use_tokenizer(load_tokenizer(self.tokenizer_dir()))

    def use_tokenizer(self, tokenizer: Any) -> None:
        """Use an already loaded tokenizer (anything with the Tokenizer interface)."""
        if hasattr(tokenizer, "chat_pieces"):  # a Hugging Face tokenizer: its template
            self._tokenizer, self._markers = tokenizer, {}
            return
        missing = [m for m in CHAT_MARKERS.values() if m not in tokenizer.special_tokens]
        if missing:
            raise ValueError(
                f"{self.name}: tokenizer lacks chat markers {missing}; retrain it with them"
            )
        self._tokenizer = tokenizer
        self._markers = {role: tokenizer.special_tokens[m] for role, m in CHAT_MARKERS.items()}

    @property
    def tokenizer(self) -> Any:
        """The loaded tokenizer (``setup()`` loads it; used directly if it was not called)."""
        if self._tokenizer is None:
            self.setup()
        return self._tokenizer

    @property
    def markers(self) -> dict[str, int]:
        """Chat marker ids by role (``system``, ``user``, ``assistant``, ``end``)."""
        self.tokenizer  # noqa: B018 - loads the tokenizer (and its markers) on first use
        return self._markers

    def _token_dtype(self) -> str:
        from dataforge.tokenization.hf_tokenizer import tokenizer_vocab_size

        try:
            vocab_size = tokenizer_vocab_size(self.tokenizer_dir())
        except (FileNotFoundError, ValueError):
            vocab_size = 1 << 16  # unknown here; validate() reports it, int32 is safe
        return "uint16" if vocab_size < (1 << 16) else "int32"

    # -- rendering --------------------------------------------------------------------
    def _field(self, meta: dict, key: str, text: str | None = None) -> str:
        value = meta.get(key, text)
        if not isinstance(value, str):
            raise _BadRecord("format:missing_field")
        return value

    def _turns(self, messages: Any) -> list[tuple[str, str]]:
        if not isinstance(messages, list) or not messages:
            raise _BadRecord("format:bad_messages")
        turns = []
        for i, turn in enumerate(messages):
            if (
                not isinstance(turn, dict)
                or turn.get("role") not in ROLES
                or not isinstance(turn.get("content"), str)
            ):
                raise _BadRecord("format:bad_messages")
            if turn["role"] == "system" and i != 0:
                raise _BadRecord("format:bad_messages")
            turns.append((turn["role"], turn["content"]))
        return turns

    def _render(
        self, turns: list[tuple[str, str]], targets: set[int], open_assistant: bool
    ) -> list[Piece]:
        """Pieces of ``turns``; turn indices in ``targets`` are learned (content + end).
        ``open_assistant`` appends the ``<|assistant|>`` marker the response follows."""
        if hasattr(self.tokenizer, "chat_pieces"):
            try:
                return self.tokenizer.chat_pieces(turns, targets, open_assistant)
            except (ValueError, TypeError) as exc:  # jinja raises TypeError on odd turns
                raise _BadRecord("format:bad_messages") from exc
        pieces: list[Piece] = []
        if self.config.add_bos:
            pieces.append((self.tokenizer.bos_id, False))
        for i, (role, content) in enumerate(turns):
            learn = i in targets
            pieces += [(self.markers[role], False), (content, learn), (self.markers["end"], learn)]
        if open_assistant:
            pieces.append((self.markers["assistant"], False))
        return pieces

    def _encode(
        self, rendered: list[list[list[Piece]]]
    ) -> list[list[tuple[np.ndarray, np.ndarray]]]:
        """Encode every text piece of the batch in one tokenizer call; returns per record,
        per part: (token ids, target mask)."""
        texts = [p for record in rendered for part in record for p, _ in part if isinstance(p, str)]
        encoded = iter(self.tokenizer.encode_batch(texts)) if texts else iter(())
        out = []
        for record in rendered:
            parts = []
            for part in record:
                ids, mask = [], []
                for piece, learn in part:
                    chunk = next(encoded) if isinstance(piece, str) else [piece]
                    ids.append(np.asarray(chunk, np.int32))
                    mask.append(np.full(len(chunk), learn, np.uint8))
                parts.append(
                    (
                        np.concatenate(ids) if ids else np.zeros(0, np.int32),
                        np.concatenate(mask) if mask else np.zeros(0, np.uint8),
                    )
                )
            out.append(parts)
        return out

    def _format(self, live: pa.Table, render_one) -> tuple[list, list[str | None], list[str]]:  # noqa: ANN001
        metas = meta_dicts(live)
        texts = live.column("text").to_pylist()
        rendered, reasons, shown = [], [], []
        for meta, text in zip(metas, texts, strict=True):
            try:
                parts, transcript = render_one(meta, text)
                reasons.append(None)
            except _BadRecord as bad:
                parts, transcript = [[] for _ in range(self._parts)], text or ""
                reasons.append(bad.reason)
            rendered.append(parts)
            shown.append(transcript)
        return self._encode(rendered), reasons, shown

    _parts = 1

    @staticmethod
    def _transcript(turns: list[tuple[str, str]]) -> str:
        return "".join(
            f"{CHAT_MARKERS[role]}{content}{CHAT_MARKERS['end']}" for role, content in turns
        )


def _list_column(arrays: list[np.ndarray], value_type: pa.DataType) -> pa.Array:
    offsets = np.concatenate([[0], np.cumsum([len(a) for a in arrays])]).astype(np.int32)
    values = np.concatenate(arrays) if arrays else np.zeros(0)
    return pa.ListArray.from_arrays(
        pa.array(offsets), pa.array(values.astype(value_type.to_pandas_dtype()))
    )


def _with_columns(
    live: pa.Table, columns: dict[str, pa.Array], reasons: list[str | None], text: list[str]
) -> pa.Table:
    for name, column in columns.items():
        if name in live.column_names:
            live = live.drop_columns([name])
        live = live.append_column(pa.field(name, column.type), column)
    drops = [
        old if old is not None else new
        for old, new in zip(live.column(DROP).to_pylist(), reasons, strict=True)
    ]
    live = live.set_column(live.schema.get_field_index(DROP), DROP, pa.array(drops, pa.string()))
    return live.set_column(live.schema.get_field_index("text"), "text", pa.array(text, pa.string()))


class FormatSFT(_ChatOp):
    """Render prompt/response or ``messages`` records into ``tokens`` + ``loss_mask``."""

    name = "format_sft"

    @dataclasses.dataclass(frozen=True)
    class Config:
        tokenizer: str
        """Tokenizer directory with the chat markers, or a Hugging Face tokenizer directory
        with a chat template; relative to the pipeline file."""
        prompt_key: str = "prompt"
        """meta key of the user prompt (falls back to the record's text)."""
        response_key: str = "response"
        messages_key: str = "messages"
        """meta key of a ``[{role, content}, ...]`` conversation; used when present."""
        system_key: str = "system"
        """meta key of an optional system prompt (prompt/response records)."""
        train_on: Literal["all_assistant", "last_assistant"] = "all_assistant"
        """Which assistant turns of a conversation are learned."""
        add_bos: bool = True

        def __post_init__(self) -> None:
            if not self.tokenizer:
                raise ValueError("tokenizer: give the path of a trained tokenizer directory")
            check_choices(self)

    def mds_encodings(self) -> dict[str, str]:
        return {
            "tokens": f"ndarray:{self._token_dtype()}",
            "loss_mask": "ndarray:uint8",
            "num_tokens": "int",
        }

    def _render_record(self, meta: dict, text: str | None) -> tuple[list[list[Piece]], str]:
        cfg = self.config
        if cfg.messages_key in meta:
            turns = self._turns(meta[cfg.messages_key])
        else:
            turns = [
                ("user", self._field(meta, cfg.prompt_key, text)),
                ("assistant", self._field(meta, cfg.response_key)),
            ]
            if cfg.system_key in meta:
                turns.insert(0, ("system", self._field(meta, cfg.system_key)))
        learned = [i for i, (role, _) in enumerate(turns) if role == "assistant"]
        if not learned:
            raise _BadRecord("format:bad_messages")
        targets = set(learned if cfg.train_on == "all_assistant" else learned[-1:])
        return [self._render(turns, targets, open_assistant=False)], self._transcript(turns)

    def transform(self, live: pa.Table) -> pa.Table:
        encoded, reasons, text = self._format(live, self._render_record)
        tokens = [parts[0][0] for parts in encoded]
        masks = [parts[0][1] for parts in encoded]
        columns = {
            "tokens": _list_column(tokens, pa.int32()),
            "loss_mask": _list_column(masks, pa.uint8()),
            "num_tokens": pa.array([len(t) for t in tokens], pa.int64()),
        }
        return _with_columns(live, columns, reasons, text)


class FormatDPO(_ChatOp):
    """Render prompt/chosen/rejected records into three token columns."""

    name = "format_dpo"
    _parts = 3

    @dataclasses.dataclass(frozen=True)
    class Config:
        tokenizer: str
        """Tokenizer directory with the chat markers, or a Hugging Face tokenizer directory
        with a chat template; relative to the pipeline file."""
        prompt_key: str = "prompt"
        """meta key of the prompt: a string, or a ``[{role, content}, ...]`` context that
        ends with a user turn (falls back to the record's text)."""
        chosen_key: str = "chosen"
        rejected_key: str = "rejected"
        system_key: str = "system"
        add_bos: bool = True

        def __post_init__(self) -> None:
            if not self.tokenizer:
                raise ValueError("tokenizer: give the path of a trained tokenizer directory")

    def mds_encodings(self) -> dict[str, str]:
        dtype = f"ndarray:{self._token_dtype()}"
        return {
            "prompt_tokens": dtype,
            "chosen_tokens": dtype,
            "rejected_tokens": dtype,
            "num_tokens": "int",
        }

    def _render_record(self, meta: dict, text: str | None) -> tuple[list[list[Piece]], str]:
        cfg = self.config
        prompt = meta.get(cfg.prompt_key, text)
        if isinstance(prompt, list):
            turns = self._turns(prompt)
            if turns[-1][0] != "user":
                raise _BadRecord("format:bad_messages")
        else:
            turns = [("user", self._field(meta, cfg.prompt_key, text))]
            if cfg.system_key in meta:
                turns.insert(0, ("system", self._field(meta, cfg.system_key)))
        chosen, rejected = self._field(meta, cfg.chosen_key), self._field(meta, cfg.rejected_key)
        responses = [self._response(turns, c) for c in (chosen, rejected)]
        shown = self._transcript([*turns, ("assistant", chosen)])
        return [self._render(turns, set(), open_assistant=True), *responses], shown

    def _response(self, turns: list[tuple[str, str]], content: str) -> list[Piece]:
        """A response after the prompt's open assistant turn: content + end, learned."""
        if not hasattr(self.tokenizer, "chat_pieces"):
            return [(content, True), (self.markers["end"], True)]
        full = self._render([*turns, ("assistant", content)], {len(turns)}, False)
        prompt = self._render(turns, set(), open_assistant=True)
        if full[: len(prompt)] != prompt:
            raise _BadRecord("format:bad_messages")
        return full[len(prompt) :]

    def transform(self, live: pa.Table) -> pa.Table:
        encoded, reasons, text = self._format(live, self._render_record)
        prompt, chosen, rejected = ([parts[i][0] for parts in encoded] for i in range(3))
        columns = {
            "prompt_tokens": _list_column(prompt, pa.int32()),
            "chosen_tokens": _list_column(chosen, pa.int32()),
            "rejected_tokens": _list_column(rejected, pa.int32()),
            "num_tokens": pa.array(
                [
                    len(p) + max(len(c), len(r))
                    for p, c, r in zip(prompt, chosen, rejected, strict=True)
                ],
                pa.int64(),
            ),
        }
        return _with_columns(live, columns, reasons, text)
