"""format_sft / format_dpo: exact token columns and masks with a character-level tokenizer
that implements the Tokenizer interface, and the round trip ops -> MDS sink -> loader."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from dataforge.io.sinks import PartWriter
from dataforge.loader import IGNORE_INDEX, LoaderConfig, build_dataloader
from dataforge.ops.base import op_class
from dataforge.ops.formatting import FormatDPO, FormatSFT
from dataforge.records import BASE_SCHEMA

SPECIALS = {
    "<pad>": 0,
    "<bos>": 1,
    "<eos>": 2,
    "<unk>": 3,
    "<|system|>": 4,
    "<|user|>": 5,
    "<|assistant|>": 6,
    "<|end|>": 7,
}
BOS, SYS, USR, AST, END = 1, 4, 5, 6, 7


class CharTokenizer:
    """One id per character (ord + 16), the Tokenizer interface's encoding half."""

    vocab_size = 70000
    special_tokens = SPECIALS
    bos_id, eos_id, pad_id, unk_id = 1, 2, 0, 3

    def encode(self, text: str, add_bos: bool = False, add_eos: bool = False) -> list[int]:
        return [self.bos_id] * add_bos + [ord(c) + 16 for c in text] + [self.eos_id] * add_eos

    def encode_batch(self, texts, add_bos: bool = False, add_eos: bool = False) -> list[list[int]]:
        return [self.encode(t, add_bos, add_eos) for t in texts]


def ids(text: str) -> list[int]:
    return [ord(c) + 16 for c in text]


def records(
    metas: list[dict], texts: list[str] | None = None, drops: list[str | None] | None = None
) -> pa.Table:
    n = len(metas)
    return pa.table(
        {
            "id": [f"r{i}" for i in range(n)],
            "text": texts or ["" for _ in range(n)],
            "source": ["chat"] * n,
            "lang": ["en"] * n,
            "meta": [json.dumps(m, ensure_ascii=False) for m in metas],
            "drop": drops or [None] * n,
            "_ord": list(range(n)),
        },
        schema=BASE_SCHEMA,
    )


def _op(cls, **kw):
    op = cls(cls.Config(tokenizer="unused", **kw))
    op.use_tokenizer(CharTokenizer())
    return op


def test_registry_resolves_the_format_ops():
    assert op_class("format_sft") is FormatSFT and op_class("format_dpo") is FormatDPO


def test_sft_prompt_response_tokens_and_loss_mask():
    out = _op(FormatSFT)(
        records(
            [{"prompt": "hi", "response": "yo"}, {"system": "be", "response": "ok"}], ["", "q?"]
        )
    )
    row = out.to_pylist()
    assert row[0]["tokens"] == [BOS, USR, *ids("hi"), END, AST, *ids("yo"), END]
    assert row[0]["loss_mask"] == [0, 0, 0, 0, 0, 0, 1, 1, 1]
    assert row[0]["num_tokens"] == 9 and row[0]["drop"] is None
    assert row[0]["text"] == "<|user|>hi<|end|><|assistant|>yo<|end|>"
    # the prompt falls back to the record's text (reader text_key: prompt); system first
    assert row[1]["tokens"] == [
        BOS,
        SYS,
        *ids("be"),
        END,
        USR,
        *ids("q?"),
        END,
        AST,
        *ids("ok"),
        END,
    ]
    assert row[1]["loss_mask"] == [0] * 10 + [1, 1, 1]


def test_sft_messages_learn_every_or_only_the_last_assistant_turn():
    messages = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b"},
        {"role": "user", "content": "c"},
        {"role": "assistant", "content": "d"},
    ]
    tokens = [
        BOS,
        USR,
        *ids("a"),
        END,
        AST,
        *ids("b"),
        END,
        USR,
        *ids("c"),
        END,
        AST,
        *ids("d"),
        END,
    ]
    every = _op(FormatSFT)(records([{"messages": messages}])).to_pylist()[0]
    assert every["tokens"] == tokens
    assert every["loss_mask"] == [0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 1, 1]
    last = _op(FormatSFT, train_on="last_assistant")(records([{"messages": messages}])).to_pylist()[
        0
    ]
    assert last["loss_mask"] == [0] * 11 + [1, 1]


def test_marker_text_in_content_is_not_a_marker():
    row = _op(FormatSFT)(records([{"prompt": "<|assistant|>", "response": "x"}])).to_pylist()[0]
    assert row["tokens"][2:15] == ids("<|assistant|>") and row["tokens"].count(AST) == 1


