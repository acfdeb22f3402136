"""Template families of short-line Chinese reference text: hard negatives for dedup.

A *family* is one site's template: command manual pages, software help pages, product spec
sheets, or the threads of one forum board. Its pages share section headers, navigation,
footers and phrasing with a slot for the page's subject ("要删除的{object}的名称。"), and a
family-wide vocabulary (menu names, users, brands); each page also has content of its own:
clauses of real Chinese text (demo corpus: People's Daily news and product reviews),
identifiers and values, and, for the Python reference family, real signatures and first
docstring lines of standard-library functions. Lines are short, as in real manuals.

Every page is a distinct document (its own true cluster); some get 1-3 near-duplicates of
the kinds of ``benchmarks/dedup_sets.py`` (exact, whitespace and punctuation, 3/10/20%
edits, shuffles (of lines here: these pages have few sentences), boilerplate prefix or
suffix, truncation to 80%).

Families ``*/0`` are for choosing settings; ``*/1`` are held out (other templates, other
vocabulary, clauses from the other half of the corpus).

    .venv/bin/python benchmarks/dedup_template_sets.py   # prints sibling similarity figures
"""

from __future__ import annotations

import inspect
import random
import re
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from dedup_sets import KINDS, _jsonl, make_variant  # noqa: E402
from dedup_template_phrasing import PY_MODULES, SQL_OBJECTS, SQL_VERBS, STOCK  # noqa: E402

__all__ = ["FAMILIES", "HELD_OUT", "TUNING", "build_family", "build_families", "load_clauses"]


def _python_functions(rng: random.Random, count: int) -> list[tuple[str, str, str, list]]:
    """``(qualified name, signature, first docstring line, parameter names)`` of public
    standard-library functions with a signature and a docstring."""
    import importlib

    out = []
    for mod_name in PY_MODULES:
        module = importlib.import_module(mod_name)
        for name, obj in sorted(vars(module).items()):
            if name.startswith("_") or not callable(obj) or inspect.isclass(obj):
                continue
            doc = (inspect.getdoc(obj) or "").strip().splitlines()
            try:
                sig = inspect.signature(obj)
            except (TypeError, ValueError):
                continue
            if doc and 20 <= len(doc[0]) <= 120:
                params = [p for p in sig.parameters if p not in ("self", "args", "kwargs")]
                out.append((f"{mod_name}.{name}", str(sig), doc[0], params))
    unique = list({q: (q, s, d, p) for q, s, d, p in out}.values())
    rng.shuffle(unique)
    return unique[:count]


def load_clauses(demo: Path, half: int) -> list[str]:
    """Distinct clauses (6-28 characters) of the demo corpus's Chinese news and reviews,
    one half of them (``half`` 0 or 1: alternate documents), shuffled deterministically."""
    texts = []
    for pattern in ("news_zh/*.jsonl*", "reviews_zh/*.jsonl*"):
        for path in sorted(demo.glob(pattern)):
            texts += [r["text"] for r in _jsonl(path)]
    clauses, seen = [], set()
    for text in texts[half::2]:
        for clause in re.split(r"[，。！？；：、\n（）“”]+", text):
            clause = clause.strip()
            if (
                6 <= len(clause) <= 28
                and clause not in seen
                and re.search(r"[\u4e00-\u9fff]{4}", clause)
            ):
                seen.add(clause)
                clauses.append(clause)
    random.Random(half).shuffle(clauses)
    return clauses


class _Page:
    """Draws a page's own material: clauses (each used once in the whole family set)."""

    def __init__(self, rng: random.Random, clauses: list[str]) -> None:
        self.rng = rng
        self._clauses = clauses

    def clause(self) -> str:
        return self._clauses.pop()

    def sentence(self, lo: int = 1, hi: int = 3) -> str:
        return "，".join(self.clause() for _ in range(self.rng.randint(lo, hi))) + "。"

    def ident(self) -> str:
        return self.rng.choice(["tab", "idx", "seq", "emp", "orders", "films", "cust"]) + str(
            self.rng.randint(1, 999)
        )


def _stock(rng: random.Random, family: str, subject: str, share: float = 0.9) -> list[str]:
    """About ``share`` of the family's stock lines, in the family's order, for ``subject``."""
    return [line.format(s=subject) for line in STOCK[family] if rng.random() < share]


