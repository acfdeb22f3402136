"""The ``tokenize`` op: columns, BOS/EOS, dropped rows, MDS encodings, validate."""

from __future__ import annotations

import json
import shutil

import pyarrow as pa
import pytest
from tokenization_testkit import fixture_texts

from dataforge.ops.base import OpContext, op_class
from dataforge.records import BASE_SCHEMA


def _batch(texts, drops=None):
    n = len(texts)
    return pa.Table.from_pydict(
        {
            "id": [f"d{i}" for i in range(n)],
            "text": texts,
            "source": ["s"] * n,
            "lang": ["zh"] * n,
            "meta": ["{}"] * n,
            "drop": drops or [None] * n,
            "_ord": list(range(n)),
        },
        schema=BASE_SCHEMA,
    )


def _op(tok_dir, **params):
    cls = op_class("tokenize")
    rel = tok_dir.name
    return cls(cls.Config(tokenizer=rel, **params), OpContext(base_dir=str(tok_dir.parent)))


def test_tokenize_adds_tokens_and_counts(tiny_dir, tiny):
    texts = fixture_texts("zh_reviews")[:5] + ["", "Hello  world\n\tend"]
    drops = [None, "too_short", None, None, None, None, None]
    op = _op(tiny_dir)
    op.setup()
    out = op(_batch(texts, drops))
    assert out.schema.field("tokens").type == pa.list_(pa.int32())
    assert out.schema.field("num_tokens").type == pa.int64()
    tokens = out.column("tokens").to_pylist()
    counts = out.column("num_tokens").to_pylist()
    for i, text in enumerate(texts):
        if drops[i]:
            assert tokens[i] is None and counts[i] is None
        else:
            assert tokens[i] == tiny.encode(text, add_eos=True)  # default: EOS, no BOS
            assert counts[i] == len(tokens[i])
            assert tiny.decode(tokens[i]) == text
    assert out.column("_ord").to_pylist() == list(range(len(texts)))
    assert out.column("text").to_pylist() == texts


def test_tokenize_bos_eos_config(tiny_dir, tiny):
    op = _op(tiny_dir, add_bos=True, add_eos=False)
    out = op(_batch(["新年好", ""]))
    assert out.column("tokens").to_pylist() == [
        [tiny.bos_id, *tiny.encode("新年好")],
        [tiny.bos_id],
    ]
    assert out.column("num_tokens").to_pylist() == [len(tiny.encode("新年好")) + 1, 1]
    empty = op(_batch([]))
    assert empty.num_rows == 0 and "tokens" in empty.column_names


def test_mds_encodings_follow_vocab_size(tiny_dir, tmp_path):
    assert _op(tiny_dir).mds_encodings() == {"tokens": "ndarray:uint16", "num_tokens": "int"}
    big = tmp_path / "big"
    shutil.copytree(tiny_dir, big)
    meta = json.loads((big / "tokenizer.json").read_text())
    meta["vocab_size"] = 70_000
    (big / "tokenizer.json").write_text(json.dumps(meta))
    assert _op(big).mds_encodings() == {"tokens": "ndarray:int32", "num_tokens": "int"}


def test_validate_reports_missing_and_incompatible(tiny_dir, tmp_path):
    assert _op(tiny_dir).validate() == []
    missing = _op(tmp_path / "absent").validate()
    assert len(missing) == 1 and "does not exist" in missing[0]
    old = tmp_path / "old"
    shutil.copytree(tiny_dir, old)
    meta = json.loads((old / "tokenizer.json").read_text())
    meta["format_version"] = 0
    (old / "tokenizer.json").write_text(json.dumps(meta))
    problems = _op(old).validate()
    assert len(problems) == 1 and "format version 0 is not supported" in problems[0]


def test_config_rejects_bad_values():
    cls = op_class("tokenize")
    with pytest.raises(ValueError, match="tokenizer"):
        cls.Config(tokenizer="")
    with pytest.raises(ValueError, match="num_threads"):
        cls.Config(tokenizer="t", num_threads=0)


def test_no_tokens_at_all_is_dropped(tiny_dir):
    out = _op(tiny_dir, add_eos=False)(_batch(["", "新年好"]))
    assert out.column("drop").to_pylist() == ["tokenize:empty", None]
    assert out.column("num_tokens").to_pylist()[0] == 0
