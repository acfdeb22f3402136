"""decontaminate: n-gram matches against evaluation sets, drop and cut, audit and counts."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from dataforge.config import load_pipeline
from dataforge.ops.base import OpContext
from dataforge.ops.decontaminate import MATCHES, Decontaminate, EvalSet
from dataforge.records import DROP
from dataforge.runtime.executors.local import LocalExecutor
from dataforge.runtime.pipeline import run_pipeline
from dataforge.runtime.validate import validate_pipeline
from dataforge.typed_config import ConfigError, from_mapping

# A C-Eval-style item in traditional script with full-width punctuation (66 characters).
ZH_ITEM = {
    "id": 0,
    "question": "下列關於中華人民共和國憲法規定的公民基本權利和義務的說法中，正確的是哪一項？"
    "請結合憲法條文進行分析並說明理由。",
    "A": "公民有勞動的權利和義務",
    "B": "公民有受教育的權利",
    "answer": "A",
}
# The same passage in simplified script, ASCII punctuation, spaces and a line break inside.
ZH_QUOTE = (
    "下列关于中华人民共和国宪法规定的公民基本权利和义务的说法中, 正确的是哪一项?\n"
    "请结合  宪法条文进行分析并说明理由"
)
ZH_COMMON = (
    "中华人民共和国成立以来，公民的基本权利和义务不断完善。"
    "请结合实际进行分析，说明理由。宪法规定的公民基本权利包括选举权。"
)
EN_ITEM = {
    "id": 1,
    "question": "Which of the following statements about the water cycle is correct when "
    "considering evaporation, condensation and precipitation over the ocean?",
    "answer": "B",
}
# 15 words of the question, with full-width commas and other whitespace
EN_QUOTE = (
    "Intro text. the following statements about the water cycle is correct when considering "
    "evaporation，  condensation\nand precipitation over. More text."
)
EN_COMMON = (
    "The water cycle is correct in many textbooks. Which of the following statements is "
    "true? Evaporation, condensation and precipitation over the ocean are common words."
)


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), "utf-8")
    return path


@pytest.fixture
def eval_file(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "ceval_val.jsonl", [ZH_ITEM, EN_ITEM])


def make_op(eval_file: Path, **params) -> Decontaminate:
    raw = {"eval_sets": [{"path": str(eval_file), "fields": ["question", "A", "B"]}], **params}
    config = from_mapping(Decontaminate.Config, raw, "stages[0]")
    op = Decontaminate(config, OpContext(base_dir=str(eval_file.parent)))
    op.setup()
    return op


def batch(texts: list[str]) -> pa.Table:
    n = len(texts)
    return pa.table(
        {
            "id": [f"d{i}" for i in range(n)],
            "source": ["web"] * n,
            "text": texts,
            DROP: pa.nulls(n, pa.string()),
        }
    )


def test_quotes_match_across_script_width_and_whitespace_common_phrases_do_not(eval_file):
    op = make_op(eval_file)
    out = op.apply(op.prepare(batch([ZH_QUOTE, EN_QUOTE, ZH_COMMON, EN_COMMON])), None)
    assert out.column(DROP).to_pylist() == [
        "decontaminate:ceval_val",
        "decontaminate:ceval_val",
        None,
        None,
    ]
    spans = [json.loads(m)["spans"] if m else None for m in out.column(MATCHES).to_pylist()]
    assert spans[0] == [
        {
            "eval_set": "ceval_val",
            "item": "ceval_val.jsonl:1",
            "span": "下列关于中华人民共和国宪法规定的公民基本权利和义务的说法中正确的是哪一项"
            "请结合宪法条文进行分析并说明理由",
        }
    ]
    assert spans[1] == [
        {
            "eval_set": "ceval_val",
            "item": "ceval_val.jsonl:2",
            "span": "the following statements about the water cycle is correct when considering "
            "evaporation condensation and precipitation over",
        }
    ]
    # 52 characters of Chinese (25-grams) and 20 words of English (13-grams); the choices
    # are shorter than an n-gram and give none
    assert op.set_stats == {"ceval_val": {"items": 2, "ngrams": (52 - 25 + 1) + (20 - 13 + 1)}}


def test_a_span_one_unit_shorter_than_an_ngram_is_kept(eval_file):
    op = make_op(eval_file)
    twelve = (
        "the following statements about the water cycle is correct when considering evaporation"
    )
    chars24 = "下列关于中华人民共和国宪法规定的公民基本权利和义"
    assert len(twelve.split()) == 12 and len(chars24) == 24
    out = op.apply(op.prepare(batch([twelve + " rain", chars24 + "，然后别的内容"])), None)
    assert out.column(DROP).to_pylist() == [None, None]


def test_cut_removes_the_matched_lines_and_drops_what_is_left_empty(eval_file):
    op = make_op(eval_file, mode="cut")
    doc = "首行内容保留。\n" + ZH_QUOTE + "\n末行也保留。"
    out = op.apply(op.prepare(batch([doc, ZH_QUOTE])), None)
    assert out.column("text").to_pylist() == ["首行内容保留。\n末行也保留。", ""]
    assert out.column(DROP).to_pylist() == [None, "decontaminate:ceval_val"]
    assert op.events == {"decontaminate:cut_lines": 4, "decontaminate:ceval_val:cut_docs": 1}


def test_txt_and_parquet_sets_and_their_own_names(tmp_path):
    import pyarrow.parquet as pq

    (tmp_path / "items.txt").write_text(EN_ITEM["question"] + "\n\n", encoding="utf-8")
    pq.write_table(pa.table({"q": [ZH_ITEM["question"]]}), tmp_path / "zh.parquet")
    raw = {
        "eval_sets": [
            {"path": "items.txt", "name": "mmlu"},
            {"path": "zh.parquet", "fields": ["q"], "name": "cmmlu"},
        ]
    }
    op = Decontaminate(
        from_mapping(Decontaminate.Config, raw, "s"), OpContext(base_dir=str(tmp_path))
    )
    op.setup()
    out = op.apply(op.prepare(batch([EN_QUOTE, ZH_QUOTE])), None)
    assert out.column(DROP).to_pylist() == ["decontaminate:mmlu", "decontaminate:cmmlu"]


def test_config_errors_name_the_key(tmp_path):
    with pytest.raises(ConfigError, match=r"s\.mode: 'remove' is not valid; valid: 'drop', 'cut'"):
        from_mapping(Decontaminate.Config, {"eval_sets": [{"path": "a"}], "mode": "remove"}, "s")
    with pytest.raises(ConfigError, match=r"names \['a'\] repeat"):
        from_mapping(
            Decontaminate.Config, {"eval_sets": [{"path": "x/a.jsonl"}, {"path": "a.txt"}]}, "s"
        )
    with pytest.raises(ConfigError, match="word_ngram must be >= 3"):
        from_mapping(Decontaminate.Config, {"eval_sets": [EvalSet("a")], "word_ngram": 2}, "s")


PIPELINE = """
name: decontam
inputs:
  - {name: web, path: "docs.jsonl", lang: zh, id_key: id}