def _sql_manual(rng: random.Random, clauses: list[str], pages: int) -> list[str]:
    subjects = [(v, vz, o, oz) for v, vz in SQL_VERBS for o, oz in SQL_OBJECTS]
    rng.shuffle(subjects)
    options = ["IF EXISTS", "CASCADE", "RESTRICT", "OWNER TO", "RENAME TO", "SET SCHEMA",
               "WITH", "ONLY", "CONCURRENTLY", "IF NOT EXISTS", "USING", "FOR"]  # fmt: skip
    out = []
    for verb, verb_zh, obj, obj_zh in subjects[:pages]:
        p = _Page(rng, clauses)
        cmd = f"{verb} {obj}"
        opts = rng.sample(options, rng.randint(2, 4))
        lines = [cmd, "名称", f"{cmd} -- {verb_zh}一个{obj_zh}", "大纲",
                 f"{cmd} [ {' | '.join(opts)} ] {p.ident()} [, ...]", "描述",
                 f"{cmd} {verb_zh}一个{obj_zh}。" + p.sentence(1, 1),
                 f"要使用 {cmd}，你必须是该{obj_zh}的拥有者。", *_stock(rng, "manual/0", obj_zh),
                 "参数"]  # fmt: skip
        for opt in opts:
            lines += [opt, rng.choice([
                f"如果该{obj_zh}不存在则不要抛出一个错误，而是发出一个提示。",
                f"自动{verb_zh}依赖于该{obj_zh}的对象。",
                f"如果有任何对象依赖于该{obj_zh}，则拒绝执行。这是默认值。",
                p.sentence(1, 1),
            ])]  # fmt: skip
        for _ in range(rng.randint(1, 2)):
            lines += [p.ident(), p.sentence(1, 1)]
        name = p.ident()
        lines += ["例子", f"要{verb_zh}{obj_zh} {name}：", f"{cmd} {name};", "兼容性",
                  rng.choice([f"{cmd} 语句符合 SQL 标准。", f"在 SQL 标准中没有 {cmd} 语句。"]),
                  "参见", ", ".join(f"{v} {obj}" for v, _ in SQL_VERBS[:3]),
                  f"上一页 | 上一级 | 下一页 | {cmd} | 起始页"]  # fmt: skip
        out.append("\n".join(lines))
    return out


def _python_reference(rng: random.Random, clauses: list[str], pages: int) -> list[str]:
    kinds = ["字符串", "列表", "整数", "布尔值", "字典", "迭代器", "元组", "浮点数"]
    out = []
    for qual, sig, doc, params in _python_functions(rng, pages):
        p = _Page(rng, clauses)
        module = qual.rsplit(".", 1)[0]
        lines = [f"{qual} — {module} 模块", "函数签名", f"{qual}{sig}", "功能说明", doc,
                 p.sentence(1, 1), *_stock(rng, "manual/1", qual), "参数说明"]  # fmt: skip
        for param in params[:5]:
            lines.append(f"{param}：" + rng.choice([
                f"可选参数，默认值为 None。{p.clause()}。", "可选参数，默认值为 None。",
                f"必须是一个{rng.choice(kinds)}。",
            ]))  # fmt: skip
        lines += ["返回值", f"返回一个{rng.choice(kinds)}。{p.clause()}。", "异常",
                  "如果参数类型不正确，则引发 TypeError。", "示例", f">>> import {module}",
                  f">>> {qual}({', '.join(params[:2])})", "版本说明",
                  f"在 3.{rng.randint(2, 12)} 版本中添加。",
                  f"Python 3.12 文档 » 标准库参考 » {module} | 上一个主题 | 下一个主题",
                  "本页 | 显示源代码 | 版权所有 2001-2024，Python 软件基金会"]  # fmt: skip
        out.append("\n".join(lines))
    return out


