"""Personal-data detectors: candidate patterns plus the validators that decide them.

Each kind is a regular expression for candidates and, where the format has one, a
validator that must accept the candidate before it counts:

==============  ==========================================================================
kind            candidates, then validation
==============  ==========================================================================
``email``       ``local@domain.tld`` (ASCII; a Chinese character may touch either end)
``ipv6``        colon-separated hex groups; ``ipaddress.IPv6Address`` must parse them
``id_cn``       18 characters: region, birth date 1900-2099, sequence, check character;
                the GB 11643 ISO 7064 MOD 11-2 check character must match
``bank_card``   13-19 digits starting 2-6, bare or in groups of 4 split by one space or
                dash; the Luhn check must pass; an 18-digit string shaped like a
                resident id is judged by the id checksum only, never as a card
``phone_cn``    mainland mobile ``1[3-9]x xxxx xxxx`` (optional ``+86``/``0086``), a
                landline with its area code (``010-12345678``, ``(0755) 8888 8888``,
                ``+86 10 6275 1234``) and ``400``/``800`` service numbers
``phone_intl``  ``+<country> ...`` with 8-15 digits (not ``+86``), and North-American
                ``(415) 555-2671`` / ``415.555.2671`` / ``001-415-555-2671`` /
                ``4155552671``, each with an optional ``x123`` extension
                (``400``/``800-xxx-xxxx``, China's service-number format too, is
                ``phone_cn``)
``ipv4``        four dotted numbers not inside a longer dotted run (version strings);
                ``ipaddress.IPv4Address`` must parse them
==============  ==========================================================================

Then the words before and after a candidate decide (:func:`_in_context`): a number
labelled as an order, waybill, serial or barcode (``订单号：``, ``Tracking number:``,
``SKU``, ``ISBN``...) is no id, card or phone even when its checksum passes; four dotted
numbers after ``第``/``section``/``version``/``v``/``版本``, before ``节``/``章``, or a
line's heading number (``4.2.1.3 Title``) are no address; ten bare digits are a phone only
after a word saying so (``phone``, ``电话``...); an IPv6 address may follow a label's colon
(``地址:2001:db8::1``), not a colon inside a longer run.

Spans of different kinds never overlap: they are taken by position, a longer span before
a shorter one starting at the same place, then in the order of the table.
"""

from __future__ import annotations

import ipaddress
import re
import string
from collections.abc import Callable, Sequence
from typing import NamedTuple

__all__ = ["PII_KINDS", "PiiSpan", "find_pii", "id_cn_valid", "luhn_valid"]

PII_KINDS: tuple[str, ...] = (
    "email",
    "ipv6",
    "id_cn",
    "bank_card",
    "phone_cn",
    "phone_intl",
    "ipv4",
)


class PiiSpan(NamedTuple):
    start: int
    end: int
    kind: str


_ID_WEIGHTS = (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2)
_ID_CHECK = "10X98765432"


def id_cn_valid(candidate: str) -> bool:
    """True when the 18th character is the GB 11643 check character of the first 17."""
    body, check = candidate[:17], candidate[17].upper()
    return _ID_CHECK[sum(int(d) * w for d, w in zip(body, _ID_WEIGHTS, strict=True)) % 11] == check


def luhn_valid(digits: str) -> bool:
    """The Luhn (mod 10) check of a card number given as digits only."""
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


# Not inside a longer alphanumeric run, nor the fraction of a decimal number (3.0907...).
_NOT_DIGIT_BEFORE = r"(?<![0-9A-Za-z])(?<![0-9][.,])"
_NOT_DIGIT_AFTER = r"(?![0-9A-Za-z])"
_ID_SHAPE = (
    r"[1-9][0-9]{5}(?:18|19|20)[0-9]{2}(?:0[1-9]|1[0-2])(?:0[1-9]|[12][0-9]|3[01])[0-9]{3}[0-9Xx]"
)
_ID_SHAPED = re.compile(_ID_SHAPE)

