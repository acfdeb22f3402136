"""The exported tokenizer encodes what the pipeline trained on, in transformers and TRL.

A tokenizer is trained on two of the real-text fixtures; the third (reviews) is held out.
The training data's pipeline run is a ``manifest.json`` next to the stream's ``mds/``:
``clean`` with traditional -> simplified conversion, then ``format_sft``. The export of a
tiny model over that data must encode raw text as the pipeline encoded its cleaned form,
carry the trained BOS rule, length and eos set, and mark the tokens ``format_sft`` learns.
"""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path

import pyarrow as pa
import pytest
import torch

from dataforge.ops.formatting import FormatSFT
from dataforge.records import BASE_SCHEMA
from dataforge.text.clean import CleanConfig, clean_text
from dataforge.text.script import convert_script
from trainer.checkpoint.export import write_export
from trainer.config import config_from_mapping
from trainer.model.transformer import Transformer

transformers = pytest.importorskip("transformers")

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "tokenization"
RECIPE = CleanConfig(convert="t2s")
MAX_SEQ_LEN = 96
# What raw text holds that clean rewrites: full-width forms, Unicode and odd spaces,
# invisible and control characters, CR LF line ends, blank-line runs, ligatures.
NOISE = [
    "，", "：", "；", "（", "）", "！", "？", "Ａ", "ｚ", "９", "\u3000", "\xa0", "\u2009",
    "\u200b", "\ufeff", "\x07", "\r\n", " \t\n", "  ", "\n\n\n\n", "…", "ﬁ", "\u2028",
]  # fmt: skip
CONVERSATION = [
    {"role": "system", "content": "You answer\u3000briefly."},
    {"role": "user", "content": "這家餐廳的服務怎麼樣？ Was it good? "},
    {"role": "assistant", "content": "服務很好， the staff were friendly."},
    {"role": "user", "content": "And the  prices？"},
    {"role": "assistant", "content": "偏貴 but ｆａｉｒ."},
]


def _texts(name: str) -> list[str]:
    lines = (FIXTURES / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["text"] for line in lines]


@pytest.fixture(scope="module")
def export(tmp_path_factory) -> dict:
    from dataforge.tokenization import Tokenizer, TokenizerSpec, train_tokenizer

    root = tmp_path_factory.mktemp("export_tok")
    spec = TokenizerSpec(
        name="chat",
        inputs=(str(FIXTURES / "zh_news.jsonl"), str(FIXTURES / "en_docs.jsonl")),
        vocab_size=2000,
        character_coverage=0.995,
        num_threads=1,
    )
    train_tokenizer(spec, root / "tokenizer")
    tokenizer = Tokenizer.load(root / "tokenizer")
    run = root / "out" / "sft"
    run.mkdir(parents=True)
    stages = [
        {"op": "clean", **dataclasses.asdict(RECIPE)},
        {"op": "format_sft", "tokenizer": str(root / "tokenizer"), "add_bos": True},
    ]
    (run / "manifest.json").write_text(json.dumps({"config": {"stages": stages}}))
    config = config_from_mapping(
        {
            "tokenizer": str(root / "tokenizer"),
            "model": {
                "preset": "tiny",
                "vocab_size": tokenizer.vocab_size,
                "max_seq_len": MAX_SEQ_LEN,
            },
            "train": {"max_steps": 1},
            "optim": {"warmup_steps": 0},
            "data": {"loader": {"streams": [{"path": str(run / "mds")}]}},
        }
    )
    torch.manual_seed(0)
    weights = Transformer(config.model).state_dict()
    info = {"stage": "sft", "step": 1, "tokenizer": str(root / "tokenizer")}
    write_export(weights, config, root / "export", info)
    hf = transformers.AutoTokenizer.from_pretrained(str(root / "export"), trust_remote_code=True)
    return {"root": root, "dir": root / "export", "tokenizer": tokenizer, "hf": hf}


def _held_out_raw_texts(count: int, seed: int = 0) -> list[str]:
    """Windows of the held-out reviews, half turned traditional, with noise inserted."""
    rng = random.Random(seed)
    reviews = _texts("zh_reviews")
    windows = []
    for _ in range(count):
        text = rng.choice(reviews)
        start = rng.randrange(max(1, len(text) - 20))
        windows.append(text[start : start + rng.randint(20, 160)])
    traditional = convert_script(pa.array(windows), "s2t").to_pylist()
    raw = []
    for k, text in enumerate(windows):
        chars = list(traditional[k] if k % 2 else text)
        for _ in range(rng.randint(1, 8)):
            chars.insert(rng.randrange(len(chars) + 1), rng.choice(NOISE))
        raw.append("".join(chars))
    return raw


