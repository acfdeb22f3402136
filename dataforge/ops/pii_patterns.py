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
                ``(415) 555-2671`` / ``415-555-2671`` (``400``/``800-xxx-xxxx``, China's
                service-number format too, is ``phone_cn``)
``ipv4``        four dotted numbers not inside a longer dotted run (version strings);
                ``ipaddress.IPv4Address`` must parse them
==============  ==========================================================================

Spans of different kinds never overlap: they are taken by position, a longer span before
a shorter one starting at the same place, then in the order of the table.
"""

from __future__ import annotations

import ipaddress
import re
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
    "ipv6": re.compile(
        r"(?<![0-9A-Za-z:.])(?:[0-9A-Fa-f]{0,4}:){2,7}"
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
        r"|[48]00(?P<s2>[ -]?)[0-9]{3}(?P=s2)[0-9]{4}"
        r")" + _NOT_DIGIT_AFTER
    ),
    "phone_intl": re.compile(
        r"(?:(?<![0-9A-Za-z+])\+(?!86)[1-9][0-9]{0,2}(?:[ .-]?\(?[0-9]{1,4}\)?){2,5}"
        r"|(?<![0-9A-Za-z(])(?<![0-9][ .,-])(?:\([2-9][0-9]{2}\) ?|[2-9][0-9]{2}[.-])[2-9][0-9]{2}[.-][0-9]{4})"
        + _NOT_DIGIT_AFTER
    ),
    "ipv4": re.compile(r"(?<![0-9A-Za-z.])(?:[0-9]{1,3}\.){3}[0-9]{1,3}(?![0-9A-Za-z]|\.[0-9])"),
}


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


def _intl_valid(candidate: str) -> bool:
    return 8 <= sum(ch.isdigit() for ch in candidate) <= 15


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
    for rank, kind in enumerate(PII_KINDS):
        if kind not in kinds:
            continue
        check = checks.get(kind)
        for m in _PATTERNS[kind].finditer(text):
            if check is None or check(m.group()):
                found.append((m.start(), -(m.end() - m.start()), rank, kind))
    found.sort()
    spans: list[PiiSpan] = []
    end = 0
    for start, neg_len, _, kind in found:
        if start >= end:
            spans.append(PiiSpan(start, start - neg_len, kind))
            end = start - neg_len
    return spans
