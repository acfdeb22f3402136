"""url_filter blocklists see the host a browser visits: other spellings of a listed host
(full-width letters, a percent-encoded host, a Unicode name of a listed ``xn--`` name, a
backslash before ``@``, user info, a trailing dot) are blocked, and hosts that only look
alike are not."""

from __future__ import annotations

import json

import pytest
from webkit import records, run_barrier

from dataforge.ops.base import OpContext
from dataforge.ops.url_filter import UrlFilter, normalize_host, normalize_url

BLOCKED = [
    "http://ｅｖｉｌ.example.cn/page",  # full-width letters (NFKC)
    "http://ＥＶＩＬ．example．cn/page",  # full-width capitals and full stops
    "http://evil%2Eexample%2Ecn/page",  # a percent-encoded host
    "http://%65vil.example.cn/page",
    "http://中国.example.cn/page",  # listed as xn--fiqs8s.example.cn
    "http://evil.example.cn\\@good.example.cn/",  # \ ends the host for http(s)
    "https://evil.example.cn\\\\good.example.cn/",
    "http://good.example.cn@evil.example.cn/",  # user info is not the host
    "http://user:pw@EVIL.example.cn./a",  # case, trailing dot
    "http://ev\til.exam\nple.cn/",  # tabs and newlines are removed, as a browser does
    "HTTP:evil.example.cn/x",  # a special scheme needs no slashes
    "http://news.evil.example.cn:8080/",  # a subdomain
    "http://0x7f.1/admin",  # 127.0.0.1, listed
]
KEPT = [
    "http://good.example.cn/@evil.example.cn",  # the path names evil, the host is good
    "http://good.example.cn/?next=http://evil.example.cn",
    "http://notevil.example.cn/",
    "http://evil.example.cn.good.example.cn/",
    "http://xn--fiqs8s.example.com/",  # same label, another domain
    "http://127.0.0.2/",
]
DOMAINS = ("evil.example.cn", "xn--fiqs8s.example.cn", "127.0.0.1")


@pytest.mark.parametrize(
    ("url", "normalized"),
    [
        ("http://ｅｖｉｌ.example.cn/x", "http://evil.example.cn/x"),
        ("http://evil%2Eexample%2Ecn/", "http://evil.example.cn/"),
        ("http://中国.example.cn/", "http://xn--fiqs8s.example.cn/"),
        ("http://evil.example.cn\\@good.example.cn/", "http://evil.example.cn/@good.example.cn/"),
        ("http://user:pw@EVIL.example.cn./a", "http://evil.example.cn/a"),
        ("http://0x7f.1/", "http://127.0.0.1/"),
        ("http://ex%00ample.cn/", None),  # a forbidden host code point
        ("http://a b.cn/", None),
        ("javascript:alert(1)", None),
    ],
)
def test_normalize_url_parses_as_a_browser_does(url: str, normalized: str | None) -> None:
    assert normalize_url(url) == normalized


def test_listed_domains_are_normalized_the_same_way() -> None:
    assert normalize_host("ＥＶＩＬ.中国.") == "evil.xn--fiqs8s"
    assert normalize_host("中国.example.cn") == normalize_host("xn--fiqs8s.example.cn")
    for bad in ("example.cn/path", "user@example.cn", "a b.cn", "ex%00ample.cn", "e\\x.cn"):
        assert normalize_host(bad) is None
        with pytest.raises(ValueError, match="is not a host name"):
            UrlFilter.Config(blocked_domains=(bad,))


def _drops(tmp_path, urls: list[str], **config) -> dict[str, str | None]:
    op = UrlFilter(UrlFilter.Config(dedup=False, **config), OpContext(seed=1))
    table = records([f"text {i}" for i in range(len(urls))], [{"url": u} for u in urls])
    _, out = run_barrier(tmp_path, op, table, 4)
    by_id = dict(zip(out.column("id").to_pylist(), out.column("drop").to_pylist(), strict=True))
    return {url: by_id[f"d{i:05d}"] for i, url in enumerate(urls)}


def test_every_spelling_of_a_listed_host_is_blocked(tmp_path) -> None:
    drops = _drops(tmp_path, BLOCKED + KEPT, blocked_domains=DOMAINS)
    assert {u: drops[u] for u in BLOCKED} == dict.fromkeys(BLOCKED, "url:blocked_domain")
    assert {u: drops[u] for u in KEPT} == dict.fromkeys(KEPT, None)


def test_a_unicode_listed_domain_blocks_its_ascii_spelling(tmp_path) -> None:
    urls = ["http://xn--fiqs8s.example.cn/", "http://中国.example.cn/", "http://中国.example.com/"]
    drops = _drops(tmp_path, urls, blocked_domains=("中国.Example.CN.",))
    assert list(drops.values()) == ["url:blocked_domain", "url:blocked_domain", None]


def test_substrings_match_the_readable_and_the_ascii_form(tmp_path) -> None:
    urls = [
        "http://xn--mes317j.cn/",  # 赌场.cn in ASCII
        "http://news.cn/%E8%B5%8C%E5%9C%BA/1",  # /赌场/1, percent-encoded
        "http://news.cn/ＣＡＳＩＮＯ",  # full-width capitals
        "http://news.cn/sports",
    ]
    drops = _drops(tmp_path, urls, blocked_substrings=("赌场", "casino"))
    assert list(drops.values()) == ["url:blocked_substring"] * 3 + [None]


def test_the_normalized_url_is_recorded_in_ascii(tmp_path) -> None:
    op = UrlFilter(UrlFilter.Config(dedup=False), OpContext(seed=1))
    table = records(["a"], [{"url": "http://ｅｖｉｌ.中国\\@good.cn/路径"}])
    _, out = run_barrier(tmp_path, op, table, 4)
    meta = json.loads(out.column("meta")[0].as_py())
    assert meta["url_normalized"] == "http://evil.xn--fiqs8s/@good.cn/%E8%B7%AF%E5%BE%84"
