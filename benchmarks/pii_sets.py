"""A labeled personal-data set in Chinese and English, with hard negatives.

Every example is a short passage written from sentence templates (a contact line in a
news article, a shop's order confirmation, a forum signature, a server log line...) with
values drawn at random in the formats people write them:

- ``email``: ``name.surname@company.com.cn``, ``user+tag@mail.example.org``, next to
  Chinese punctuation or in parentheses;
- ``phone_cn``: mobiles bare, spaced 3-4-4, dashed, with ``+86`` / ``0086``; landlines
  ``010-62751234``, ``(0755) 8888 6666``, ``（021）50812345``, ``+86 10 6275 1234``;
  ``400-820-8820``;
- ``phone_intl``: ``+44 20 7946 0958``, ``+1 (415) 555-2671``, ``+49 30 901820``,
  ``(212) 555-0147``, ``617-555-0123``;
- ``id_cn``: 18-character resident ids with a valid GB 11643 check character (region codes
  of real districts, birth dates 1950-2005, ``X`` check characters included);
- ``bank_card``: Luhn-valid UnionPay (62, 16 and 19 digits), Visa, Mastercard and Amex
  numbers, bare or grouped by 4 with spaces or dashes;
- ``ipv4`` / ``ipv6``: addresses in log lines and support messages (full, ``::``-compressed,
  IPv4-mapped).

Hard negatives (never labeled): 18-digit id-shaped numbers whose check character is
wrong, 16/19-digit numbers that fail Luhn (order and waybill numbers), version strings
(``v2.10.3``, ``1.2.3.4.5``), times (``12:30:45``), dates, prices, ISBNs, QQ numbers,
``256.1.1.300``-style non-addresses, ``@handles``, ``name at example dot com``, decimal
fractions (``3.09078914170``) and reStructuredText's ``::`` (false positives once seen in
the demo corpus).

:func:`build_set` returns ``[(text, [(kind, start, end), ...])]``; the same seed gives the
same set.
"""

from __future__ import annotations

import random
import string

__all__ = ["KINDS", "NEGATIVE_KINDS", "build_set", "invalid_card", "invalid_id", "valid_id"]

KINDS = ("email", "phone_cn", "phone_intl", "id_cn", "bank_card", "ipv4", "ipv6")
NEGATIVE_KINDS = ("bad_id", "bad_card", "version", "time", "misc")

_REGIONS = (
    "110101",
    "110108",
    "310104",
    "310115",
    "440305",
    "440106",
    "510107",
    "330106",
    "420111",
    "320102",
    "610113",
    "120104",
    "500103",
    "370202",
    "350203",
    "210102",
)
_ID_WEIGHTS = (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2)
_ID_CHECK = "10X98765432"
_SURNAMES = ("zhang", "wang", "li", "liu", "chen", "yang", "huang", "zhao", "smith", "jones")
_GIVEN = ("wei", "fang", "na", "min", "jing", "lei", "qiang", "john", "emma", "olivia")
_DOMAINS = (
    "163.com",
    "qq.com",
    "sina.com.cn",
    "pku.edu.cn",
    "example.org",
    "gmail.com",
    "company.com.cn",
    "mail.tsinghua.edu.cn",
    "outlook.com",
    "startup.io",
)


def _id_body(rng: random.Random) -> str:
    year = rng.randint(1950, 2005)
    month, day = rng.randint(1, 12), rng.randint(1, 28)
    return f"{rng.choice(_REGIONS)}{year}{month:02d}{day:02d}{rng.randint(0, 999):03d}"


def _check_char(body: str) -> str:
    return _ID_CHECK[sum(int(d) * w for d, w in zip(body, _ID_WEIGHTS, strict=True)) % 11]


def valid_id(rng: random.Random) -> str:
    """A resident id with the right check character."""
    body = _id_body(rng)
    return body + _check_char(body)


def invalid_id(rng: random.Random) -> str:
    """An id-shaped 18-character number whose check character is wrong."""
    body = _id_body(rng)
    good = _check_char(body)
    return body + rng.choice([c for c in "0123456789X" if c != good])


def _luhn_digit(payload: str) -> str:
    total = 0
    for i, ch in enumerate(reversed(payload)):
        d = int(ch)
        if i % 2 == 0:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return str((10 - total % 10) % 10)


def _card_payload(rng: random.Random) -> str:
    prefix, length = rng.choice(
        [
            ("622202", 16),
            ("621700", 19),
            ("622848", 19),
            ("4", 16),
            ("51", 16),
            ("55", 16),
            ("37", 15),
            ("6225", 16),
            ("2223", 16),
        ]
    )
    return prefix + "".join(rng.choice(string.digits) for _ in range(length - len(prefix) - 1))


def _grouped(digits: str, rng: random.Random) -> str:
    style = rng.choice(["", " ", "-"])
    if not style or len(digits) == 15:
        return digits
    return style.join(digits[i : i + 4] for i in range(0, len(digits), 4))


