"""A held-out personal-data set: values from the ``Faker`` library inside real paragraphs.

:mod:`pii_sets` draws values and sentences from this project's own templates; this set
checks the detectors against a generator the project did not write. Values come from
Faker's ``zh_CN`` and ``en_US`` providers (``email``, ``phone_number``, ``ssn`` of zh_CN,
``credit_card_number``, ``ipv4``, ``ipv6``), each in a short lead-in sentence ("联系电话：",
"address:", "Call") put at a sentence boundary of a real paragraph: the demo news, reviews
and documentation under ``tests/fixtures/`` (and the demo corpus under ``data/demo/``
when it is there; paragraphs holding an ``@`` are left out, as they may hold real
addresses; the real values left in them, a service number quoted in a review or
``2001::/32`` in the ``ipaddress`` docs, are unlabeled and count as false positives).
Labels are ASCII or full-width colons, with or without a space, as text reads before
and after ``clean``; a lead-in of a phone number names it as one.

Each passage also holds look-alike negatives made from Faker's random digits, never
labeled: section and version numbers (``第 4.2.13.1 节``, ``version 3.10.2.1``, a heading
``4.2.1.3 Title``), order, waybill, serial and barcode numbers (half of them made to pass
Luhn), EAN-13 and ISBN-13 codes, ten-digit customer numbers, dates, times and prices.

Cards are zh_CN's types (UnionPay, Visa, Mastercard) and en_US's but Maestro (12-digit
numbers, which the detector leaves alone: too many 12-digit numbers are not cards) and
15-digit JCB (half of it starts with 1800, a range no longer issued). :func:`build_faker_set` returns ``[(text, [(kind, start, end)])]``;
the same seed gives the same set.
"""

from __future__ import annotations

import datetime
import random
import re
from pathlib import Path

from pii_sets import KINDS

__all__ = ["CARD_TYPES", "build_faker_set", "real_paragraphs"]

ROOT = Path(__file__).resolve().parents[1]
CARD_TYPES = ("visa16", "visa13", "visa19", "mastercard", "amex", "discover", "diners", "jcb16")

# dates drawn between fixed days (Faker's default ends today)
_FIRST_DAY, _LAST_DAY = datetime.datetime(1990, 1, 1), datetime.datetime(2025, 12, 31)
_LEAD_INS = {
    "zh": {
        "email": ["如有疑问请发邮件至{v}。", "投稿邮箱：{v}，", "联系人邮箱:{v}，欢迎来信。"],
        "phone_cn": ["联系电话：{v}。", "请拨打{v}咨询。", "王女士手机:{v}；", "客服热线 {v}。"],
        "phone_intl": ["美国办事处电话：{v}。", "海外客户请致电{v}。", "纽约分部电话 {v}，"],
        "id_cn": ["身份证号：{v}。", "申请人身份证{v}已核验。", "证件号码:{v}；"],
        "bank_card": ["收款卡号：{v}。", "请汇入账户{v}，户名张伟。", "信用卡 {v} 已绑定。"],
        "ipv4": ["服务器地址：{v}。", "登录IP:{v}，", "请将网关设为 {v}。"],
        "ipv6": ["IPv6地址：{v}。", "地址:{v}，", "节点 {v} 已上线。"],
    },
    "en": {
        "email": ["Write to {v} for details.", "Email: {v}", "contact:{v}."],
        "phone_cn": ["Our Beijing office: {v}.", "Call {v} in China."],
        "phone_intl": ["Call {v} today.", "Phone: {v}", "Reach the desk at {v}.", "Tel:{v}"],
        "id_cn": ["Resident ID {v} was verified.", "ID number: {v}"],
        "bank_card": ["Card number: {v}.", "Charge it to {v}, please.", "card:{v}"],
        "ipv4": ["The server is at {v}.", "address:{v}", "Ping {v} first."],
        "ipv6": ["Its address is {v}.", "address:{v}", "IPv6: {v}"],
    },
}

_ORDER_LABELS = {
    "zh": ["订单号：", "运单号 ", "快递单号:", "序列号：", "条码 ", "商品编码：", "流水号 "],
    "en": ["Order no. ", "Tracking number: ", "Serial: ", "SKU ", "order #", "Invoice "],
}


def real_paragraphs(with_demo: bool) -> dict[str, list[str]]:
    """``{"zh": [...], "en": [...]}``: paragraphs of 40+ characters of the fixtures and, with
    ``with_demo``, of ``data/demo`` (when built)."""
    out: dict[str, list[str]] = {"zh": [], "en": []}
    fixtures = ROOT / "tests" / "fixtures"
    for name, lang in (
        ("ops_news_zh.txt", "zh"),
        ("dedup_reviews_zh.txt", "zh"),
        ("ops_docs_en.txt", "en"),
    ):
        out[lang] += re.split(r"\n\s*\n|\n(?=\S)", (fixtures / name).read_text(encoding="utf-8"))
    demo = ROOT / "data" / "demo"
    for lang, folder in (("zh", "news_zh"), ("zh", "reviews_zh"), ("en", "docs_en")):
        if not with_demo or not (demo / folder).is_dir():
            continue
        from dataforge.io.documents import iter_documents

        texts: list[str] = []
        for batch in iter_documents(str(demo / folder / "*"), source=folder):
            texts += batch.column("text").to_pylist()
            if len(texts) >= 300:
                break
        for text in texts[:300]:
            out[lang] += text.split("\n\n")
    # paragraphs with an "@" may hold real addresses (a module author's), unlabeled here
    return {
        lang: [p.strip() for p in paras if len(p.strip()) >= 40 and "@" not in p]
        for lang, paras in out.items()
    }


