"""Issue 8's end-to-end check: real text -> ``dataforge run`` stages (clean, tokenize) ->
MDS -> ``dataforge.loader`` -> 50 pretraining steps of the tiny model, loss falling.

Every component is the real one: a tokenizer trained here on the real-text fixtures
(People's Daily news, product reviews, Python docs), the pipeline driver run in-process,
the loader over the shards it wrote, and the trainer's public ``train``.
"""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from trainer.loop import train

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "tokenization"
SOURCES = {"news_zh": "zh", "reviews_zh": "zh", "docs_en": "en"}  # name -> lang
FILES = {"news_zh": "zh_news.jsonl", "reviews_zh": "zh_reviews.jsonl", "docs_en": "en_docs.jsonl"}
# 256 keeps ~45% of the corpus's 18k tokens (the long news articles are cut), about
# nine packed batches of four rows per epoch.
MAX_SEQ_LEN = 256
MAX_TOKENS = 1024
# The fixtures hold 81 documents; none is dropped by clean or tokenize.
NUM_DOCS = sum(len((FIXTURES / f).read_text(encoding="utf-8").splitlines()) for f in FILES.values())


@pytest.fixture(scope="module")
def pipeline_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Corpus, tokenizer and pipeline output, built once for the tests of this module."""
    from dataforge.config import load_pipeline
    from dataforge.runtime.executors.local import LocalExecutor
    from dataforge.runtime.pipeline import run_pipeline
    from dataforge.tokenization import Tokenizer, TokenizerSpec, train_tokenizer

    root = tmp_path_factory.mktemp("e2e")
    for name, filename in FILES.items():
        (root / "corpus" / name).mkdir(parents=True)
        shutil.copy(FIXTURES / filename, root / "corpus" / name / filename)
    # A small vocabulary trains in seconds and keeps the LM head cheap on a CPU.
    spec = TokenizerSpec(
        name="e2e",
        inputs=(str(root / "corpus" / "*" / "*.jsonl"),),
        vocab_size=2000,
        character_coverage=0.995,
        num_threads=1,
    )
    train_tokenizer(spec, root / "tokenizer")
    inputs = "\n".join(
        f'  - {{name: {name}, path: "corpus/{name}/*.jsonl", lang: {lang}, id_key: id}}'
        for name, lang in SOURCES.items()
    )
    pipeline = root / "pipeline.yaml"
    pipeline.write_text(
        textwrap.dedent(
            """\
            name: e2e
            seed: 5
            inputs:
            {inputs}
            stages:
              - {{op: clean}}
              - {{op: tokenize, tokenizer: tokenizer, add_bos: true, add_eos: true}}
            output: {{path: out, format: mds, compression: zstd, size_limit: 16384}}
            """
        ).format(inputs=inputs),
        encoding="utf-8",
    )
    manifest = run_pipeline(
        load_pipeline(pipeline), root / "out", LocalExecutor(), log=lambda msg: None
    )
    return {
        "root": root,
        "manifest": manifest,
        "mds": root / "out" / "mds",
        "tokenizer_dir": root / "tokenizer",
        "tokenizer": Tokenizer.load(root / "tokenizer"),
    }


def _loader_fields(run: dict, cache: Path) -> dict:
    return {
        "streams": [{"path": str(run["mds"])}],
        "max_tokens": MAX_TOKENS,
        "max_seq_len": MAX_SEQ_LEN,
        "packing": True,
        "shuffle_buffer": 64,
        "seed": 3,
        "cache_dir": str(cache),
    }


def test_pipeline_writes_every_fixture_document_tokenized(pipeline_run: dict) -> None:
    from dataforge.inspect import verify_dataset
    from dataforge.io.mds import iter_samples

    manifest, tok = pipeline_run["manifest"], pipeline_run["tokenizer"]
    assert manifest["status"] == "complete"
    assert manifest["counts"]["total"]["input"] == NUM_DOCS
    assert manifest["counts"]["total"]["kept"] == NUM_DOCS == manifest["output"]["records"]
    assert verify_dataset(pipeline_run["root"] / "out") == []
    samples = list(iter_samples(pipeline_run["root"] / "out"))
    per_source = {
        n: len((FIXTURES / f).read_text(encoding="utf-8").splitlines()) for n, f in FILES.items()
    }
    assert {n: sum(s["source"] == n for s in samples) for n in FILES} == per_source
    for sample in samples:
        tokens = np.asarray(sample["tokens"])
        assert tokens.dtype == np.uint16 and sample["num_tokens"] == len(tokens)
        assert tokens[0] == tok.bos_id and tokens[-1] == tok.eos_id
        # The shards hold the cleaned text and exactly its encoding.
        assert tok.decode(tokens[1:-1].tolist()) == sample["text"]
        assert tok.encode(sample["text"]) == tokens[1:-1].tolist()


def test_loader_packs_the_pipeline_output_within_budget(pipeline_run: dict, tmp_path) -> None:
    from dataforge.io.mds import iter_samples
    from dataforge.loader import LoaderConfig, build_dataloader

    lengths = [s["num_tokens"] for s in iter_samples(pipeline_run["root"] / "out")]
    real_tokens = 0
    with build_dataloader(LoaderConfig(**_loader_fields(pipeline_run, tmp_path))) as loader:
        for batch in loader:
            rows, width = batch["input_ids"].shape
            assert rows * width <= MAX_TOKENS and width == MAX_SEQ_LEN
            assert int(batch["input_ids"].max()) < pipeline_run["tokenizer"].vocab_size
            real_tokens += int(batch["attention_mask"].sum())
        stats = loader.stats.as_dict()
    long = sum(n > MAX_SEQ_LEN for n in lengths)
    pieces = sum(-(-n // MAX_SEQ_LEN) for n in lengths if n > MAX_SEQ_LEN)
    assert stats == {
        "samples": NUM_DOCS, "truncated": 0, "dropped_long": 0, "dropped_empty": 0,
        "split": long, "pieces": pieces, "tokens": sum(lengths), "tokens_used": sum(lengths),
    }  # fmt: skip
    assert 0 < long < NUM_DOCS  # both paths (split and whole documents) are exercised
    # One epoch delivers every token of every document once (long ones in pieces).
    assert real_tokens == sum(lengths)


def test_fifty_pretrain_steps_on_pipeline_output_lower_the_loss(
    pipeline_run: dict, tmp_path, make_config
) -> None:
    tok = pipeline_run["tokenizer"]
    config = make_config(
        tmp_path,
        model={"vocab_size": None, "max_seq_len": MAX_SEQ_LEN},
        tokenizer=str(pipeline_run["tokenizer_dir"]),  # vocab_size comes from here
        train={"max_steps": 50},
        optim={"lr": 3e-3, "min_lr": 3e-4, "warmup_steps": 5},
        data={"source": "loader", "loader": _loader_fields(pipeline_run, tmp_path / "cache")},
        checkpoint={"interval": 50},
    )
    result = train(config, "pretrain")

    assert result.steps == 50 and result.skipped_steps == 0 and len(result.losses) == 50
    assert result.losses[0] == pytest.approx(np.log(tok.vocab_size), abs=0.5)
    first, last = np.mean(result.losses[:10]), np.mean(result.losses[-10:])
    assert last < first - 0.8, (first, last)  # measured: 7.41 -> 6.21
    metrics = (tmp_path / "run" / "metrics.jsonl").read_text(encoding="utf-8")
    records = [json.loads(line) for line in metrics.splitlines()]
    assert [r["step"] for r in records] == list(range(1, 51))
    assert all(0 <= r["data_wait_frac"] < 1 for r in records)
    state = torch.load(tmp_path / "ckpt" / "step_00000050" / "rank_00000.pt", weights_only=True)
    assert state["data"]["format"] == "dataforge.loader/1"
    exported = json.loads((tmp_path / "ckpt" / "export" / "config.json").read_text())
    assert exported["vocab_size"] == tok.vocab_size  # a transformers config.json
