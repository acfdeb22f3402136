"""decontaminate on mixed-script and short items: one token stream (a Chinese character or
a Latin word/number per token), a short item as one n-gram of its own; a held-out set of
quoted passages in zh, en and mixed text with spacing changes is caught whole, and clean
documents on the same topics (and fragments of the items) are kept."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from dataforge.ops.base import OpContext
from dataforge.ops.decontaminate import Decontaminate, EvalSet
from dataforge.ops.eval_ngrams import item_ngrams, span_text, tokens
from dataforge.records import DROP
from dataforge.typed_config import ConfigError, from_mapping

# Evaluation items: documentation passages in Chinese, mixed Chinese/English (most of
# their letters Latin), and English questions shorter than 13 words.
ITEMS = [
    "引导分区用于存放启动加载程序和内核映像，安装系统时应当为它分配至少五百兆字节的空间并格式化。",
    "交换分区在物理内存不足时充当虚拟内存，其大小通常设为内存的一到两倍，休眠功能需要更大的空间。",
    "修改配置文件后，需要重新加载服务才能使新的设置生效，否则系统仍然使用旧的参数运行。",
    "运行 pip install --upgrade setuptools wheel 之后，再执行 python setup.py build_ext --inplace 即可。",
    "使用 systemctl restart nginx 重启服务前，先用 nginx -t 检查 nginx.conf 的语法是否正确。",
    "在 Dockerfile 中用 COPY requirements.txt /app/ 复制依赖清单，再 RUN pip install -r requirements.txt。",
    "调用 torch.cuda.is_available() 检查 GPU，然后用 model.to(device) 把模型移到显卡上。",
    "What is the boiling point of water at sea level in Celsius?",
    "Which organ of the human body produces insulin?",
    "Which of the following statements about the water cycle is correct when considering "
    "evaporation, condensation and precipitation over the ocean?",
]
# The same passages quoted in documents: spaces added or removed around Latin words,
# full-width punctuation, doubled spaces, a line break, other case.
QUOTES = [
    "引导分区用于存放启动加载程序和内核映像， 安装系统时应当为它分配至少五百兆字节的空间 并格式化",
    "交换分区在物理内存不足时充当虚拟内存,其大小通常设为内存的一到两倍\n休眠功能需要更大的空间",
    "修改配置文件后 需要重新加载服务才能使新的设置生效，否则系统仍然使用旧的参数运行",
    "运行pip install  --upgrade setuptools wheel之后，再执行python setup.py build_ext --inplace即可",
    "使用systemctl restart nginx重启服务前，先用nginx -t检查nginx.conf的语法是否正确",
    "在Dockerfile中用COPY requirements.txt /app/复制依赖清单，再RUN pip install -r requirements.txt",
    "调用 torch.cuda.is_available ( ) 检查 GPU ，然后用 model.to ( device ) 把模型移到显卡上",
    "WHAT IS THE BOILING POINT OF WATER AT SEA LEVEL IN CELSIUS",
    "which  organ of the human\nbody produces insulin ？",
    "the following statements about the water cycle is correct when considering evaporation， "
    "condensation and precipitation over",
]
CLEAN = [
    "安装系统时，引导分区和交换分区的大小可以按需要调整，详见安装手册。",
    "重启服务：systemctl restart nginx。修改 nginx.conf 之后记得检查语法。",
    "用 pip install -r requirements.txt 安装依赖，然后运行 python setup.py build_ext。",
    "调用 torch.cuda.is_available() 的结果决定是否使用 GPU 训练。",
    "Water boils at 100 degrees Celsius at sea level; the point is lower in the mountains.",
    "The pancreas is an organ of the human body; insulin regulates blood sugar.",
    "What is the boiling point of ethanol?",
    "修改配置文件后需要重新加载服务。",  # a fragment of an item (9 characters)
]


def write_items(path: Path) -> Path:
    rows = [{"id": i, "question": q} for i, q in enumerate(ITEMS)]
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), "utf-8")
    return path


def make_op(tmp_path: Path, **params) -> Decontaminate:
    raw = {"eval_sets": [{"path": "items.jsonl", "fields": ["question"]}], **params}
    write_items(tmp_path / "items.jsonl")
    op = Decontaminate(
        from_mapping(Decontaminate.Config, raw, "stages[0]"), OpContext(base_dir=str(tmp_path))
    )
    op.setup()
    return op


def drops(op: Decontaminate, texts: list[str]) -> list[str | None]:
    n = len(texts)
    batch = pa.table(
        {"id": [f"d{i}" for i in range(n)], "text": texts, DROP: pa.nulls(n, pa.string())}
    )
    return op.apply(op.prepare(batch), None).column(DROP).to_pylist()


def test_mixed_text_is_one_stream_of_characters_and_words():
    assert tokens("使用systemctl restart nginx重启服务，v1.2") == [
        "使", "用", "systemctl", "restart", "nginx", "重", "启", "服", "务", "v1", "2",
    ]  # fmt: skip
    assert tokens("使用 systemctl restart nginx 重启服务") == tokens(
        "使用systemctl restart nginx重启服务"
    )
    assert span_text(["使", "用", "pip", "install", "安", "装"]) == "使用pip install安装"


def test_every_quoted_passage_is_caught_and_no_clean_document_is_lost(tmp_path):
    op = make_op(tmp_path)
    documents = [f"前文介绍了背景。{q}。后文继续。" for q in QUOTES] + CLEAN
    assert drops(op, documents) == ["decontaminate:items"] * len(QUOTES) + [None] * len(CLEAN)


def test_short_items_are_one_ngram_long_ones_windows(tmp_path):
    cfg = Decontaminate.Config(eval_sets=(EvalSet("x"),))  # defaults: 13, 25, 8
    lengths = [item_ngrams(q, cfg.word_ngram, cfg.char_ngram, cfg.min_item_words) for q in ITEMS]
    counts = [(len(h), n) for h, n in lengths]
    # (n-grams, tokens per n-gram): zh passages of 44, 43 and 38 characters give windows
    # of 25; mixed ones are windows of 25 or 13 by their majority (20 and 21 tokens, mostly
    # words: 13) or, shorter than their n, one n-gram as long as themselves (23 tokens);
    # the 12- and 8-word questions are one n-gram each; the 20-word one gives 13-grams
    assert counts == [
        (20, 25), (19, 25), (14, 25), (8, 13), (1, 25), (9, 13), (1, 23), (1, 12), (1, 8), (8, 13),
    ]  # fmt: skip
    assert item_ngrams("公民有受教育的权利", 13, 25, 8)[0].size == 0  # 9 characters: 4.5 words
    assert item_ngrams("Paris", 13, 25, 8)[0].size == 0


def test_an_item_fragment_shorter_than_the_item_is_not_a_match(tmp_path):
    op = make_op(tmp_path)
    # 7 of the 8 words of a short item, and 24 of a zh passage's 45 characters
    assert drops(op, ["Which organ of the human body produces", ITEMS[0][:24]]) == [None, None]


def test_min_item_words_is_checked():
    with pytest.raises(ConfigError, match=r"min_item_words must be in \[3, word_ngram=13\]"):
        from_mapping(
            Decontaminate.Config, {"eval_sets": [{"path": "a"}], "min_item_words": 20}, "s"
        )
