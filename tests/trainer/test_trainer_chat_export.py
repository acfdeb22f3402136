"""Chat-ready exports: the SFT formatting's template and end-of-turn stops in transformers.

A tokenizer with the chat markers is trained here on the real-text fixtures; the
conversation goes through ``format_sft`` (the pipeline op) and through the export's
``apply_chat_template``, which must give the same ids.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
import torch

from dataforge.ops.formatting import FormatSFT
from dataforge.records import BASE_SCHEMA
from trainer.checkpoint.export import write_export
from trainer.config import config_from_mapping
from trainer.model.transformer import Transformer

transformers = pytest.importorskip("transformers")

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "tokenization"
CONVERSATION = [
    {"role": "system", "content": "You answer briefly."},
    {"role": "user", "content": "这家餐厅的服务怎么样？ Was it good?"},
    {"role": "assistant", "content": "服务很好， the staff were friendly."},
    {"role": "user", "content": "And the  prices?"},
    {"role": "assistant", "content": "偏贵 but fair."},
]
END = "<|end|>"


@pytest.fixture(scope="module")
def chat_export(tmp_path_factory) -> dict:
    from dataforge.tokenization import Tokenizer, TokenizerSpec, train_tokenizer

    root = tmp_path_factory.mktemp("chat")
    spec = TokenizerSpec(
        name="chat",
        inputs=(str(FIXTURES / "*.jsonl"),),
        vocab_size=2000,
        character_coverage=0.995,
        num_threads=1,
    )
    train_tokenizer(spec, root / "tokenizer")
    tokenizer = Tokenizer.load(root / "tokenizer")
    raw = {
        "tokenizer": str(root / "tokenizer"),
        "model": {"preset": "tiny", "vocab_size": tokenizer.vocab_size},
        "train": {"max_steps": 1},
        "optim": {"warmup_steps": 0},
    }
    config = config_from_mapping(raw)
    torch.manual_seed(0)
    net = Transformer(config.model).eval()
    weights = _always_says(net.state_dict(), tokenizer.special_tokens[END])
    write_export(weights, config, root / "export", {"stage": "sft", "step": 1})
    return {"dir": root / "export", "tokenizer": tokenizer, "tokenizer_dir": root / "tokenizer"}


def _always_says(weights: dict, token: int) -> dict:
    """Weights whose greedy next token is ``token`` after any input: the blocks add
    nothing to the residual stream, every embedding has a large first coordinate, and
    only ``token``'s output row reads it."""
    weights = {k: v.clone() for k, v in weights.items()}
    for name, value in weights.items():
        if name.endswith(("attn.proj.weight", "mlp.down.weight")):
            value.zero_()
    weights["embed.weight"][:, 0] = 10.0
    weights["lm_head.weight"].zero_()
    weights["lm_head.weight"][token, 0] = 1.0
    return weights


def _sft_tokens(tokenizer, messages: list[dict]) -> list[int]:
    op = FormatSFT(FormatSFT.Config(tokenizer="unused"))
    op.use_tokenizer(tokenizer)
    table = pa.table(
        {
            "id": ["r0"],
            "text": [""],
            "source": ["chat"],
            "lang": ["en"],
            "meta": [json.dumps({"messages": messages}, ensure_ascii=False)],
            "drop": [None],
            "_ord": [0],
        },
        schema=BASE_SCHEMA,
    )
    row = op(table).to_pylist()[0]
    assert row["drop"] is None
    return list(row["tokens"])


def _clean(text: str) -> str:
    from dataforge.text.clean import CleanConfig, clean_text

    return clean_text(pa.array([text]), CleanConfig()).to_pylist()[0]


def test_chat_template_gives_the_ids_format_sft_writes(chat_export):
    hf_tok = transformers.AutoTokenizer.from_pretrained(
        str(chat_export["dir"]), trust_remote_code=True
    )
    tokenizer = chat_export["tokenizer"]
    # The export normalizes text as clean does (the tokenizer's training text was cleaned).
    cleaned = [m | {"content": _clean(m["content"])} for m in CONVERSATION]
    full = _sft_tokens(tokenizer, cleaned)
    assert full[0] == tokenizer.bos_id
    assert hf_tok.apply_chat_template(CONVERSATION) == full
    # the prompt of the last answer: everything up to and including its <|assistant|>
    prompt = hf_tok.apply_chat_template(CONVERSATION[:-1], add_generation_prompt=True)
    answer = tokenizer.encode(cleaned[-1]["content"]) + [tokenizer.special_tokens[END]]
    assert prompt + answer == full
    assert prompt[-1] == tokenizer.special_tokens["<|assistant|>"]


def test_generate_stops_at_the_end_of_the_turn(chat_export):
    out = chat_export["dir"]
    special = chat_export["tokenizer"].special_tokens
    generation = json.loads((out / "generation_config.json").read_text())
    assert generation["eos_token_id"] == [special["<eos>"], special[END]]
    card = json.loads((out / "config.json").read_text())
    assert card["eos_token_id"] == special["<eos>"] and "end_of_turn_token_id" not in card
    hf_tok = transformers.AutoTokenizer.from_pretrained(str(out), trust_remote_code=True)
    model = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    prompt = hf_tok.apply_chat_template(
        CONVERSATION[:2], add_generation_prompt=True, return_tensors="pt"
    )
    with torch.no_grad():
        stopped = model.generate(prompt, max_new_tokens=8, do_sample=False)
        # the same model with <eos> alone as the stop: it runs on past the turn's end
        past = model.generate(prompt, max_new_tokens=8, do_sample=False, eos_token_id=2)
    assert stopped[0, prompt.shape[1] :].tolist() == [special[END]]
    assert past[0, prompt.shape[1] :].tolist() == [special[END]] * 8


def test_tokenizer_without_chat_markers_gets_no_template(tmp_path, chat_export):
    from dataforge.tokenization.hf_export import write_hf_tokenizer

    source = tmp_path / "plain"
    source.mkdir()
    for path in chat_export["tokenizer_dir"].iterdir():
        (source / path.name).write_bytes(path.read_bytes())
    meta = json.loads((source / "tokenizer.json").read_text())
    meta["special_tokens"] = {
        k: v for k, v in meta["special_tokens"].items() if k in ("<pad>", "<bos>", "<eos>", "<unk>")
    }
    (source / "tokenizer.json").write_text(json.dumps(meta))
    special = write_hf_tokenizer(source, tmp_path / "out")
    assert special == {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}
    config = json.loads((tmp_path / "out" / "tokenizer_config.json").read_text())
    assert "chat_template" not in config