_PATTERNS: dict[str, re.Pattern[str]] = {
    "email": re.compile(
        r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9][A-Za-z0-9._%+-]*@"
        r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*"
        r"\.[A-Za-z]{2,24}(?![A-Za-z0-9-])"
    ),
    # A single colon may come before (``地址:2001:db8::1``, a label whose full-width colon
    # ``clean`` folded); :func:`_after_label` tells that from the middle of a colon run.
    "ipv6": re.compile(
        r"(?<![0-9A-Za-z.])(?<!::)(?!:[^:])(?:[0-9A-Fa-f]{0,4}:){2,7}"
        r"(?:(?:[0-9]{1,3}\.){3}[0-9]{1,3}|[0-9A-Fa-f]{1,4})?(?![0-9A-Za-z:]|\.[0-9])"
    ),
    "id_cn": re.compile(_NOT_DIGIT_BEFORE + _ID_SHAPE + _NOT_DIGIT_AFTER),
    "bank_card": re.compile(
        _NOT_DIGIT_BEFORE + r"(?:[2-6][0-9]{12,18}"
        r"|[2-6][0-9]{3}(?P<sep>[ -])[0-9]{4}(?P=sep)[0-9]{4}(?P=sep)[0-9]{1,4}"
        r"(?:(?P=sep)[0-9]{1,3})?)" + _NOT_DIGIT_AFTER
    ),
    "phone_cn": re.compile(
        r"(?<![0-9A-Za-z+])(?<![0-9][ .,-])(?:"
        r"(?:(?:\+|00)86[ -]?)?1[3-9][0-9](?P<s1>[ -]?)[0-9]{4}(?P=s1)[0-9]{4}"
        r"|(?:\+|00)86[ -]?(?:\(0\))?[1-9][0-9]{1,2}(?P<s3>[ -])[2-9][0-9]{2,3}(?P=s3)?[0-9]{4}"
        r"|(?:\(0[1-9][0-9]{1,2}\)|（0[1-9][0-9]{1,2}）|0[1-9][0-9]{1,2}[ -]?)[ ]?"
        r"[2-9][0-9]{2,3}[ -]?[0-9]{4}"
        r"|[48]00(?P<s2>[ -])[0-9]{3}(?P=s2)[0-9]{4}|(?P<bare>[48]00[0-9]{7})"
        r")" + _NOT_DIGIT_AFTER
    ),
    "phone_intl": re.compile(
        r"(?:(?<![0-9A-Za-z+])\+(?!86)[1-9][0-9]{0,2}(?:[ .-]?\(?[0-9]{1,4}\)?){2,5}"
        r"|(?<![0-9A-Za-z(])(?<![0-9][ .,-])(?:001[ .-])?"
        r"(?:\([2-9][0-9]{2}\) ?|[2-9][0-9]{2}[.-])[2-9][0-9]{2}[.-][0-9]{4}"
        r"|(?P<bare>(?<![0-9A-Za-z(])(?<![0-9][ .,-])[2-9][0-9]{2}[2-9][0-9]{6}))"
        r"(?: ?(?:x|ext\.?|extension) ?[0-9]{1,5})?" + _NOT_DIGIT_AFTER
    ),
    "ipv4": re.compile(r"(?<![0-9A-Za-z.])(?:[0-9]{1,3}\.){3}[0-9]{1,3}(?![0-9A-Za-z]|\.[0-9])"),
}

# What every candidate of a kind contains (read off its pattern above): a text without it
# holds no candidate, so the kind's pattern, with its look-behinds tried at every
# position, is not run on it. Most web text has no ``@`` and few long digit runs.
_REQUIRED: dict[str, re.Pattern[str]] = {
    "email": re.compile(r"@"),
    "ipv6": re.compile(r":[0-9A-Fa-f]{0,4}:"),  # its first two groups
    "id_cn": re.compile(r"[0-9]{17}"),
    "bank_card": re.compile(r"[0-9]{4}"),  # the first group of either form
    "phone_cn": re.compile(r"[0-9]{3}"),  # a mobile's 1[3-9]x, an area code's or 400/800's
    "phone_intl": re.compile(r"\+[1-9]|[0-9]{3}"),
    "ipv4": re.compile(r"[0-9]\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]"),
}
_ANY_DIGIT = re.compile(r"[0-9]")
_DIGIT_FREE_KINDS = frozenset({"email", "ipv6"})
"""Kinds whose candidates may hold no ASCII digit."""


