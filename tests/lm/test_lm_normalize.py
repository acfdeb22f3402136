"""CCNet normalization: exact outputs, and the batched version equals CCNet's per-line code."""

from __future__ import annotations

import re
import sys
import unicodedata

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from dataforge.text import normalize as normalize_module
from dataforge.text.normalize import (
    UNICODE_PUNCT,
    normalize_documents,
    normalize_line,
    normalize_lines,
)


def ccnet_normalize(line: str) -> str:
    """CCNet's ``text_normalizer.normalize(line)`` (accent, case, numbers, punct=1), transcribed
    character by character as the reference for the batched implementation."""
    line = line.strip()
    if not line:
        return line
    line = line.lower()
    line = "".join(c for c in unicodedata.normalize("NFD", line) if unicodedata.category(c) != "Mn")
    line = re.sub(r"\d", "0", line)
    line = "".join(UNICODE_PUNCT.get(c, c) for c in line)
    return re.sub(f"[{''.join(map(chr, [*range(0, 32), *range(127, 160)]))}]", "", line)


def test_ccnet_numbers_case() -> None:
    # cc_net tests/test_normalizer.py::test_numbers
    assert normalize_line("０２３４５６７８９ | 0123456789") == "000000000 | 0000000000"


def test_ccnet_punctuation_table() -> None:
    # cc_net test_unicode_punct: every mapped character; "１" is a digit, so normalize gives "0"
    weird = "，。、„”“«»」「《》´∶：？！（）；–—．～’…━〈〉【】％"
    assert normalize_line(weird) == ",.," + '"' * 9 + "'::?!();- - . ~'...-<>[]%"
    assert normalize_line("１") == "0"


def test_exact_outputs() -> None:
    assert normalize_line("  Héllo Wörld，１２３。 ") == "hello world,000."
    assert normalize_line("Ça VA? Ελληνικά ΣΟΦΟΣ") == "ca va? ελληνικα σοφος"
    assert normalize_line("a\x00b\x1fc\x7fd\x9fe") == "abcde"
    assert (
        normalize_line("\u3000 中华人民共和国成立于１９４９年。\t") == "中华人民共和国成立于0000年."
    )
    assert normalize_line("“引号”和《书名》——破折号…") == '"引号"和"书名" -  - 破折号...'
    assert normalize_line("\x01 x") == " x"  # stripped before control characters go, as CCNet
    assert normalize_line("   ") == ""
    assert normalize_line("ＡＢＣ") == "ａｂｃ"  # NFD keeps fullwidth letters (no NFKC in CCNet)


def test_documents_split_on_newlines() -> None:
    lines, counts = normalize_documents(["Ａ１\nB", "", " \n Ｃ\r", "x"])
    assert lines == ["ａ0", "b", "", "", "ｃ", "x"]
    assert counts == [2, 1, 2, 1]
    assert normalize_documents([]) == ([], [])


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\n")), max_size=8
    )
)
def test_batched_equals_ccnet_per_line(lines: list[str]) -> None:
    assert normalize_lines(lines) == [ccnet_normalize(line) for line in lines]


def test_code_point_tables_equal_a_plain_loop_over_every_code_point() -> None:
    """The tables are built with C-level passes (``re`` classes, one ``category`` map);
    the plain loop they replaced gives the same arrays, code point by code point."""
    size = sys.maxunicode + 1
    first = np.arange(size, dtype=np.uint32)
    length = np.ones(size, np.uint8)
    for cp in range(size):
        char = chr(cp)
        category = unicodedata.category(char)
        if category == "Mn":
            length[cp] = 0
        elif category == "Nd":
            first[cp] = ord("0")
        elif char in UNICODE_PUNCT and len(UNICODE_PUNCT[char]) == 1:
            first[cp] = ord(UNICODE_PUNCT[char])
    length[[*range(0, 32), *range(127, 160)]] = 0
    length[ord("\n")] = 1
    got = normalize_module._tables.__wrapped__()
    for name, expected, actual in zip(("first", "length"), (first, length), got, strict=True):
        assert np.array_equal(actual, expected), name
