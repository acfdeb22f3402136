"""The pii detectors' pre-checks: a kind is skipped on a text that lacks the piece every
candidate of that kind contains, so skipping never changes the spans found."""

from __future__ import annotations

import sys
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from dataforge.ops import pii_patterns
from dataforge.ops.pii_patterns import PII_KINDS, find_pii

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from pii_sets import build_set  # noqa: E402

# digits, the separators and labels of the patterns, hex letters, and Chinese text
_ALPHABET = "0123456789" * 4 + " .-:@+()x（）" * 2 + "abcdefXABCDEF" + "电话号码卡。，的"


def _assert_required_in_every_candidate(text: str) -> None:
    for kind in PII_KINDS:
        for m in pii_patterns._PATTERNS[kind].finditer(text):
            assert pii_patterns._REQUIRED[kind].search(m.group()), (kind, m.group())
            if kind not in pii_patterns._DIGIT_FREE_KINDS:
                assert pii_patterns._ANY_DIGIT.search(m.group()), (kind, m.group())


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=_ALPHABET, min_size=8, max_size=60))
def test_every_candidate_holds_its_kinds_required_piece(text):
    _assert_required_in_every_candidate(text)


def test_every_labeled_passage_keeps_its_candidates():
    passages = build_set(per_kind=60, seed=4)
    for text, _ in passages:
        _assert_required_in_every_candidate(text)
    found = {span.kind for text, _ in passages for span in find_pii(text)}
    assert found == set(PII_KINDS)  # every kind's pattern was exercised


def test_kinds_without_their_piece_are_skipped():
    candidate_kinds = pii_patterns._candidate_kinds
    assert candidate_kinds("没有任何数字的中文段落，也没有邮箱。", PII_KINDS) == []
    assert candidate_kinds("Mail a.b@example.com today.", PII_KINDS) == ["email"]
    assert candidate_kinds("Release v2: see fe80::1.", PII_KINDS) == ["ipv6"]
    assert candidate_kinds("Call +44 20 7946 0958.", PII_KINDS) == [
        "bank_card",
        "phone_cn",
        "phone_intl",
    ]
    assert candidate_kinds("Call +44 20 7946 0958.", ("phone_intl", "email")) == ["phone_intl"]
    assert find_pii("Call +44 20 7946 0958.") == [(5, 21, "phone_intl")]