def valid_card(rng: random.Random) -> str:
    payload = _card_payload(rng)
    return _grouped(payload + _luhn_digit(payload), rng)


def invalid_card(rng: random.Random) -> str:
    """A card-shaped number that fails Luhn (a wrong last digit)."""
    payload = _card_payload(rng)
    good = _luhn_digit(payload)
    return _grouped(payload + rng.choice([d for d in string.digits if d != good]), rng)


def _email(rng: random.Random) -> str:
    local = rng.choice(
        [
            f"{rng.choice(_GIVEN)}.{rng.choice(_SURNAMES)}",
            f"{rng.choice(_SURNAMES)}{rng.randint(1, 9999)}",
            f"{rng.choice(_GIVEN)}_{rng.choice(_SURNAMES)}+news",
            f"service-{rng.randint(10, 99)}",
            f"{rng.choice(_GIVEN).title()}.{rng.choice(_SURNAMES).title()}",
        ]
    )
    domain = rng.choice(_DOMAINS)
    return f"{local}@{domain.upper() if rng.random() < 0.1 else domain}"


def _digits(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(string.digits) for _ in range(n))


def _phone_cn(rng: random.Random) -> str:
    style = rng.randrange(8)
    mobile = f"1{rng.choice('3456789')}{rng.randint(0, 9)}"
    a, b = _digits(rng, 4), _digits(rng, 4)
    if style == 0:
        return f"{mobile}{a}{b}"
    if style == 1:
        return f"{mobile} {a} {b}"
    if style == 2:
        return f"{mobile}-{a}-{b}"
    if style == 3:
        return f"+86 {mobile}{a}{b}"
    if style == 4:
        return f"0086-{mobile}{a}{b}"
    area = rng.choice(["010", "021", "0755", "020", "0571", "028"])
    local = f"{rng.randint(2, 8)}{_digits(rng, 7 if len(area) == 3 else rng.choice([6, 7]))}"
    if style == 5:
        return f"{area}-{local}"
    if style == 6:
        return rng.choice(
            [
                f"({area}) {local[:-4]} {local[-4:]}",
                f"（{area}）{local}",
                f"+86 {area[1:]} {local[:-4]} {local[-4:]}",
                f"+86-{area[1:]}-{local}",
            ]
        )
    return f"{rng.choice(['400', '800'])}-{_digits(rng, 3)}-{_digits(rng, 4)}"


def _nanp_area(rng: random.Random) -> int:
    """A North-American area code; 400 and 800 are left out: ``800-xxx-xxxx`` is also
    China's service-number format, which the detector reads as ``phone_cn``."""
    return rng.choice([a for a in range(201, 990) if a not in (400, 800)])


def _phone_intl(rng: random.Random) -> str:
    return rng.choice(
        [
            f"+44 20 {_digits(rng, 4)} {_digits(rng, 4)}",
            f"+1 (415) 555-{_digits(rng, 4)}",
            f"+1-{_nanp_area(rng)}-{rng.randint(200, 989)}-{_digits(rng, 4)}",
            f"+49 30 {_digits(rng, 6)}",
            f"+81 3-{_digits(rng, 4)}-{_digits(rng, 4)}",
            f"+33 1 {_digits(rng, 2)} {_digits(rng, 2)} {_digits(rng, 2)} {_digits(rng, 2)}",
            f"+852 {_digits(rng, 4)} {_digits(rng, 4)}",
            f"({_nanp_area(rng)}) {rng.randint(200, 989)}-{_digits(rng, 4)}",
            f"{_nanp_area(rng)}-{rng.randint(200, 989)}-{_digits(rng, 4)}",
        ]
    )


def _ipv4(rng: random.Random) -> str:
    first = rng.choice([10, 172, 192, 8, 114, 203, 61, 223])
    return f"{first}.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}"


def _ipv6(rng: random.Random) -> str:
    groups = [f"{rng.randint(0, 0xFFFF):x}" for _ in range(8)]
    return rng.choice(
        [
            ":".join(groups),
            f"2001:db8::{groups[0]}",
            f"fe80::{groups[1]}:{groups[2]}:{groups[3]}",
            f"2408:{groups[4]}:{groups[5]}::{groups[6]}",
            f"::ffff:{_ipv4(rng)}",
        ]
    )


GENERATORS = {
    "email": _email,
    "phone_cn": _phone_cn,
    "phone_intl": _phone_intl,
    "id_cn": valid_id,
    "bank_card": valid_card,
    "ipv4": _ipv4,
    "ipv6": _ipv6,
}