def test_raw_text_gets_the_ids_of_its_cleaned_form(export):
    hf, tokenizer = export["hf"], export["tokenizer"]
    raw = _held_out_raw_texts(1000)
    cleaned = clean_text(pa.array(raw), RECIPE).to_pylist()
    assert sum(r != c for r, c in zip(raw, cleaned, strict=True)) == 1000
    expected = tokenizer.encode_batch(cleaned, add_bos=True)
    assert [hf(text)["input_ids"] for text in raw] == expected
    # Cleaned text is a fixed point: raw and cleaned forms share their ids.
    assert [hf(text)["input_ids"] for text in cleaned[:100]] == expected[:100]
    # The full-width comma of a prompt is the ASCII comma training saw, not three bytes.
    assert hf("你好，世界")["input_ids"] == hf("你好,世界")["input_ids"]
    assert hf("這個")["input_ids"] == hf("这个")["input_ids"]


def test_config_follows_training(export):
    hf, tokenizer = export["hf"], export["tokenizer"]
    assert hf.add_bos_token and hf("hi")["input_ids"][0] == tokenizer.bos_id
    assert hf.model_max_length == MAX_SEQ_LEN
    assert hf.padding_side == "left"
    batch = hf(["a", "a longer text"], padding=True)["input_ids"]
    assert batch[0][0] == tokenizer.pad_id and batch[1][0] == tokenizer.bos_id
    special = tokenizer.special_tokens
    generation = json.loads((export["dir"] / "generation_config.json").read_text())
    assert generation["eos_token_id"] == [special["<eos>"], special["<|end|>"]]
    assert generation["bos_token_id"] == special["<bos>"]


def test_save_pretrained_keeps_the_settings(export, tmp_path):
    text = "這個，\u3000好"
    export["hf"].save_pretrained(tmp_path)
    again = transformers.AutoTokenizer.from_pretrained(str(tmp_path), trust_remote_code=True)
    assert again(text)["input_ids"] == export["hf"](text)["input_ids"]
    assert (again.padding_side, again.model_max_length) == ("left", MAX_SEQ_LEN)


def test_no_local_paths_and_files_readable_by_all(export):
    root = export["root"]
    files = [p for p in export["dir"].rglob("*") if p.is_file()]
    assert {p.name for p in files} >= {"model.safetensors", "config.json", "tokenizer_config.json"}
    for path in files:
        data = path.read_bytes()
        for local in (root / "export", root / "tokenizer", root):
            assert str(local).encode() not in data, (path.name, str(local))
        assert path.stat().st_mode & 0o044 == 0o044, path.name
    card = json.loads((export["dir"] / "config.json").read_text())
    assert card["dataforge"]["tokenizer"] == "tokenizer"


def _format_sft(tokenizer, messages: list[dict]) -> dict:
    op = FormatSFT(FormatSFT.Config(tokenizer="unused"))
    op.use_tokenizer(tokenizer)
    table = pa.table(
        {
            "id": ["r0"],
            "text": [""],
            "source": ["chat"],
            "lang": ["zh"],
            "meta": [json.dumps({"messages": messages}, ensure_ascii=False)],
            "drop": [None],
            "_ord": [0],
        },
        schema=BASE_SCHEMA,
    )
    row = op(table).to_pylist()[0]
    assert row["drop"] is None
    return row


def test_assistant_mask_is_the_sft_loss_mask(export):
    hf = export["hf"]
    contents = [m["content"] for m in CONVERSATION]
    cleaned = clean_text(pa.array(contents), RECIPE).to_pylist()
    row = _format_sft(
        export["tokenizer"],
        [m | {"content": c} for m, c in zip(CONVERSATION, cleaned, strict=True)],
    )
    out = hf.apply_chat_template(
        CONVERSATION, return_assistant_tokens_mask=True, return_dict=True, tokenize=True
    )
    assert out["input_ids"] == row["tokens"]
    assert out["assistant_masks"] == row["loss_mask"]
    assert 0 < sum(out["assistant_masks"]) < len(out["input_ids"])
    assert hf.apply_chat_template(CONVERSATION) == row["tokens"]
    assert "{% generation %}" in hf.chat_template
    # TRL's call (tools and template named, None) gives the same; padding is refused.
    trl = hf.apply_chat_template(
        CONVERSATION, tools=None, chat_template=None, return_dict=True,
        return_assistant_tokens_mask=True,
    )  # fmt: skip
    assert trl["assistant_masks"] == row["loss_mask"]
    with pytest.raises(ValueError, match="padding"):
        hf.apply_chat_template(
            CONVERSATION, return_dict=True, return_assistant_tokens_mask=True, padding=True
        )
