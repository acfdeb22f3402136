"""The chat demo sets (scripts/make_chat_demo.py): the held-out DPO pairs are of the kinds the
training pairs are, and share no text with them."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "make_chat_demo.py"
DEMO = ROOT / "data" / "demo"


def load_script():
    spec = importlib.util.spec_from_file_location("make_chat_demo", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.open(encoding="utf-8")]


@pytest.fixture(scope="module")
def chat_sets(tmp_path_factory) -> Path:
    if not (DEMO / "reviews_zh").is_dir() or not (DEMO / "docs_en").is_dir():
        pytest.skip("data/demo is missing (make demo-data)")
    out = tmp_path_factory.mktemp("chat")
    subprocess.run(
        [sys.executable, str(SCRIPT), "--demo", str(DEMO), "--out", str(out), "--reviews", "1000"],
        check=True,
        capture_output=True,
    )
    return out


def test_held_out_dpo_pairs_cover_every_kind(chat_sets):
    held = read(chat_sets / "dpo_heldout.jsonl")
    prompts = {r["prompt"] for r in held}
    assert "写一条正面的商品评论。" in prompts
    assert "写一条负面的商品评论。" in prompts
    assert any(r["id"].startswith("dpo:pydoc:") for r in held)
    assert all(r["chosen"] != r["rejected"] for r in held)


def test_held_out_dpo_text_never_appears_in_training(chat_sets):
    train, held = read(chat_sets / "dpo.jsonl"), read(chat_sets / "dpo_heldout.jsonl")
    train_texts = {r[k] for r in train for k in ("chosen", "rejected")}
    held_texts = {r[k] for r in held for k in ("chosen", "rejected")}
    assert not train_texts & held_texts
    # Module prompts name their module; the two review prompts are shared by design.
    train_prompts = {r["prompt"] for r in train}
    assert not {r["prompt"] for r in held if r["id"].startswith("dpo:pydoc:")} & train_prompts
    assert not {r["id"] for r in train} & {r["id"] for r in held}


def test_rejected_is_the_chosen_answer_scrambled(chat_sets):
    for record in read(chat_sets / "dpo.jsonl")[:200]:
        assert sorted("".join(record["rejected"].split())) == sorted(
            "".join(record["chosen"].split())
        )


def test_split_counts_add_up_and_match_the_id_hash(chat_sets):
    script = load_script()
    counts = json.loads((chat_sets / ".done").read_text())
    for name in ("sft", "dpo"):
        train = read(chat_sets / f"{name}.jsonl")
        held = read(chat_sets / f"{name}_heldout.jsonl")
        assert (len(train), len(held)) == (counts[name], counts[f"{name}_heldout"])
        assert not any(script.held_out(r["id"]) for r in train)
        assert all(script.held_out(r["id"]) for r in held)


def test_split_of_an_id_is_stable():
    script = load_script()
    ids = [f"dpo:review:review_zh-{i}" for i in range(1000)]
    first = [script.held_out(i) for i in ids]
    assert first == [load_script().held_out(i) for i in ids]
    assert 50 < sum(first) < 150  # about one in HELD_OUT_EVERY
    # Independent of position: the same id is split the same way wherever it stands.
    assert [script.held_out(i) for i in reversed(ids)] == first[::-1]