def _luhn_completed(payload: str) -> str:
    total = 0
    for i, ch in enumerate(reversed(payload)):
        d = int(ch)
        if i % 2 == 0:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return payload + str((10 - total % 10) % 10)


def _value(kind: str, fakes: dict, rng: random.Random) -> str:
    zh, en = fakes["zh"], fakes["en"]
    fake = rng.choice([zh, en])
    if kind == "email":
        return rng.choice([fake.email, fake.free_email, fake.company_email])()
    if kind == "phone_cn":
        return zh.phone_number()
    if kind == "phone_intl":
        return en.phone_number()
    if kind == "id_cn":
        return zh.ssn()
    if kind == "bank_card":
        card_type = rng.choice(CARD_TYPES) if fake is en else None  # zh_CN: UnionPay, Visa, MC
        number = fake.credit_card_number(card_type=card_type)
        if len(number) == 16 and rng.random() < 0.5:
            number = rng.choice([" ", "-"]).join(number[i : i + 4] for i in range(0, 16, 4))
        return number
    if kind == "ipv4":
        return rng.choice([fake.ipv4, fake.ipv4_private, fake.ipv4_public])()
    return fake.ipv6()


def _negative(lang: str, fakes: dict, rng: random.Random) -> str:
    """A sentence of look-alike numbers (never personal data)."""
    fake = fakes[lang]
    when = fake.date_time_between(_FIRST_DAY, _LAST_DAY)
    dotted = ".".join(str(fake.random_int(1, 30)) for _ in range(4))
    version = ".".join(str(fake.random_int(0, 255)) for _ in range(4))
    digits = fake.numerify(rng.choice(["%" + "#" * 14, "%" + "#" * 17]))
    if rng.random() < 0.5:
        digits = _luhn_completed(digits[:-1])
    zh = [
        f"详见第 {dotted} 节。",
        f"当前版本 {version}。",
        f"{_ORDER_LABELS['zh'][rng.randrange(7)]}{digits}。",
        f"条码 {fake.ean13()}，ISBN {fake.isbn13()}。",
        f"客户编号 {fake.numerify('%#########')}。",
        f"{when:%Y年%m月%d日 %H:%M:%S} 售价 {fake.pricetag()}。",
    ]
    en = [
        f"See section {dotted}.",
        f"Upgrade to version {version} or v{version}.",
        f"{_ORDER_LABELS['en'][rng.randrange(6)]}{digits} shipped.",
        f"EAN {fake.ean13()}, ISBN {fake.isbn13()}.",
        f"Customer {fake.numerify('%#########')} since {when:%Y-%m-%d %H:%M:%S}.",
        f"It costs {fake.pricetag()}.",
    ]
    if rng.random() < 0.15:  # a numbered heading on a line of its own
        return f"\n{dotted} {fake.sentence(nb_words=3).rstrip('.')}\n"
    return rng.choice(zh if lang == "zh" else en)


def _boundary(paragraph: str, rng: random.Random) -> int:
    ends = [m.end() for m in re.finditer(r"[。！？；]|[.!?;] ", paragraph)]
    return rng.choice([0, *ends, len(paragraph)])


def _passage(lang, kind, value, paragraphs, fakes, rng) -> tuple[str, list]:
    paragraph = rng.choice(paragraphs[lang])[:400]
    sentence = rng.choice(_LEAD_INS[lang][kind])
    head, tail = sentence.split("{v}")
    if lang == "en":
        head, tail = " " + head, tail + " "
    at = _boundary(paragraph, rng)
    before, after = paragraph[:at] + head, tail + paragraph[at:]
    for _ in range(rng.randint(1, 2)):  # negatives before or after the value
        neg = _negative(lang, fakes, rng)
        space = " " if lang == "en" else ""
        if rng.random() < 0.5:
            before = neg + space + before
        else:
            after = after + space + neg
    start = len(before)
    return before + value + after, [(kind, start, start + len(value))]


def build_faker_set(per_kind: int, seed: int, with_demo: bool = False) -> list:
    """``per_kind`` passages per kind (half zh, half en paragraphs), each holding one
    labeled Faker value and one or two unlabeled look-alike numbers. Faker's resident ids
    take birth dates relative to today; everything else depends on ``seed`` only."""
    from faker import Faker

    fakes = {"zh": Faker("zh_CN"), "en": Faker("en_US")}
    for i, fake in enumerate(fakes.values()):
        fake.seed_instance(seed * 2 + i)
    rng = random.Random(seed)
    paragraphs = real_paragraphs(with_demo)
    out = []
    for kind in KINDS:
        for i in range(per_kind):
            lang = "zh" if i % 2 == 0 else "en"
            out.append(_passage(lang, kind, _value(kind, fakes, rng), paragraphs, fakes, rng))
    return out