_TEMPLATES = {
    "zh": {
        "email": [
            "如有疑问请发送邮件至{v}，我们将在三个工作日内回复。",
            "投稿邮箱：{v}（请注明栏目）",
            "联系人王先生，邮箱{v}。",
        ],
        "phone_cn": [
            "报名热线：{v}，欢迎来电咨询。",
            "请拨打客服电话{v}转人工服务。",
            "联系电话（{v}）工作日九点至五点。",
            "张女士的手机号是{v}，晚上联系。",
        ],
        "phone_intl": ["伦敦办事处电话：{v}。", "海外用户请拨打{v}联系我们。"],
        "id_cn": [
            "身份证号：{v}，请核对后签字。",
            "乘车人李明（身份证{v}）已完成实名认证。",
            "申请人证件号码{v}。",
            "身份证号码:{v}；",
        ],
        "bank_card": [
            "请将款项汇入工商银行账号{v}，户名为张伟。",
            "退款已原路退回尾号卡{v}。",
            "信用卡号：{v}，有效期至2027年。",
        ],
        "ipv4": [
            "服务器地址为{v}，端口8080。",
            "检测到来自{v}的异常登录。",
            "管理后台：http://{v}/admin",
        ],
        "ipv6": ["本机IPv6地址：{v}，请确认网络配置。", "来自{v}的请求已被拦截。"],
    },
    "en": {
        "email": [
            "Send your questions to {v} and we will reply within three days.",
            "Contact: Jane Doe <{v}>",
            "Email: {v}.",
            "Reviews may be submitted by e-mail ({v}).",
        ],
        "phone_cn": [
            "Our Beijing office can be reached at {v} during business hours.",
            "Call {v} for the hotline.",
        ],
        "phone_intl": [
            "For bookings call {v} or visit the front desk.",
            "Phone: {v}; fax on request.",
            "You can reach the help desk at {v}.",
        ],
        "id_cn": ["The applicant's resident ID number is {v}."],
        "bank_card": [
            "Card number {v} was charged twice.",
            "Pay with the card ending {v}, please.",
        ],
        "ipv4": [
            "Failed password for root from {v} port 22 ssh2",
            "The gateway is at {v}.",
            "Proxy set to {v}:3128 for all clients.",
        ],
        "ipv6": ["Listening on [{v}]:443", "Client {v} sent a malformed request."],
    },
}

_NEGATIVES = {
    "zh": [
        "订单号{bad_card}已发货，请耐心等待。",
        "快递单号：{bad_card}",
        "编号{bad_id}的档案已归档。",
        "流水号{bad_id}交易成功。",
        "请升级到版本{version}以获得最新功能。",
        "会议于{time}准时开始。",
        "本书ISBN为978-7-111-54742-6，定价￥89.00元。",
        "QQ群：{qq}，欢迎加入讨论。",
        "2023年11月05日，气温12.5度，湿度65%。",
        "感谢@小王同学的分享。",
        "该地址256.12.1.300无效。",
        "回归直线的斜率为3.09078914170，截距为0.5。",
    ],
    "en": [
        "Order {bad_card} has shipped.",
        "Tracking number {bad_card} is in transit.",
        "Reference {bad_id} was archived.",
        "Upgrade to {version} for the fix.",
        "The meeting starts at {time} sharp.",
        "ISBN 978-0-13-468599-1, price $1,299.00.",
        "Thanks to @jdoe for the report.",
        "Write to jane at example dot com.",
        "Install it with pip::",
        "LinearRegression(slope=3.09078914170..., intercept=1.5)",
        "Population grew 1.25% to 21,540,000 in 2023.",
        "Build 20231105.1 passed all tests.",
    ],
}


def _negative_values(rng: random.Random) -> dict[str, str]:
    return {
        "bad_card": invalid_card(rng).replace(" ", "").replace("-", ""),
        "bad_id": invalid_id(rng),
        "version": rng.choice(["v2.10.3", "1.2.3.4.5", "3.11.4", "10.0.19045.3570"]),
        "time": f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}",
        "qq": str(rng.randint(10_000_000, 999_999_999)),
    }


def build_set(per_kind: int = 200, seed: int = 0) -> list[tuple[str, list[tuple[str, int, int]]]]:
    """``per_kind`` passages per kind (half zh, half en), each one labeled value plus one
    or two hard-negative sentences; then ``per_kind`` passages of negatives only."""
    rng = random.Random(seed)
    examples = []
    for kind in KINDS:
        for i in range(per_kind):
            lang = "zh" if i % 2 == 0 else "en"
            value = GENERATORS[kind](rng)
            sentence = rng.choice(_TEMPLATES[lang][kind])
            before, after = sentence.split("{v}")
            negatives = [
                rng.choice(_NEGATIVES[lang]).format(**_negative_values(rng))
                for _ in range(rng.randint(1, 2))
            ]
            lead = negatives[0] + ("" if lang == "zh" else " ") + before
            text = lead + value + after
            if len(negatives) > 1:
                text += ("" if lang == "zh" else " ") + negatives[1]
            examples.append((text, [(kind, len(lead), len(lead) + len(value))]))
    for i in range(per_kind):
        lang = "zh" if i % 2 == 0 else "en"
        sep = "" if lang == "zh" else " "
        text = sep.join(
            rng.choice(_NEGATIVES[lang]).format(**_negative_values(rng)) for _ in range(3)
        )
        examples.append((text, []))
    return examples
