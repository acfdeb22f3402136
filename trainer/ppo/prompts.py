"""Prompt sources of the PPO stage: token-id prompts in order, epoch after epoch, with a
position that checkpoints save and restore.

* :class:`LoaderPrompts`: the dataforge loader over SFT or DPO MDS shards (``data.loader``);
  a row's prompt is its tokens up to the first learned one (the ``<|assistant|>`` marker
  the response follows).
* :class:`JsonlPrompts`: a JSONL file (``ppo.prompts``), one object a line with
  ``prompt_tokens`` (ids) or ``prompt`` (text, rendered in the chat layout of
  :mod:`dataforge.ops.formatting`: ``[<bos>] <|user|> text <|end|> <|assistant|>``).

Prompts longer than the limit are dropped and counted (``dropped``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from trainer.config import ConfigError, TrainerConfig
from trainer.data.sources import BatchSource, build_batch_source

__all__ = ["JsonlPrompts", "LoaderPrompts", "build_prompt_source", "prompts_of_batch"]

IGNORE_INDEX = -100


def prompts_of_batch(batch: dict[str, torch.Tensor]) -> list[list[int]]:
    """Each row's tokens before its first learned response token (SFT or DPO batch)."""
    prefix = "chosen_" if "chosen_input_ids" in batch else ""
    ids, labels = batch[prefix + "input_ids"], batch[prefix + "labels"]
    prompts = []
    for row, row_labels in zip(ids.tolist(), labels.tolist(), strict=True):
        first = next((i for i, label in enumerate(row_labels) if label != IGNORE_INDEX), None)
        if first is not None:  # labels are shifted: label t is the target after token t
            prompts.append(row[: first + 1])
    return prompts


class _Prompts:
    """Shared by the sources: ``take(n)`` the next ``n`` prompts within ``max_len``."""

    def __init__(self, max_len: int) -> None:
        self.max_len, self.dropped = max_len, 0

    def _next_prompt(self) -> list[int]:
        raise NotImplementedError

    def take(self, n: int) -> list[list[int]]:
        taken: list[list[int]] = []
        while len(taken) < n:
            prompt = self._next_prompt()
            if len(prompt) > self.max_len:
                self.dropped += 1
            else:
                taken.append(prompt)
        return taken


