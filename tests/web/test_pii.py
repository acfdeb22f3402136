"""The pii op: exact redaction, the three modes, counts per kind, checksums, and the
measured precision/recall on the labeled set."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from dataforge.ops.base import op_class
from dataforge.ops.pii import Pii
from dataforge.ops.pii_patterns import find_pii, id_cn_valid, luhn_valid
from dataforge.records import BASE_SCHEMA

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from pii_quality import scores  # noqa: E402
from pii_sets import KINDS, build_set, invalid_card, invalid_id, valid_card, valid_id  # noqa: E402

ZH = (
    "请联系张伟，手机13812345678，邮箱zhang.wei@pku.edu.cn，"
    "身份证11010519491231002X，工行卡6222 0212 3456 7894。"
)
EN = "Call +44 20 7946 0958 or (212) 555-0147; server 192.168.1.10 and 2001:db8::8a2e:370:7334."


def batch(texts: list[str], drops: list[str | None] | None = None) -> pa.Table:
    n = len(texts)
    return pa.table(
        {
            "id": [f"t{i}" for i in range(n)],
            "text": texts,
            "source": ["s"] * n,
            "lang": ["zh"] * n,
            "meta": ["{}"] * n,
            "drop": drops or [None] * n,
            "_ord": list(range(n)),
        },
        schema=BASE_SCHEMA,
    )


def test_registry_names_the_op():
    assert op_class("pii") is Pii


def test_redact_replaces_every_kind_with_its_token():
    op = Pii(Pii.Config())
    out = op(batch([ZH, EN, "没有个人信息。"])).column("text").to_pylist()
    assert out == [
        "请联系张伟，手机<PHONE>，邮箱<EMAIL>，身份证<ID>，工行卡<CARD>。",
        "Call <PHONE> or <PHONE>; server <IP> and <IP>.",
        "没有个人信息。",
    ]
    assert dict(op.events) == {
        "pii:phone_cn": 1,
        "pii:email": 1,
        "pii:id_cn": 1,
        "pii:bank_card": 1,
        "pii:phone_intl": 2,
        "pii:ipv4": 1,
        "pii:ipv6": 1,
        "pii:records": 2,
    }


def test_tokens_and_kinds_are_configurable():
    op = Pii(Pii.Config(kinds=("email", "id_cn"), tokens={"email": "[邮箱]"}))
    assert op(batch([ZH])).column("text")[0].as_py() == (
        "请联系张伟，手机13812345678，邮箱[邮箱]，身份证<ID>，工行卡6222 0212 3456 7894。"
    )


def test_drop_mode_gives_the_first_kind_and_keeps_earlier_drops():
    op = Pii(Pii.Config(mode="drop"))
    out = op(batch([ZH, EN, "clean text", ZH], [None, None, None, "quality:too_short"]))
    assert out.column("drop").to_pylist() == [
        "pii:phone_cn",
        "pii:phone_intl",
        None,
        "quality:too_short",
    ]
    assert out.column("text").to_pylist()[:2] == [ZH, EN]
    assert op.events["pii:records"] == 2


def test_tag_mode_keeps_the_text_and_counts_kinds_in_meta():
    out = Pii(Pii.Config(mode="tag"))(batch([EN, "nothing here"]))
    assert out.column("text").to_pylist() == [EN, "nothing here"]
    metas = [json.loads(m) for m in out.column("meta").to_pylist()]
    assert metas == [{"pii": {"ipv4": 1, "ipv6": 1, "phone_intl": 2}}, {}]


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"kinds": ("email", "ssn")}, "unknown kind(s) ['ssn']"),
        ({"tokens": {"passport": "<P>"}}, "unknown kind(s) ['passport']"),
        ({"mode": "mask"}, "valid: 'redact', 'drop', 'tag'"),
        ({"kinds": ()}, "pii.kinds is empty"),
    ],
)
def test_bad_config_names_the_valid_choices(config, message):
    with pytest.raises(
        ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")
    ):
        Pii.Config(**config)


def test_checksum_failing_ids_and_cards_are_never_redacted():
    rng = random.Random(5)
    for _ in range(2000):
        bad_id, bad_card = invalid_id(rng), invalid_card(rng)
        assert not id_cn_valid(bad_id)
        assert not luhn_valid(bad_card.replace(" ", "").replace("-", ""))
        for text in (f"证件号{bad_id}。", f"卡号{bad_card}。", f"No. {bad_id} / {bad_card}."):
            assert find_pii(text) == [], text


def test_valid_ids_and_cards_are_found_with_exact_bounds():
    rng = random.Random(6)
    for _ in range(500):
        value_id, value_card = valid_id(rng), valid_card(rng)
        text = f"号码{value_id}，卡{value_card}。"
        spans = [(s.kind, text[s.start : s.end]) for s in find_pii(text)]
        assert spans == [("id_cn", value_id), ("bank_card", value_card)]


def test_random_18_digit_numbers_are_left_alone_unless_their_checksum_holds():
    rng = random.Random(7)
    for _ in range(3000):
        digits = "".join(rng.choice("0123456789") for _ in range(18))
        spans = find_pii(f"编号{digits}。")
        if spans:
            kind = spans[0].kind
            assert (kind == "id_cn" and id_cn_valid(digits)) or (
                kind == "bank_card" and luhn_valid(digits) and digits[0] in "23456"
            ), digits


def test_labeled_set_meets_the_precision_and_recall_targets():
    result = scores(build_set(per_kind=200, seed=11))
    for kind in KINDS:
        precision, recall, tp, _, _ = result[kind]
        assert tp >= 190, (kind, result[kind])
        assert precision >= 0.98 and recall >= 0.95, (kind, result[kind])


def test_validators_are_what_keeps_precision_on_the_hard_negatives():
    without = scores(build_set(per_kind=100, seed=11), validate=False)
    for kind in ("id_cn", "bank_card", "ipv4", "ipv6"):
        assert without[kind][0] < 0.9, (kind, without[kind])


def test_a_card_failing_luhn_is_not_read_as_a_phone_number_inside_it():
    assert find_pii("卡号6222 0212 3456 7891。") == []
    assert find_pii("Order 4111-2222-3333-4445 shipped.") == []


@pytest.mark.parametrize(
    "text",
    [
        "LinearRegression(slope=3.09078914170..., intercept=1.5)",
        "Install it with pip::",
        "回归直线的斜率为3.09078914170，截距为0.5。",
        "版本号 10.0.19045.3570 与 1.2.3.4.5",
        "会议于12:30:45开始，QQ群：697619834。",
    ],
)
def test_demo_corpus_false_positives_stay_fixed(text):
    assert find_pii(text) == []


def test_mainland_numbers_with_country_code():
    text = "北京办公室 +86 10 6275 1234，深圳 +86-755-88886666，手机 +86 138 1234 5678。"
    assert [(s.kind, text[s.start : s.end]) for s in find_pii(text)] == [
        ("phone_cn", "+86 10 6275 1234"),
        ("phone_cn", "+86-755-88886666"),
        ("phone_cn", "+86 138 1234 5678"),
    ]


def test_redaction_leaves_nothing_to_find_and_only_touches_spans():
    from dataforge.ops.pii import DEFAULT_TOKENS, redact

    for text, gold in build_set(per_kind=40, seed=3):
        spans = find_pii(text)
        out = redact(text, spans, DEFAULT_TOKENS)
        assert find_pii(out) == []
        outside = "".join(
            text[a:b]
            for a, b in zip(
                [0] + [s.end for s in spans], [s.start for s in spans] + [len(text)], strict=True
            )
        )
        for token in set(DEFAULT_TOKENS.values()):
            out = out.replace(token, "")
        assert out == outside
        assert len(spans) == len(gold)