def _help_center(rng: random.Random, clauses: list[str], pages: int) -> list[str]:
    menus = ["设置", "文件", "共享", "同步", "账号", "备份", "回收站", "传输列表", "相册"]
    items = ["自动备份", "隐私设置", "存储空间", "消息通知", "下载目录", "安全中心", "清理缓存"]
    actions = ["恢复", "上传", "分享", "删除", "下载", "加密", "整理", "同步", "导出", "转存",
               "预览", "重命名", "移动", "压缩", "收藏"]  # fmt: skip
    objects = ["照片", "文件夹", "视频", "通讯录", "聊天记录", "文档", "共享链接", "音乐",
               "短信", "表格", "录音", "截图", "压缩包", "日历"]  # fmt: skip
    titles = [f"如何{a}{o}" for a in actions for o in objects]
    rng.shuffle(titles)
    out = []
    for title in titles[:pages]:
        p = _Page(rng, clauses)
        menu, item = rng.choice(menus), rng.choice(items)
        lines = [f"帮助中心 > 云盘 > {menu} > {title}", title, "问题描述", p.sentence(1, 2),
                 "解决方法", f"1. 打开云盘客户端，点击右上角的“{menu}”按钮。",
                 f"2. 在弹出的菜单中选择“{item}”。", f"3. {p.sentence(1, 2)}",
                 "4. 点击“确定”保存设置。", "注意事项", *_stock(rng, "help/0", title[2:]),
                 p.sentence(1, 1), "如仍有问题，请联系在线客服。", "相关问题",
                 *rng.sample(titles, 3), "以上内容是否解决了您的问题？ 已解决 未解决",
                 "意见反馈 | 联系客服 | © 2024 云盘 版权所有"]  # fmt: skip
        out.append("\n".join(lines))
    return out


def _phone_guide(rng: random.Random, clauses: list[str], pages: int) -> list[str]:
    menus = ["显示和亮度", "声音和振动", "电池", "存储", "安全", "隐私", "应用", "系统和更新"]
    features = ["护眼模式", "深色模式", "省电模式", "勿扰模式", "指纹解锁", "人脸识别", "分屏",
                "悬浮窗", "智能充电", "应用分身", "手势导航", "无线投屏", "备忘录", "录音机",
                "闹钟", "计算器", "指南针", "手电筒", "热点共享", "蓝牙", "定位服务", "家人守护",
                "儿童模式", "驾驶模式", "截屏", "录屏"]  # fmt: skip
    verbs = ["开启", "设置", "使用", "关闭", "管理", "调整", "查看", "删除"]
    titles = [f"{v}{f}" for f in features for v in verbs]
    rng.shuffle(titles)
    out = []
    for title in titles[:pages]:
        p = _Page(rng, clauses)
        menu = rng.choice(menus)
        lines = [f"用户指南 / {menu} / {title}", title, f"您可以{title}。{p.sentence(1, 2)}",
                 f"进入 设置 > {menu} > {title[2:]}", "操作方法：",
                 f"• 进入{menu}，开启{title[2:]}开关。", f"• {p.sentence(1, 2)}", f"• {p.sentence(1, 1)}",
                 "提示", *_stock(rng, "help/1", title[2:]),
                 "本指南仅供参考，请以实际产品为准。", "上一篇 | 下一篇 | 返回目录 | 技术支持"]  # fmt: skip
        out.append("\n".join(lines))
    return out


def _appliance_specs(rng: random.Random, clauses: list[str], pages: int) -> list[str]:
    brands = ["美的", "格力", "海尔", "九阳", "苏泊尔", "小熊", "松下"]
    types = ["电饭煲", "电水壶", "豆浆机", "空气炸锅", "电压力锅", "破壁机", "电烤箱"]
    colors = ["白色", "黑色", "银色", "香槟金", "红色"]
    out = []
    for _ in range(pages):
        p = _Page(rng, clauses)
        brand, kind = rng.choice(brands), rng.choice(types)
        model = f"{rng.choice('ABCDEFMPQ')}{rng.choice('ABCDFGHJKLS')}{rng.randint(10, 999)}"
        lines = [f"首页 > 厨房电器 > {kind} > {brand}{kind} {model}", "商品参数",
                 f"商品名称：{brand}{kind} {model}", f"品牌：{brand}", f"型号：{model}",
                 f"颜色：{rng.choice(colors)}", f"功率：{rng.randint(3, 30) * 100}W",
                 "电压：220V/50Hz", f"尺寸：{rng.randint(150, 400)}×{rng.randint(150, 400)}×"
                 f"{rng.randint(150, 400)}mm", f"重量：{rng.randint(10, 90) / 10}kg",
                 f"保修：{rng.randint(1, 3)}年", "商品介绍", p.sentence(1, 2), p.sentence(1, 1),
                 *_stock(rng, "spec/0", kind), "包装清单", f"主机×1，说明书×1，保修卡×1，{p.clause()}",
                 "温馨提示：商品图片仅供参考，请以实物为准。", "加入购物车 | 立即购买 | 客服热线"]  # fmt: skip
        out.append("\n".join(lines))
    return out


