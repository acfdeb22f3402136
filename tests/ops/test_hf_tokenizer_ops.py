"""tokenize / format_sft / format_dpo with a local Hugging Face tokenizer and its chat
template (a ChatML byte-level BPE trained here on the fixtures; no download)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from dataforge.ops.formatting import FormatDPO, FormatSFT
from dataforge.ops.tokenize import Tokenize
from dataforge.records import BASE_SCHEMA

transformers = pytest.importorskip("transformers")
pa = pytest.importorskip("pyarrow")

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "tokenization"
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    texts = [
        json.loads(line)["text"]
        for f in sorted(FIXTURES.glob("*.jsonl"))
        for line in f.read_text(encoding="utf-8").splitlines()
    ]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<unk>", "<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    trainer = trainers.BpeTrainer(
        vocab_size=600,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(texts, trainer)
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token="<unk>",
        chat_template=CHATML,
    )
    out = tmp_path_factory.mktemp("hf") / "chatml"
    fast.save_pretrained(out)
    return out


def _records(metas: list[dict], texts: list[str]) -> pa.Table:
    n = len(metas)
    return pa.table(
        {
            "id": [f"r{i}" for i in range(n)],
            "text": texts,
            "source": ["chat"] * n,
            "lang": ["en"] * n,
            "meta": [json.dumps(m, ensure_ascii=False) for m in metas],
            "drop": [None] * n,
            "_ord": list(range(n)),
        },
        schema=BASE_SCHEMA,
    )


def test_tokenize_uses_the_hf_tokenizer(hf_dir):
    op = Tokenize(Tokenize.Config(tokenizer=str(hf_dir)))
    assert op.validate() == []
    assert op.mds_encodings()["tokens"] == "ndarray:uint16"
    texts = ["Hello world, a test.", "中文 and <|im_start|> text"]
    row = op(_records([{}, {}], texts)).to_pylist()
    reference = transformers.AutoTokenizer.from_pretrained(str(hf_dir))
    eos = reference.eos_token_id
    for got, text in zip(row, texts, strict=True):
        assert got["tokens"] == reference(text, add_special_tokens=False)["input_ids"] + [eos]
        assert got["num_tokens"] == len(got["tokens"])


def test_format_sft_renders_the_chat_template_and_masks_assistant_turns(hf_dir):
    op = FormatSFT(FormatSFT.Config(tokenizer=str(hf_dir)))
    assert op.validate() == []
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi there"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "and?"},
        {"role": "assistant", "content": "bye now"},
    ]
    row = op(_records([{"messages": messages}], [""])).to_pylist()[0]
    reference = transformers.AutoTokenizer.from_pretrained(str(hf_dir))
    rendered = reference.apply_chat_template(messages, tokenize=False)
    assert reference.decode(row["tokens"]) == rendered
    learned = [t for t, m in zip(row["tokens"], row["loss_mask"], strict=True) if m]
    assert reference.decode(learned) == "hello<|im_end|>\nbye now<|im_end|>\n"
    assert row["drop"] is None


def test_format_dpo_prompt_ends_with_the_generation_prompt(hf_dir):
    op = FormatDPO(FormatDPO.Config(tokenizer=str(hf_dir)))
    meta = {"prompt": "pick one", "chosen": "good answer", "rejected": "bad"}
    row = op(_records([meta], [""])).to_pylist()[0]
    reference = transformers.AutoTokenizer.from_pretrained(str(hf_dir))
    prompt = [{"role": "user", "content": "pick one"}]
    expected = reference.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
    assert reference.decode(row["prompt_tokens"]) == expected
    assert reference.decode(row["chosen_tokens"]) == "good answer<|im_end|>\n"
    assert reference.decode(row["rejected_tokens"]) == "bad<|im_end|>\n"
    assert row["num_tokens"] == len(row["prompt_tokens"]) + len(row["chosen_tokens"])


def test_a_tokenizer_without_chat_template_is_refused(hf_dir, tmp_path):
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "tokenizer.json").write_bytes((hf_dir / "tokenizer.json").read_bytes())
    (bare / "tokenizer_config.json").write_text("{}")
    errors = FormatSFT(FormatSFT.Config(tokenizer=str(bare))).validate()
    assert errors == [f"format_sft: {bare / 'tokenizer_config.json'} has no chat_template"]


def test_a_run_on_forked_workers_tokenizes_as_the_in_process_run(hf_dir, tmp_path, write_pipeline):
    """``dataforge run`` with the local executor on 2 CPUs: the driver loads the Hugging Face
    tokenizer and its two forked workers encode with their copies (a Rust tokenizer with a
    thread pool of its own): the same MDS samples as one process, and no fork warning from
    tokenizers."""
    import os
    import subprocess
    import sys

    from dataforge.config import load_pipeline
    from dataforge.io.mds import iter_samples
    from dataforge.runtime.executors.local import LocalExecutor
    from dataforge.runtime.pipeline import run_pipeline

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for f in sorted(FIXTURES.glob("*.jsonl")):
        (corpus / f.name).write_text(f.read_text(encoding="utf-8"), encoding="utf-8")
    path = write_pipeline(
        tmp_path,
        f"""
        name: hf
        inputs: [{{name: s, path: "corpus/*.jsonl", lang: zh}}]
        executor: local
        ray: {{num_cpus: 2}}
        stages:
          - {{op: tokenize, tokenizer: "{hf_dir}"}}
        output: {{path: out/hf}}
    """,
    )
    env = dict(os.environ)
    proc = subprocess.run(
        [sys.executable, "-m", "dataforge.cli", "run", str(path)],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    runtime = json.loads((tmp_path / "out" / "hf" / "manifest.json").read_text())["runtime"]
    assert runtime["executor"] == "local" and runtime["tasks_on_driver"] == 0
    assert sum(runtime["tasks_by_node"].values()) == 3
    assert "huggingface/tokenizers" not in proc.stderr and "Traceback" not in proc.stderr
    reference = tmp_path / "ref"
    run_pipeline(load_pipeline(path), reference, LocalExecutor(), log=lambda m: None)
    samples, expected = list(iter_samples(tmp_path / "out" / "hf")), list(iter_samples(reference))
    assert len(samples) == len(expected) > 0
    for got, want in zip(samples, expected, strict=True):
        assert got.keys() == want.keys()
        assert all(np.array_equal(got[k], want[k]) for k in got)