def test_bad_records_are_dropped_with_reasons_and_earlier_drops_kept():
    metas = [
        {"prompt": "p"},  # no response
        {"messages": [{"role": "user", "content": "only a question"}]},
        {"messages": [{"role": "user", "content": "x"}, {"role": "system", "content": "late"}]},
        {"prompt": "p", "response": 3},
        {"prompt": "p", "response": "r"},
    ]
    out = _op(FormatSFT)(records(metas, drops=[None, None, None, None, "too_short"]))
    assert out.column("drop").to_pylist() == [
        "format:missing_field",
        "format:bad_messages",
        "format:bad_messages",
        "format:missing_field",
        "too_short",
    ]


def test_dpo_columns_and_num_tokens():
    meta = {"prompt": "q", "chosen": "good", "rejected": "no"}
    row = _op(FormatDPO)(records([meta])).to_pylist()[0]
    assert row["prompt_tokens"] == [BOS, USR, *ids("q"), END, AST]
    assert row["chosen_tokens"] == [*ids("good"), END]
    assert row["rejected_tokens"] == [*ids("no"), END]
    assert row["num_tokens"] == 5 + 5
    context = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b"},
        {"role": "user", "content": "c"},
    ]
    row = _op(FormatDPO)(
        records([{"prompt": context, "chosen": "y", "rejected": "n"}])
    ).to_pylist()[0]
    assert row["prompt_tokens"] == [
        BOS,
        USR,
        *ids("a"),
        END,
        AST,
        *ids("b"),
        END,
        USR,
        *ids("c"),
        END,
        AST,
    ]
    bad = _op(FormatDPO)(
        records(
            [
                {"prompt": "q", "chosen": "y"},
                {"prompt": context[:2], "chosen": "y", "rejected": "n"},
            ]
        )
    )
    assert bad.column("drop").to_pylist() == ["format:missing_field", "format:bad_messages"]


def test_mds_encodings_follow_the_vocab_size(tmp_path):
    tok_dir = tmp_path / "tok"
    tok_dir.mkdir()
    sft = FormatSFT(FormatSFT.Config(tokenizer=str(tok_dir)))
    # no tokenizer.json here: int32 is the safe choice, and validate() says why
    assert sft.mds_encodings() == {
        "tokens": "ndarray:int32",
        "loss_mask": "ndarray:uint8",
        "num_tokens": "int",
    }
    assert sft.validate() and "format_sft" in sft.validate()[0]
    assert set(FormatDPO(FormatDPO.Config(tokenizer=str(tok_dir))).mds_encodings()) == {
        "prompt_tokens",
        "chosen_tokens",
        "rejected_tokens",
        "num_tokens",
    }


def _write(tmp_path, op, table):
    declared = op.mds_encodings()  # int32 ids: the tokenizer dir is not readable here
    writer = PartWriter(
        tmp_path / "mds", "mds", declared, compression="zstd", size_limit=1 << 12, hashes=("xxh64",)
    )
    writer.write(op(table))
    return writer.close()


@pytest.mark.parametrize("packing", [False, True])
def test_sft_records_through_the_sink_and_loader_train_only_on_responses(tmp_path, packing):
    rng = np.random.default_rng(0)
    metas = [
        {"prompt": "q" * int(rng.integers(1, 30)), "response": "r" * int(rng.integers(1, 30))}
        for _ in range(60)
    ]
    op = _op(FormatSFT)
    assert _write(tmp_path, op, records(metas)) == 60
    cfg = LoaderConfig(
        streams=[str(tmp_path / "mds")],
        mode="sft",
        max_tokens=256,
        max_seq_len=64,
        packing=packing,
        cache_dir=str(tmp_path / "cache"),
    )
    with build_dataloader(cfg) as loader:
        learned = prompts = 0
        for batch in loader:
            targets = batch["labels"][batch["labels"] != IGNORE_INDEX]
            assert set(targets.tolist()) <= {ord("r") + 16, END}  # never a prompt or marker token
            learned += len(targets)
            prompts += int((batch["input_ids"] == USR).sum())
    assert prompts == 60
    assert learned == sum(len(m["response"]) + 1 for m in metas)


def test_dpo_records_through_the_sink_and_loader(tmp_path):
    metas = [
        {"prompt": f"q{i}", "chosen": "y" * (i % 7 + 1), "rejected": "n" * (i % 5 + 1)}
        for i in range(40)
    ]
    op = _op(FormatDPO)
    assert _write(tmp_path, op, records(metas)) == 40
    cfg = LoaderConfig(
        streams=[str(tmp_path / "mds")],
        mode="dpo",
        max_tokens=256,
        max_seq_len=32,
        cache_dir=str(tmp_path / "cache"),
    )
    with build_dataloader(cfg) as loader:
        pairs = 0
        for batch in loader:
            for side, char in (("chosen", "y"), ("rejected", "n")):
                targets = batch[f"{side}_labels"][batch[f"{side}_labels"] != IGNORE_INDEX]
                assert set(targets.tolist()) <= {ord(char) + 16, END}
            pairs += batch["chosen_input_ids"].shape[0]
    assert pairs == 40