class LoaderPrompts(_Prompts):
    """Prompts of a loader batch source; rows left over from a batch wait for the next
    ``take`` (and are saved with the position)."""

    def __init__(self, source: BatchSource, max_len: int) -> None:
        super().__init__(max_len)
        self.source, self.pending = source, []
        self._batches: Iterator[dict] | None = None

    def _next_prompt(self) -> list[int]:
        empty_epochs = 0
        while not self.pending:
            if self._batches is None:
                self._batches = iter(self.source)
            batch = next(self._batches, None)
            if batch is None:
                self._batches = None
                empty_epochs += 1
                if empty_epochs > 1:
                    raise ConfigError("data.loader: the prompt shards hold no prompt")
                continue
            empty_epochs = 0
            self.pending = prompts_of_batch(batch)
        return self.pending.pop(0)

    def state_dict(self) -> dict[str, Any]:
        return {
            "source": self.source.state_dict(),
            "pending": [list(p) for p in self.pending],
            "dropped": self.dropped,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.source.load_state_dict(state["source"])
        self.pending, self.dropped = [list(p) for p in state["pending"]], int(state["dropped"])
        self._batches = None

    def close(self) -> None:
        if hasattr(self.source, "close"):
            self.source.close()


class JsonlPrompts(_Prompts):
    """The prompts of a JSONL file, read and checked at start, in file order."""

    def __init__(self, prompts: list[list[int]], max_len: int) -> None:
        super().__init__(max_len)
        if not prompts:
            raise ConfigError("ppo.prompts: the file holds no prompt")
        self.prompts, self.index, self.epoch = prompts, 0, 0

    def _next_prompt(self) -> list[int]:
        if self.index == len(self.prompts):
            self.index, self.epoch = 0, self.epoch + 1
        self.index += 1
        return self.prompts[self.index - 1]

    def state_dict(self) -> dict[str, Any]:
        return {"index": self.index, "epoch": self.epoch, "dropped": self.dropped}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.index, self.epoch = int(state["index"]), int(state["epoch"])
        self.dropped = int(state["dropped"])

    @classmethod
    def read(cls, path: str | Path, tokenizer: str | None, vocab: int, max_len: int):
        """Read ``path`` (see the module doc).

        Raises:
            ConfigError: unreadable file, a line that is not such an object, an id outside
                the vocabulary, or text prompts without a tokenizer.
        """
        try:
            lines = Path(path).read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise ConfigError(f"ppo.prompts {path}: {exc.strerror or exc}") from None
        prompts, texts = [], {}
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError:
                record = None
            where = f"ppo.prompts {path}:{n}"
            ids = record.get("prompt_tokens") if isinstance(record, dict) else None
            text = record.get("prompt") if isinstance(record, dict) else None
            if isinstance(ids, list) and ids and all(isinstance(i, int) for i in ids):
                if not all(0 <= i < vocab for i in ids):
                    raise ConfigError(f"{where}: prompt_tokens has ids outside 0..{vocab - 1}")
                prompts.append(ids)
            elif isinstance(text, str) and text:
                texts[len(prompts)] = text
                prompts.append([])
            else:
                raise ConfigError(
                    f"{where}: need an object with prompt_tokens (a list of ids) or prompt (text)"
                )
        if texts:
            if tokenizer is None:
                raise ConfigError(f"ppo.prompts {path}: text prompts need the tokenizer key")
            for i, ids in zip(texts, _render_prompts(tokenizer, list(texts.values())), strict=True):
                prompts[i] = ids
        return cls(prompts, max_len)


def _render_prompts(tokenizer_dir: str, texts: list[str]) -> list[list[int]]:
    """Token ids of single-turn user prompts in the chat layout, ending where the
    assistant's response starts."""
    from dataforge.ops.formatting import CHAT_MARKERS
    from dataforge.tokenization.hf_tokenizer import load_tokenizer

    tokenizer = load_tokenizer(tokenizer_dir)
    if hasattr(tokenizer, "chat_pieces"):  # a Hugging Face tokenizer: its own template
        rendered = [tokenizer.chat_pieces([("user", t)], set(), True) for t in texts]
    else:
        special = tokenizer.special_tokens
        missing = [m for m in CHAT_MARKERS.values() if m not in special]
        if missing:
            raise ConfigError(f"tokenizer {tokenizer_dir}: lacks chat markers {missing}")
        user, end, assistant = (special[CHAT_MARKERS[r]] for r in ("user", "end", "assistant"))
        rendered = [[(tokenizer.bos_id, False), (user, False), (t, False), (end, False),
                     (assistant, False)] for t in texts]  # fmt: skip
    pieces = [p for record in rendered for p, _ in record if isinstance(p, str)]
    encoded = iter(tokenizer.encode_batch(pieces)) if pieces else iter(())
    return [
        [i for p, _ in record for i in (next(encoded) if isinstance(p, str) else [p])]
        for record in rendered
    ]


class _LoaderMode:
    """What :func:`trainer.data.sources.build_batch_source` asks of a stage: its loader mode."""

    synthetic_data = False

    def __init__(self, mode: str) -> None:
        self.loader_mode = mode


def build_prompt_source(config: TrainerConfig, max_len: int) -> LoaderPrompts | JsonlPrompts:
    """The prompts ``config`` names: ``ppo.prompts`` (JSONL) or ``data.loader``.

    Raises:
        ConfigError: neither is given, a packed or unknown loader mode, or bad prompts.
    """
    if config.ppo.prompts is not None:
        vocab = config.model.vocab_size
        return JsonlPrompts.read(config.ppo.prompts, config.tokenizer, vocab, max_len)
    loader = config.data.loader
    if config.data.source != "loader" or not loader.get("streams"):
        raise ConfigError("ppo needs prompts: set ppo.prompts (JSONL) or data.loader.streams")
    mode = loader.get("mode", "dpo")
    if mode not in ("sft", "dpo") or loader.get("packing"):
        raise ConfigError(
            f"data.loader.mode {mode!r} packing {loader.get('packing', False)}: ppo reads "
            "prompts from unpacked sft or dpo shards"
        )
    return LoaderPrompts(build_batch_source(config, _LoaderMode(mode), 0, 1), max_len)