def _candidate_kinds(text: str, kinds: Sequence[str]) -> list[str]:
    """The kinds of ``kinds`` (in :data:`PII_KINDS` order) whose :data:`_REQUIRED` piece
    ``text`` holds: the others cannot match it."""
    if not _ANY_DIGIT.search(text):
        kinds = [kind for kind in kinds if kind in _DIGIT_FREE_KINDS]
    return [kind for kind in PII_KINDS if kind in kinds and _REQUIRED[kind].search(text)]


# -- context: what the words around a candidate say it is ------------------------------
_BEFORE = 40
"""Characters before a candidate that its context rules read: a label and its colon."""
_SECTION_BEFORE = re.compile(
    r"(?:第|节|章|条|款|§|表|图|附录|步骤|版本号?|版号|(?<![A-Za-z])(?:v|ver|rel|build|sec|"
    r"chap|ch|tab|fig|para|rev|rfc|(?:version|release|section|chapter|clause|step|table|"
    r"figure|appendix|paragraph|revision|item|part)s?)\.?|==|>=|<=|~=|!=)\s*[:：#]?\s*$",
    re.IGNORECASE,
)
_SECTION_AFTER = re.compile(
    r"\s*(?:小?节|章|版(?!权))|-(?:alpha|beta|rc|dev|pre|snapshot|final|stable)", re.IGNORECASE
)
# a list of dotted numbers (``4.2.1、4.2.2 和 4.2.3 节``, ``sections 3.1.1.1 to 3.1.1.4``)
# is judged by the words at its two ends
_LIST_JOIN = r"\s*(?:[、,，/~–-]|和|及|与|至|到|and|or|to)\s*"
_LIST_LEFT = re.compile(rf"(?:\d+(?:\.\d+)+{_LIST_JOIN})+$", re.IGNORECASE)
_LIST_RIGHT = re.compile(rf"(?:{_LIST_JOIN}\d+(?:\.\d+)+)+", re.IGNORECASE)
_HEADING_BEFORE = re.compile(r"(?:^|\n)[ \t]*(?:#+[ \t]*)?$")
_HEADING_AFTER = re.compile(r"\.?[ \t]+[^\W\d_]")
_REFERENCE_LABEL = re.compile(
    r"(?:订单编号|订单号?|运单编号|运单号?|快递单号|物流单号|单号|序列号|串号|条形码|条码|"
    r"商品编[码号]|货号|编号|流水号|交易单?号|发票号码?|批次?号|合同号|工单号|"
    r"(?<![A-Za-z])(?:order|tracking|serial|s/n|sn|sku|isbn(?:-1[03])?|ean(?:-?1[34]|-?8)?|upc|"
    r"gtin|bar ?code|invoice|ref|reference|transaction|txn|part|model|lot|batch|waybill|awb|"
    r"shipment|confirmation|receipt|booking|item|product)"
    r"(?:[ \t]*(?:no\.?|number|num\.?|nr\.?|id|code|#))?)"
    r"[ \t]*(?:[:：#＃=]|is|为|是)?[ \t]*$",
    re.IGNORECASE,
)
_PHONE_LABEL = re.compile(
    r"(?:(?<![A-Za-z])(?:phone|tel|telephone|call|cell|mobile|fax|contact|reach|text)"
    r"(?:s|ed|ing)?(?![A-Za-z])"
    r"|电话|手机|联系|致电|拨打|热线)(?:[^0-9\n。！？；!?;.]|\.(?! )){0,30}$",
    re.IGNORECASE,
)
_DIGIT_KINDS = ("id_cn", "bank_card", "phone_cn", "phone_intl")


def _looks_like_section(text: str, m: re.Match[str]) -> bool:
    """A dotted number that the words around it call a section, version or list number
    (``第 4.2.13.1 节``, ``version 1.2.3.4``, ``v10.0.0.1``, a heading ``4.2.1.3 Title``)."""
    before, after = text[max(0, m.start() - _BEFORE) : m.start()], text[m.end() : m.end() + _BEFORE]
    left, right = _LIST_LEFT.search(before), _LIST_RIGHT.match(after)
    list_before = before[: left.start()] if left else before
    list_after = after[right.end() :] if right else after
    if _SECTION_BEFORE.search(list_before) or _SECTION_AFTER.match(list_after):
        return True
    parts = [int(p) for p in m.group().split(".")]
    return (
        all(1 <= p <= 99 for p in parts)
        and bool(_HEADING_BEFORE.search(before))
        and bool(_HEADING_AFTER.match(after))
    )


