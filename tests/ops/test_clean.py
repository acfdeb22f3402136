"""The clean op: exact output per rule, bad input, drop accounting, idempotence."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataforge.ops.base import op_class
from dataforge.ops.clean import Clean
from dataforge.records import BASE_SCHEMA
from dataforge.text.surrogates import replace_lone_surrogates

FIXTURES = Path(__file__).parent.parent / "fixtures"
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\ufffe\uffff]")


def batch(texts: list[str | None], drops: list[str | None] | None = None) -> pa.Table:
    n = len(texts)
    return pa.table(
        {
            "id": [f"t{i}" for i in range(n)],
            "text": texts,
            "source": ["s"] * n,
            "lang": ["en"] * n,
            "meta": ["{}"] * n,
            "drop": drops or [None] * n,
            "_ord": list(range(n)),
        },
        schema=BASE_SCHEMA,
    )


def clean(text: str | None, **config) -> str:
    return Clean(Clean.Config(**config))(batch([text])).column("text")[0].as_py()


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        # NFKC: full-width ASCII, ideographic space, ligatures, ellipsis
        ("ＡＢＣ１２３，你好\u3000世界", "ABC123,你好 世界"),
        ("ﬁne…", "fine..."),
        # line endings: CRLF, CR-only, form feed, U+2028
        ("a\r\nb\rc\x0cd\u2028e", "a\nb\nc\nd\ne"),
        # NUL and other controls; tab and newline survive
        ("a\x00\x00b\x07c\x7fd\x9fe\tf", "abcde\tf"),
        # zero-width and invisible format characters
        ("a\u200bb\u200dc\ufeffd\u00ade\u200ff", "abcdef"),
        # HTML tags (block tags break lines), comments, script/style, entities
        ("<p>Hello <b>world</b></p>after", "Hello world\nafter"),
        ("<div class='x'>a</div><!-- note -->b<br/>c", "a\nb\nc"),
        ("<script type='text/javascript'>var x = 1;</script>ok<style>p {}</style>", "ok"),
        ("a &amp; b &lt;c&gt; &#169; &#x4E2D;", "a & b <c> © 中"),
        # double escaping decodes to the end; revealed tags are removed too
        ("&amp;lt;b&amp;gt;bold&amp;amp;", "bold&"),
        # not markup: comparisons, unknown tag names, entities without ';'
        ("if a<b: c > d; x <value> AT&T &copy 2", "if a<b: c > d; x <value> AT&T &copy 2"),
        # whitespace: space runs, trailing spaces, blank lines, trimming, indentation kept
        ("  x   y\t\tz  \n\n\n\n  w  \n", "x y\t\tz\n\n  w"),
        ("def f():\n    return  1", "def f():\n    return 1"),
        ("a\u00a0\u2003b", "a b"),
    ],
)
def test_default_rules_exact(raw: str, expected: str) -> None:
    assert clean(raw) == expected


@pytest.mark.parametrize(
    ("raw", "config", "expected"),
    [
        ("ＡＢＣ\u3000ｄ", {"normalization": "none"}, "ABC d"),
        ("ＡＢＣ", {"normalization": "NFC", "fullwidth_to_halfwidth": False}, "ＡＢＣ"),
        ("e\u0301", {"normalization": "NFD"}, "e\u0301"),
        ("e\u0301", {"normalization": "NFC"}, "é"),
        ("a\u200bb", {"remove_invisible": False}, "a\u200bb"),
        ("<b>x</b> &amp;", {"strip_html": False}, "<b>x</b> &amp;"),
        (
            "see https://example.com/a?b=1&c=2. or www.python.org, ok",
            {"remove_urls": True, "url_replacement": "[URL]"},
            "see [URL]. or [URL], ok",
        ),
        ("访问www.smallstonesoft.com交流", {"remove_urls": True}, "访问交流"),
        ("mail a.b-c@mail.example.org now", {"remove_emails": True}, "mail now"),
        (
            "mail a.b@example.org now",
            {"remove_emails": True, "email_replacement": "<EMAIL>"},
            "mail <EMAIL> now",
        ),
        ("https://example.com a@b.org", {}, "https://example.com a@b.org"),
        ("x\n    y  z", {"keep_indentation": False}, "x\n y z"),
        ("a\n\n\n\nb", {"max_blank_lines": 0}, "a\nb"),
        ("a\n\n\n\nb", {"max_blank_lines": 2}, "a\n\n\nb"),
        ("a  \n\n\nb", {"normalize_whitespace": False}, "a  \n\n\nb"),
    ],
)
def test_configured_rules_exact(raw: str, config: dict, expected: str) -> None:
    assert clean(raw, **config) == expected


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"normalization": "NFX"}, "NFKC, NFC, NFKD, NFD, none"),
        ({"invalid_utf8": "ignore"}, "remove, replace, drop"),
        ({"max_blank_lines": -1}, "max_blank_lines"),
        ({"url_replacement": "see http://x.org"}, "would itself be removed"),
        ({"email_replacement": "me@example.org"}, "would itself be removed"),
    ],
)
def test_bad_config_is_rejected(config: dict, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        Clean.Config(**config)


def test_registry_resolves_clean() -> None:
    assert op_class("clean") is Clean


def test_lone_surrogates_become_replacement_chars() -> None:
    assert replace_lone_surrogates("a\ud800b\udfffc") == "a\ufffdb\ufffdc"
    assert replace_lone_surrogates("\ud83d\ude00") == "😀"
    assert replace_lone_surrogates("plain 文本") == "plain 文本"


@pytest.mark.parametrize(
    ("policy", "text", "drop", "meta"),
    [
        ("remove", "badbytes", None, {"invalid_chars": 1}),
        ("replace", "bad\ufffdbytes\ufffd", None, {"invalid_chars": 2}),
        ("drop", "", "invalid_utf8", {}),
    ],
)
def test_invalid_utf8_policies(policy: str, text: str, drop: str | None, meta: dict) -> None:
    raw = replace_lone_surrogates("bad\udc80bytes") + ("\ufffd" if policy == "replace" else "")
    out = Clean(Clean.Config(invalid_utf8=policy))(batch([raw, "fine"])).to_pylist()
    assert (out[0]["text"], out[0]["drop"], json.loads(out[0]["meta"])) == (text, drop, meta)
    assert (out[1]["text"], out[1]["drop"]) == ("fine", None)


def test_empty_results_are_dropped_and_order_kept() -> None:
    texts = ["keep me", "", "  \n\t \r\n", None, "<br/>&nbsp;\u200b", "\x00", "also kept"]
    out = Clean(Clean.Config())(batch(texts)).to_pylist()
    assert [r["id"] for r in out] == [f"t{i}" for i in range(len(texts))]
    assert [r["_ord"] for r in out] == list(range(len(texts)))
    assert [r["drop"] for r in out] == [None, "empty", "empty", "empty", "empty", "empty", None]
    assert [r["text"] for r in out] == ["keep me", "", "", "", "", "", "also kept"]


def test_rows_dropped_earlier_are_untouched() -> None:
    out = Clean(Clean.Config())(batch(["ＡＢ  c", "ＡＢ  c"], drops=["too_long", None]))
    assert out.column("text").to_pylist() == ["ＡＢ  c", "AB c"]
    assert out.column("drop").to_pylist() == ["too_long", None]


def test_real_text_fixtures() -> None:
    news = (FIXTURES / "ops_news_zh.txt").read_text("utf-8")
    out = clean(news)
    assert "１２月３１日" in news and "12月31日" in out
    assert "（记者刘子富）" in news and "(记者刘子富)" in out
    assert out.count("\n") == news.strip().count("\n")
    docs = (FIXTURES / "ops_docs_en.txt").read_text("utf-8")
    out = clean(docs)
    assert "        x = copy.copy(y) # make a shallow copy of y" in out
    assert clean(out) == out


# Text drawn from an alphabet rich in what the rules touch, so that the properties meet
# markup, entities, full-width forms, controls and whitespace runs.
_MARKUP = "< > & ; # x amp lt gt b p br / !-- -- script &#60; &#x26; &amp; http://a.b www. a@b.cd"
_UNICODE = "Ａ １ ＜ ＆ ； … ﬁ e \u0301 \ufffd 中文 \u200b \u3000 \u2028 \x85 \x00 \x0c"
_PIECES = st.sampled_from([*_MARKUP.split(" "), *_UNICODE.split(" "), "\n", "\r", " ", "  ", "\t"])
_TEXTS = st.one_of(st.text(max_size=60), st.lists(_PIECES, max_size=30).map("".join))
_CONFIGS = st.fixed_dictionaries(
    {
        "normalization": st.sampled_from(["NFKC", "NFC", "none"]),
        "remove_urls": st.booleans(),
        "remove_emails": st.booleans(),
        "keep_indentation": st.booleans(),
        "max_blank_lines": st.integers(0, 2),
        "invalid_utf8": st.sampled_from(["remove", "replace"]),
    }
)


@settings(max_examples=300, deadline=None)
@given(texts=st.lists(_TEXTS, min_size=1, max_size=8), config=_CONFIGS)
def test_properties_idempotent_no_controls_all_accounted(texts: list[str], config: dict) -> None:
    op = Clean(Clean.Config(**config))
    texts = [replace_lone_surrogates(t) for t in texts]
    once = op(batch(texts))
    assert once.num_rows == len(texts)
    for row in once.to_pylist():
        assert (row["drop"] is None) != (row["text"] == "")  # kept, or dropped with a reason
        assert row["drop"] in (None, "empty")
        assert not CONTROL.search(row["text"])
        assert row["text"] == row["text"].strip(" \t\n")
    kept = [r["text"] for r in once.to_pylist() if r["drop"] is None]
    twice = op(batch(kept)) if kept else None
    if twice is not None:
        assert twice.column("text").to_pylist() == kept
        assert twice.column("drop").null_count == len(kept)


def test_empty_and_fully_dropped_batches_pass_through() -> None:
    op = Clean(Clean.Config())
    assert op(batch([])).num_rows == 0
    dropped = batch(["ＡＢ", "x  y"], drops=["too_long", "error:json"])
    assert op(dropped).equals(dropped)
    assert op.validate() == []


# Characters every guarded pass of the clean op rewrites, and ordinary ones around them.
_WHITESPACE_PIECES = [
    "a", "中", " ", "  ", "\t", "\n", "\n\n", "\n\n\n", " \n", "\t\n", "\r", "\r\n", "\x0b",
    "\x0c", "\x85", "\u2028", "\u2029", "\x00", "\x1f", "\x7f", "\x9f", "\ufffe", "\u00ad",
    "\u200b", "\u202e", "\u2066", "\ufeff", "\u00a0", "\u3000", "\u2009", "x  y",
]  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(
    texts=st.lists(
        st.lists(st.sampled_from(_WHITESPACE_PIECES), max_size=12).map("".join), max_size=8
    ),
    keep_indentation=st.booleans(),
    max_blank_lines=st.integers(0, 3),
    remove_invisible=st.booleans(),
)
def test_guarded_passes_equal_the_passes_over_every_row(
    texts: list[str], keep_indentation: bool, max_blank_lines: int, remove_invisible: bool
) -> None:
    """The clean op rewrites line breaks, controls and spaces only in rows its guard
    matches: the guard must match every row a pass would change."""
    from dataforge.text import clean as c

    cfg = c.CleanConfig(
        keep_indentation=keep_indentation,
        max_blank_lines=max_blank_lines,
        remove_invisible=remove_invisible,
    )
    arr = pa.array(texts, pa.string())
    assert c._on_rows(arr, c._NORMALIZE_GUARD, lambda a: c._breaks_and_controls(a, cfg)).equals(
        c._breaks_and_controls(arr, cfg)
    )
    trimmed = c.pc.utf8_trim(c._rewrite_spaces(arr, cfg), characters=" \t\n")
    assert c._tidy_whitespace(arr, cfg).equals(trimmed)
