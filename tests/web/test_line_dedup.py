"""line_dedup: a footer in 1,000 pages goes, a line in fewer than min_docs documents
stays, Chinese lines compare without spaces, and the output is the same for any task
size and any number of spill partitions."""

from __future__ import annotations

import pytest
from webkit import records, run_barrier

from dataforge.ops.base import op_class
from dataforge.ops.line_dedup import LineDedup, normalize_line, planner

FOOTER = "版权所有 © 2024 某某商城 京ICP备12345678号 客服热线 400-820-8820"
NAV = "首页 | 手机数码 | 家用电器 | 图书音像 | 我的订单"
RARE = "编辑推荐：本周热销商品榜单已更新，欢迎选购。"


@pytest.fixture(scope="module")
def shop_pages(demo_reader) -> list[str]:
    """1,000 product reviews (real text) as pages with a shared nav and footer; the
    first 9 pages also carry one promotional line."""
    reviews = [r for r in demo_reader("reviews_zh", 3000) if len(r) >= 30][:1000]
    assert len(reviews) == 1000
    pages = []
    for i, review in enumerate(reviews):
        # the footer varies in spacing and width, as templates and extractors leave it
        footer = FOOTER if i % 3 else FOOTER.replace(" ", "").replace("：", ":")
        lines = [NAV, review] + ([RARE] if i < 9 else []) + [footer]
        pages.append("\n".join(lines))
    return pages


def run(tmp_path, texts, batch, memory_bytes=None, **config):
    op = LineDedup(LineDedup.Config(**config))
    return run_barrier(tmp_path, op, records(texts), batch, memory_bytes)


def test_footer_and_nav_removed_rare_line_kept(tmp_path, shop_pages):
    summary, out = run(tmp_path, shop_pages, 250, min_docs=10, min_doc_chars=10)
    rows = out.to_pylist()
    assert sum(r["drop"] is None for r in rows) > 900
    for page, row in zip(shop_pages, rows, strict=True):
        lines = page.split("\n")
        if row["drop"] is None:
            assert row["text"].split("\n") == [line for line in lines[1:-1]]
        else:
            assert row["drop"] == "line_dedup:too_short" and len(lines[1].replace(" ", "")) < 10
    assert [RARE in r["text"] for r in rows[:9]] == [r["drop"] is None for r in rows[:9]]
    assert summary["frequent_lines"] == 2 and summary["documents_changed"] == 1000
    assert not [c for c in out.column_names if c.startswith("_line")]


def test_a_line_in_exactly_min_docs_documents_goes(tmp_path, shop_pages):
    _, out = run(tmp_path, shop_pages, 1000, min_docs=9, min_doc_chars=0)
    assert not any(RARE in t for t in out.column("text").to_pylist())
    _, out = run(tmp_path, shop_pages[:12], 1000, min_docs=10, min_doc_chars=0)
    assert sum(RARE in t for t in out.column("text").to_pylist()) == 9


def test_identical_output_for_any_task_size_and_partitions(tmp_path, shop_pages, monkeypatch):
    texts = shop_pages[:300]
    base_summary, base = run(tmp_path, texts, 300, min_docs=5)
    monkeypatch.setattr(planner, "PARTITION_HASHES", 64)
    for batch in (1, 7, 64):
        summary, out = run(tmp_path, texts, batch, min_docs=5)
        assert (
            out.select(["id", "text", "drop"]).to_pylist()
            == base.select(["id", "text", "drop"]).to_pylist()
        )
        assert {k: v for k, v in summary.items() if k != "partitions"} == {
            k: v for k, v in base_summary.items() if k != "partitions"
        }
        assert summary["partitions"] > 1 and base_summary["partitions"] == 1


def test_a_small_memory_budget_splits_the_count_not_the_output(tmp_path, shop_pages):
    texts = shop_pages[:300]
    base_summary, base = run(tmp_path, texts, 64, min_docs=5)
    # 4,800 bytes: a quarter holds 100 entries of 12 bytes; ~1,200 line hashes -> 16 parts
    summary, out = run(tmp_path, texts, 64, memory_bytes=4800, min_docs=5)
    assert out.select(["id", "text", "drop"]).equals(base.select(["id", "text", "drop"]))
    assert base_summary["partitions"] == 1 and summary.pop("partitions") == 16
    assert summary == {k: v for k, v in base_summary.items() if k != "partitions"}


def test_chinese_lines_compare_without_spaces_and_width():
    assert normalize_line("版权所有 © 2024 某某 ：客服") == normalize_line("版权所有©2025某某:客服")
    assert normalize_line("Ｈｅｌｌｏ， World！") == normalize_line("hello world")
    assert normalize_line("———  ") == ""


def test_documents_left_too_short_are_dropped(tmp_path):
    boiler = ["登录 注册 购物车", "关于我们 联系我们"]
    texts = ["\n".join(boiler + [f"好评{i}"]) for i in range(10)] + ["\n".join(boiler)]
    texts.append("\n".join([*boiler, "这本书印刷清晰，内容详实，值得一读，物流也很快，推荐购买。"]))
    _, out = run(tmp_path, texts, 5, min_docs=10, min_doc_chars=10)
    drops = out.column("drop").to_pylist()
    assert drops == ["line_dedup:too_short"] * 11 + [None]
    assert (
        out.column("text")[11].as_py()
        == "这本书印刷清晰，内容详实，值得一读，物流也很快，推荐购买。"
    )


def test_seam_op_found_by_name_plans_with_the_planner_beside_it(monkeypatch):
    op = op_class("line_dedup")(LineDedup.Config())
    monkeypatch.setattr(planner, "plan", lambda o, ctx: (o, ctx))
    assert op.plan("ctx") == (op, "ctx")
    with pytest.raises(ValueError, match="line_dedup.min_docs=1"):
        LineDedup.Config(min_docs=1)