def _phone_specs(rng: random.Random, clauses: list[str], pages: int) -> list[str]:
    brands = ["华为", "小米", "荣耀", "OPPO", "vivo", "魅族", "一加"]
    chips = ["骁龙8", "天玑9000", "麒麟9000", "骁龙7", "天玑8100"]
    out = []
    for _ in range(pages):
        p = _Page(rng, clauses)
        name = f"{rng.choice(brands)} {rng.choice(['Note', 'Pro', 'Mate', 'Find', 'X'])}"
        name += f"{rng.randint(2, 60)}"
        lines = [f"{name} 参数配置", "基本参数", f"上市时间：20{rng.randint(15, 24)}年"
                 f"{rng.randint(1, 12)}月", "屏幕参数", f"屏幕尺寸：{rng.randint(55, 69) / 10}英寸",
                 f"分辨率：{rng.choice(['2400×1080', '2772×1240', '3200×1440'])}",
                 f"处理器：{rng.choice(chips)}", f"运行内存：{rng.choice([6, 8, 12, 16])}GB",
                 f"存储容量：{rng.choice([128, 256, 512])}GB", f"电池容量：{rng.randint(40, 60)}00mAh",
                 f"后置摄像头：{rng.choice([48, 50, 64, 108])}00万像素", "产品特色",
                 p.sentence(1, 2), p.sentence(1, 2), *_stock(rng, "spec/1", name), "售后服务",
                 "全国联保，享受三包服务。", "以上参数仅供参考，请以实物为准。"]  # fmt: skip
        out.append("\n".join(lines))
    return out


def _forum_board(rng: random.Random, clauses: list[str], pages: int) -> list[str]:
    users = [f"{a}{b}" for a in ("小", "老", "阿", "大") for b in "明红刚强丽华军平静"]
    out = []
    for _ in range(pages):
        p = _Page(rng, clauses)
        title, subject = p.clause(), rng.choice(["电饭煲", "电水壶", "微波炉", "油烟机"])
        lines = [f"家电论坛 » 厨房电器交流区 » {title}", f"查看: {rng.randint(10, 9999)}|回复: "
                 f"{rng.randint(1, 99)}", f"楼主 {rng.choice(users)} 发表于 2012-{rng.randint(1, 12)}-"
                 f"{rng.randint(1, 28)}", title, p.sentence(1, 2), *_stock(rng, "forum/0", subject, 0.4),
                 "回复 引用 支持 反对 举报"]  # fmt: skip
        for floor in range(2, 2 + rng.randint(2, 5)):
            lines += [f"{floor}楼 {rng.choice(users)} 发表于 2012-{rng.randint(1, 12)}-"
                      f"{rng.randint(1, 28)}", rng.choice(STOCK["forum/0"]).format(s=subject),
                      "回复 引用 支持 反对 举报"]  # fmt: skip
        lines += ["厨房电器交流区版规：请文明发言，禁止发布广告。", "返回列表 | 发新帖"]
        out.append("\n".join(lines))
    return out


def _qa_board(rng: random.Random, clauses: list[str], pages: int) -> list[str]:
    users = [f"{a}{b}{c}" for a in ("用户", "网友") for b in "甲乙丙丁" for c in "123"]
    out = []
    for _ in range(pages):
        p = _Page(rng, clauses)
        title = p.clause() + "？"
        lines = [f"首页 > 问答 > 数码 > {title}", f"提问：{title}",
                 f"{rng.choice(users)} 提问于 20{rng.randint(10, 14)}年{rng.randint(1, 12)}月",
                 p.sentence(1, 1), "最佳答案", f"{rng.choice(users)} 回答：", p.sentence(1, 2),
                 *_stock(rng, "forum/1", rng.choice(["手机", "平板", "耳机"]), 0.5),
                 "有用 没用 评论", f"其他回答（{rng.randint(1, 9)}）"]  # fmt: skip
        for _ in range(rng.randint(1, 3)):
            answer = rng.choice(STOCK["forum/1"]).format(s=rng.choice(["手机", "平板", "耳机"]))
            lines += [f"{rng.choice(users)} 回答：", answer, "有用 没用 评论"]
        lines += ["相关问题", "我来回答 | 举报 | 分享到："]
        out.append("\n".join(lines))
    return out


