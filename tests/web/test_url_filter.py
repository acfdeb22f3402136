"""url_filter: normalization, blocklists, latest-capture dedup and domain cap, through
the barrier seam (prepare -> plan -> apply) with identical results for any task size."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from webkit import records, run_barrier

from dataforge.ops.base import OpContext, op_class
from dataforge.ops.url_filter import UrlFilter, normalize_url, planner, url_key


@pytest.mark.parametrize(
    ("url", "normalized"),
    [
        (
            "HTTP://WWW.Example.COM:80/a/../b/?utm_source=x&b=2&a=1#frag",
            "http://www.example.com/b/?a=1&b=2",
        ),
        ("https://example.com:443", "https://example.com/"),
        ("https://example.com:8443/x?fbclid=1", "https://example.com:8443/x"),
        (
            "http://新闻.中国/路径/页面.html",
            "http://xn--efvy88h.xn--fiqs8s/%E8%B7%AF%E5%BE%84/%E9%A1%B5%E9%9D%A2.html",
        ),
        ("http://a.cn/%7Euser/", "http://a.cn/~user/"),
        ("ftp://example.com/file", None),
        ("not a url", None),
        ("http://[::1", None),
    ],
)
def test_normalize_url(url, normalized):
    assert normalize_url(url) == normalized


def test_dedup_key_ignores_scheme_and_www():
    a = url_key(normalize_url("http://www.example.com/p?id=1"))
    b = url_key(normalize_url("https://example.com/p?id=1"))
    assert a == b == ("example.com/p?id=1", "example.com")


def capture(url, date):
    return {"url": url, "warc_date": date}


METAS = [
    capture("http://news.example.cn/a.html", "2024-01-01T00:00:00Z"),
    capture("https://news.example.cn/a.html#top", "2024-03-01T00:00:00Z"),  # latest of a
    capture("http://www.news.example.cn/a.html?utm_medium=rss", "2024-02-01T00:00:00Z"),
    capture("http://ads.casino-example.com/win", "2024-01-01T00:00:00Z"),
    capture("http://shop.example.org/login?next=/", "2024-01-01T00:00:00Z"),
    capture("mailto:someone@example.com", None),
    {},
] + [capture(f"http://blog.example.net/p{i}", "2024-01-01T00:00:00Z") for i in range(8)]


def run(tmp_path, batch, memory_bytes=None, **config):
    op = UrlFilter(UrlFilter.Config(**config), OpContext(seed=3))
    table = records([f"text {i}" for i in range(len(METAS))], METAS)
    return run_barrier(tmp_path, op, table, batch, memory_bytes)


def test_rules_and_counts(tmp_path):
    summary, out = run(
        tmp_path,
        4,
        blocked_domains=("casino-example.com",),
        blocked_substrings=("/LOGIN",),
        max_per_domain=5,
    )
    drops = dict(zip(out.column("id").to_pylist(), out.column("drop").to_pylist(), strict=True))
    assert [drops[f"d{i:05d}"] for i in range(7)] == [
        "url:duplicate",
        None,
        "url:duplicate",
        "url:blocked_domain",
        "url:blocked_substring",
        "url:invalid",
        None,
    ]
    blog = Counter(drops[f"d{i:05d}"] for i in range(7, 15))
    assert blog == {None: 5, "url:domain_cap": 3}
    assert summary["dropped"] == {
        "url:blocked_domain": 1,
        "url:blocked_substring": 1,
        "url:domain_cap": 3,
        "url:duplicate": 2,
        "url:invalid": 1,
    }
    assert not [c for c in out.column_names if c.startswith("_url")]
    meta = json.loads(out.column("meta")[1].as_py())
    assert meta["url_normalized"] == "https://news.example.cn/a.html"


def test_same_decisions_for_any_task_size_and_partitions(tmp_path, monkeypatch):
    config = {"max_per_domain": 3, "blocked_domains": ("casino-example.com",)}
    results = []
    for batch, partition_rows in ((100, 1 << 23), (1, 2), (3, 4), (100, 1)):
        monkeypatch.setattr(planner, "PARTITION_ROWS", partition_rows)
        summary, out = run(tmp_path, batch, **config)
        assert (summary.pop("partitions") > 1) == (partition_rows < 8)
        results.append(
            (
                summary,
                sorted(
                    zip(out.column("id").to_pylist(), out.column("drop").to_pylist(), strict=True)
                ),
            )
        )
    assert all(result == results[0] for result in results)


def test_a_small_memory_budget_splits_the_spill_not_the_decisions(tmp_path):
    config = {"max_per_domain": 3, "blocked_domains": ("casino-example.com",)}
    base_summary, base = run(tmp_path, 100, **config)
    entry = planner._ROW.itemsize
    summary, out = run(tmp_path, 100, memory_bytes=4 * entry * 2, **config)  # 2 rows a part
    assert base_summary.pop("partitions") == 1 and summary.pop("partitions") > 1
    assert summary == base_summary
    assert out.select(["id", "drop"]).equals(base.select(["id", "drop"]))


def test_a_tiny_budget_opens_at_most_2_to_the_9_partition_files(tmp_path):
    from dataforge.ops.barrier import MAX_PARTITION_BITS, BarrierContext, partition_bits

    ctx = BarrierContext({}, tmp_path, tmp_path, 1, 0, {}, {}, memory_bytes=1, spill_dir=tmp_path)
    assert partition_bits(ctx, 10**12, 48, 1 << 23) == MAX_PARTITION_BITS == 9
    assert partition_bits(ctx, 0, 48, 1 << 23) == 0
    unbounded = BarrierContext({}, tmp_path, tmp_path, 1, 0, {}, {})
    assert partition_bits(unbounded, 3 << 23, 48, 1 << 23) == 2  # 3 parts' worth -> 4 files


def test_seam_op_found_by_name_plans_with_the_planner_beside_it(monkeypatch):
    op = op_class("url_filter")(UrlFilter.Config())
    monkeypatch.setattr(planner, "plan", lambda o, ctx: (o, ctx))
    assert op.plan("ctx") == (op, "ctx")


def test_bad_config():
    with pytest.raises(ValueError, match="url_filter.max_per_domain=0"):
        UrlFilter.Config(max_per_domain=0)
    with pytest.raises(ValueError, match="is not a host name"):
        UrlFilter.Config(blocked_domains=("example.com/path",))