def _in_context(kind: str, text: str, m: re.Match[str]) -> bool:
    """Whether the text around a candidate that passed its validator lets it count."""
    before = text[max(0, m.start() - _BEFORE) : m.start()]
    if kind in _DIGIT_KINDS and _REFERENCE_LABEL.search(before):
        return False  # an order, waybill, serial or barcode number that passes a checksum
    if kind in ("phone_cn", "phone_intl") and m.groupdict().get("bare"):
        return bool(_PHONE_LABEL.search(before))  # ten bare digits are a phone only when said
    if kind == "ipv4":
        return not _looks_like_section(text, m)
    if kind == "ipv6" and before.endswith(":"):
        # after a label's colon, not inside a longer colon run (``ab:2001:db8::1``)
        run = re.search(r"[0-9A-Za-z]*$", before[:-1]).group()
        return not (0 < len(run) <= 4 and all(c in string.hexdigits for c in run))
    return True


def _ipv6_valid(candidate: str) -> bool:
    if candidate.count(":") < 2 or candidate.strip(":") == "":
        return False  # a bare "::" is a reStructuredText literal marker far more often
    try:
        ipaddress.IPv6Address(candidate)
    except ValueError:
        return False
    return True


def _ipv4_valid(candidate: str) -> bool:
    try:
        ipaddress.IPv4Address(candidate)
    except ValueError:
        return False
    return True


def _card_valid(candidate: str) -> bool:
    digits = candidate.replace(" ", "").replace("-", "")
    if not 13 <= len(digits) <= 19:
        return False
    if len(digits) == 18 and _ID_SHAPED.fullmatch(digits):
        return False  # a resident id that failed its own checksum is not a card either
    return luhn_valid(digits)


_EXTENSION = re.compile(r" ?(?:x|ext\.?|extension) ?[0-9]{1,5}$")


def _intl_valid(candidate: str) -> bool:
    number = _EXTENSION.sub("", candidate)
    return 8 <= sum(ch.isdigit() for ch in number) <= 15


_VALIDATORS: dict[str, Callable[[str], bool]] = {
    "ipv6": _ipv6_valid,
    "id_cn": id_cn_valid,
    "bank_card": _card_valid,
    "phone_intl": _intl_valid,
    "ipv4": _ipv4_valid,
}
# Checks that are part of the format, not of a checksum: kept when validation is off so
# that the "no validators" baseline measures only what the checksums add.
_SHAPE_ONLY: dict[str, Callable[[str], bool]] = {
    "ipv6": lambda c: c.count(":") >= 2 and any(ch not in ":" for ch in c),
    "bank_card": lambda c: 13 <= len(c.replace(" ", "").replace("-", "")) <= 19,
    "phone_intl": _intl_valid,
}


def find_pii(text: str, kinds: Sequence[str] = PII_KINDS, validate: bool = True) -> list[PiiSpan]:
    """Non-overlapping personal-data spans of ``text`` in position order.

    Args:
        text: the document.
        kinds: which kinds to look for (a subset of :data:`PII_KINDS`).
        validate: run the checksum/parse validators (off only to measure what they add).
    """
    checks = _VALIDATORS if validate else _SHAPE_ONLY
    found: list[tuple[int, int, int, str]] = []
    for kind in _candidate_kinds(text, kinds):
        rank = PII_KINDS.index(kind)
        check = checks.get(kind)
        for m in _PATTERNS[kind].finditer(text):
            if (check is None or check(m.group())) and (not validate or _in_context(kind, text, m)):
                found.append((m.start(), -(m.end() - m.start()), rank, kind))
    found.sort()
    spans: list[PiiSpan] = []
    end = 0
    for start, neg_len, _, kind in found:
        if start >= end:
            spans.append(PiiSpan(start, start - neg_len, kind))
            end = start - neg_len
    return spans
