"""The extract op's structure pre-pass on small pages: what the markup declares as
navigation goes, the main content and repeated prose stay, link bars repeated in a page go,
inline formatting is unwrapped."""

from __future__ import annotations

import lxml.html

from dataforge.ops.extract_prepass import (
    parse_page,
    repeated_link_blocks,
    simplify_markup,
    strip_navigation,
)


def pruned_text(html: str) -> tuple[list[str], int]:
    root = parse_page(html).root
    removed = strip_navigation(root)
    lines = [" ".join(t.split()) for t in root.find("body").itertext()]
    return [t for t in lines if t], removed


def test_declared_navigation_goes_and_main_is_kept():
    page = (
        "<html><body><div role='banner'>站点标题</div><nav>首页 新闻</nav>"
        "<div class='sidebar'>侧栏</div>"
        "<main><div class='breadcrumb'>首页 &gt; 新闻</div><p>正文第一段。</p>"
        "<aside>相关阅读</aside><p>正文第二段。</p></main>"
        "<footer>版权所有</footer><script>var x = 1;</script></body></html>"
    )
    text, removed = pruned_text(page)
    assert text == ["正文第一段。", "正文第二段。"]
    assert removed == 6  # banner, nav, sidebar, footer (outside main), breadcrumb, aside


def test_without_main_only_declared_navigation_goes():
    page = (
        "<html><body><div class='navheader'><a href='/'>上一页</a></div>"
        "<div id='header'>手册</div><div class='chapter'><p>正文。</p>"
        "<div class='sidebar'><p>补充说明。</p></div></div>"
        "<ul class='docnav'><li><a href='/n'>下一页</a></li></ul></body></html>"
    )
    assert pruned_text(page)[0] == ["正文。", "补充说明。"]


def test_an_element_holding_the_main_content_is_kept():
    page = "<html><body><header><main><p>正文。</p></main></header><nav>菜单</nav></body></html>"
    assert pruned_text(page)[0] == ["正文。"]


def bar(prev: str) -> str:
    return f"<p><a href='/p'>‹ {prev}</a> | <a href='/'>首页</a> | <a href='/i'>索引</a></p>"


def test_link_bars_repeated_in_a_page_go_prose_and_single_lists_stay():
    quote = "<blockquote><p>引用的一段话，<a href='/a'>出处</a>。</p></blockquote>"
    links = "<ul><li><a href='/x'>延伸阅读一</a></li><li><a href='/y'>延伸阅读二</a></li></ul>"
    page = (
        f"<html><body>{bar('第一章')}<p>正文。</p>{quote}{links}{quote}"
        f"{bar('第一章')}{bar('第三章')}</body></html>"
    )
    root = parse_page(page).root
    found = repeated_link_blocks(root)
    html = [lxml.html.tostring(el, encoding="unicode", with_tail=False) for el in found]
    assert html == [bar("第一章").replace("'", '"')] * 2
    text, _ = pruned_text(page)
    assert "正文。" in text and "延伸阅读一" in text and text.count("引用的一段话，") == 2
    assert text.count("‹ 第一章") == 0 and text.count("‹ 第三章") == 1


def test_markup_is_simplified():
    page = (
        "<html><body><div class='para' id='x'>先说明 <code><em><code>pkg</code></em>.cron"
        "</code> 的用法。<div class='url'><a href='/u'>链接</a></div></div>"
        "<div><div><h2><a id='s1'></a>标题</h2></div></div></body></html>"
    )
    root = parse_page(page).root
    assert simplify_markup(root) == 1
    assert lxml.html.tostring(root.find("body"), encoding="unicode") == (
        "<body><p>先说明 pkg.cron 的用法。<div><a href='/u'>链接</a></div></p>"
        "<div><div><h2>标题</h2></div></div></body>"
    ).replace("'", '"')