Builder = Callable[[random.Random, list[str], int], list[str]]
FAMILIES: dict[str, Builder] = {
    "manual/0": _sql_manual,
    "help/0": _help_center,
    "spec/0": _appliance_specs,
    "forum/0": _forum_board,
    "manual/1": _python_reference,
    "help/1": _phone_guide,
    "spec/1": _phone_specs,
    "forum/1": _qa_board,
}
TUNING = tuple(f for f in FAMILIES if f.endswith("/0"))
HELD_OUT = tuple(f for f in FAMILIES if f.endswith("/1"))


def _variant(text: str, kind: str, rng: random.Random) -> str | None:
    if kind != "shuffle":
        return make_variant(text, "zh", kind, rng)
    lines = text.split("\n")
    for _ in range(2):  # two swaps of lines (these pages have few sentences)
        i, j = rng.sample(range(len(lines)), 2)
        lines[i], lines[j] = lines[j], lines[i]
    return "\n".join(lines)


def build_family(family: str, clauses: list[str], pages: int, seed: int) -> list[dict]:
    """Records ``{id, text, lang, group, kind}``: ``pages`` pages of the family (kind
    ``base``) and their 0-3 near-duplicates. Takes the clauses it uses off ``clauses``."""
    rng = random.Random(f"{family}/{seed}")
    records = []
    for i, text in enumerate(FAMILIES[family](rng, clauses, pages)):
        doc_id = f"{family}#{i:04d}"
        records.append({"id": doc_id, "text": text, "lang": "zh", "group": doc_id, "kind": "base"})
        count = 0 if rng.random() < 0.4 else rng.choice((1, 1, 1, 2, 2, 3))
        for v in range(count):
            kind = rng.choice(KINDS)
            variant = _variant(text, kind, rng)
            if variant is not None:
                records.append({"id": f"~{doc_id}~{v}~{kind}", "text": variant, "lang": "zh",
                                "group": doc_id, "kind": kind})  # fmt: skip
    return records


def build_families(demo: Path, families, pages: int, seed: int) -> dict[str, list[dict]]:
    """``{family: records}``; tuning families draw clauses from one half of the corpus,
    held-out ones from the other."""
    pools = {half: load_clauses(demo, half) for half in (0, 1)}
    return {f: build_family(f, pools[int(f.endswith("/1"))], pages, seed) for f in families}


def _sibling_figures(records: list[dict]) -> str:
    """Median char-2-gram and char-5-gram Jaccard between distinct pages (of the
    normalized text: no punctuation or whitespace)."""
    import statistics

    def grams(text: str, n: int) -> set[str]:
        text = re.sub(r"[\W_]+", "", text.lower())
        return {text[i : i + n] for i in range(len(text) - n + 1)}

    pages = [r["text"] for r in records if r["kind"] == "base"][:40]
    out = []
    for n in (2, 5):
        sets = [grams(t, n) for t in pages]
        js = [len(a & b) / len(a | b) for i, a in enumerate(sets) for b in sets[i + 1 :]]
        q = statistics.quantiles(js, n=10)
        out.append(
            f"char-{n} J median {statistics.median(js):.2f} (p10 {q[0]:.2f}, p90 {q[-1]:.2f})"
        )
    return "; ".join(out)


if __name__ == "__main__":
    sets = build_families(ROOT / "data" / "demo", FAMILIES, 80, 11)
    for name, recs in sets.items():
        pages = sum(r["kind"] == "base" for r in recs)
        chars = sum(len(r["text"]) for r in recs if r["kind"] == "base") / pages
        print(f"{name:<10} {len(recs)} docs, {pages} pages, {chars:.0f} chars/page; "
              f"{_sibling_figures(recs)}")  # fmt: skip
    print(sets["manual/0"][0]["text"])