stages:
  - {op: decontaminate, eval_sets: [{path: EVAL, fields: [question, A, B]}]}
output: {path: out, format: jsonl}
"""


def test_pipeline_counts_per_set_and_writes_the_audit(tmp_path, eval_file):
    docs = [ZH_QUOTE, EN_QUOTE, ZH_COMMON, EN_COMMON, "另一篇文章" + ZH_QUOTE]
    write_jsonl(tmp_path / "docs.jsonl", [{"id": f"d{i}", "text": t} for i, t in enumerate(docs)])
    (tmp_path / "p.yaml").write_text(PIPELINE.replace("EVAL", str(eval_file)), encoding="utf-8")
    config = load_pipeline(tmp_path / "p.yaml")
    assert validate_pipeline(config) == []
    manifest = run_pipeline(config, tmp_path / "out", LocalExecutor(), log=lambda m: None)
    counts = manifest["counts"]["by_source"]["web"]
    assert counts["kept"] == 2 and counts["dropped"] == {"decontaminate:ceval_val": 3}
    summary = next(s for s in manifest["stages"] if s["op"] == "decontaminate")["summary"]
    assert summary["eval_sets"]["ceval_val"]["matched_docs"] == summary["matched_docs"] == 3
    audit = [json.loads(line) for line in (tmp_path / "out/decontaminate/matches.jsonl").open()]
    assert [(a["id"], a["item"]) for a in audit] == [
        ("web/d0", "ceval_val.jsonl:1"),
        ("web/d1", "ceval_val.jsonl:2"),
        ("web/d4", "ceval_val.jsonl:1"),
    ]


def test_validate_names_a_missing_eval_set(tmp_path):
    write_jsonl(tmp_path / "docs.jsonl", [{"id": "d", "text": "x"}])
    (tmp_path / "p.yaml").write_text(PIPELINE.replace("EVAL", "nope.jsonl"), encoding="utf-8")
    problems = validate_pipeline(load_pipeline(tmp_path / "p.yaml"))
    assert problems == [
        f"stages[0] (decontaminate): eval_sets[0] nope.jsonl: input "
        f"'{tmp_path / 'nope.jsonl'}' matches no file"
    ]


def test_a_document_matches_the_same_alone_or_in_any_batch(eval_file):
    op = make_op(eval_file)
    docs = [EN_COMMON, ZH_QUOTE, "", EN_QUOTE, ZH_COMMON, "另一篇文章" + ZH_QUOTE]
    together = op.prepare(batch(docs)).column(MATCHES).to_pylist()
    alone = [op.prepare(batch([d])).column(MATCHES).to_pylist()[0] for d in docs]
    assert together == alone and [m is not None for m in alone] == [0, 1, 0, 1, 0, 1]
