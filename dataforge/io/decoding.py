"""Bytes in, text out: the encoding of one input file, decided before any line is split.

A reader hands :func:`open_decoded` the file's (decompressed) byte stream and the source's
``encoding`` setting; it gets back a text stream and a :class:`Decision` saying which codec
decodes the file and how that was decided. Decoding happens on the whole stream, before
lines are split and JSON is parsed, so a multi-byte character never breaks a line: a Big5
or GBK trail byte of 0x5C is half of a character, never a JSON backslash, and UTF-16's
``\\n`` is two bytes.

How the codec is decided (``Decision.decided_by``):

``bom``         The file starts with a byte-order mark (UTF-8, UTF-16 LE/BE, UTF-32 LE/BE).
                A BOM is unambiguous, so it wins over the configured encoding; it is
                stripped, never part of the first record.
``config``      No BOM, and the source names a codec (``utf-8``, the default, or e.g.
                ``gb18030``, ``big5``).
``utf-8``       ``encoding: auto`` and the sample is strict UTF-8 (pure ASCII included).
``detector``    ``encoding: auto``: the sample is not UTF-8. If it holds a GB18030 four-byte
                sequence and decodes as GB18030, that is the codec; otherwise
                charset-normalizer's candidates, best first, are tried on the sample and
                the first that decodes it strictly wins. GBK and GB2312 become GB18030
                (their superset: every GBK file decodes the same under it, and 4-byte
                GB18030 characters decode too); Big5 tries ``big5``, then ``cp950`` and
                ``big5hkscs`` (its extensions).
``undecodable`` ``encoding: auto`` and no candidate decodes the sample: the reader drops
                every record of the file with reason ``invalid_encoding``.

A configured single-byte codec (``latin-1``, ``cp1252``: every byte decodes, so GBK bytes
become mojibake without an error) on a sample whose bytes are CJK double-byte text
(:func:`looks_cjk_double_byte`) is kept, but the file is ``suspect`` with
``suspect_reason: cjk_double_byte``, each of its records counts the event
``suspect:cjk_double_byte``, and the manifest warns with the setting to change.

The sample is the first :data:`SAMPLE_BYTES` bytes (when those are all ASCII: the first
64 KB chunk that is not, and the one after it, within :data:`ASCII_SCAN_BYTES`); a
character its end cuts in two does not count against a codec (incremental decoding,
``final=False``); the detector sees it cut at its last line break first, then whole.
Bytes later in the file that the chosen codec cannot decode
become lone surrogates U+DC00..U+DCFF (error handler :data:`ESCAPE_ERRORS`, which, unlike
``surrogateescape``, also escapes bytes below 0x80: a truncated UTF-16 unit or a lone
UTF-16 surrogate) and the reader repairs or drops those records
(``read.invalid_utf8``).
"""

from __future__ import annotations

import codecs
import dataclasses
import io
import re
from typing import BinaryIO, TextIO

__all__ = [
    "ASCII_SCAN_BYTES",
    "COMMON_ENCODINGS",
    "ESCAPE_ERRORS",
    "MOJIBAKE_SHARE",
    "SUSPECT_FILE_SHARE",
    "SAMPLE_BYTES",
    "Decision",
    "PrefixedStream",
    "CJK_MIN_BYTES",
    "check_encoding",
    "decide_encoding",
    "file_report",
    "looks_cjk_double_byte",
    "mostly_replacement",
    "open_decoded",
]

SAMPLE_BYTES = 1 << 16
"""Bytes of a file's start that ``encoding: auto`` looks at."""
ASCII_SCAN_BYTES = 1 << 23
"""How far ``auto`` reads past an ASCII-only start for the first non-ASCII bytes."""

COMMON_ENCODINGS = (
    "utf-8",
    "auto",
    "gb18030",
    "gbk",
    "gb2312",
    "big5",
    "cp950",
    "big5hkscs",
    "utf-16",
    "utf-16-le",
    "utf-16-be",
    "utf-32",
    "shift_jis",
    "euc-jp",
    "euc-kr",
    "cp1252",
    "latin-1",
)
"""Listed in error messages; any text codec Python knows is accepted."""

MOJIBAKE_SHARE = 0.2
"""A record whose non-space characters are more than this share U+FFFD (and at least two
of them; a run of undecodable bytes becomes one U+FFFD) is dropped. Chinese news and
reviews of the demo corpus encoded in GBK or Big5 and read as UTF-8 are above 0.25 for
99% of records; text with one damaged character is below."""
SUSPECT_FILE_SHARE = 0.01
"""A file where more than this share of records needed U+FFFD repair is reported."""
ESCAPE_ERRORS = "dataforge.escape"
"""Decode error handler: each undecodable byte ``b`` becomes ``chr(0xDC00 + b)``."""


def _escape_bytes(exc: UnicodeError) -> tuple[str, int]:
    if not isinstance(exc, UnicodeDecodeError):
        raise exc
    return "".join(chr(0xDC00 + b) for b in exc.object[exc.start : exc.end]), exc.end


codecs.register_error(ESCAPE_ERRORS, _escape_bytes)

# Longest first: the UTF-32 LE BOM starts with the UTF-16 LE one.
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
_BOM_OF = {encoding: bom for bom, encoding in _BOMS}

# charset-normalizer's name -> codecs to try, in order.
_DETECTED_FAMILIES = {
    "gb2312": ("gb18030",),
    "gbk": ("gb18030",),
    "gb18030": ("gb18030",),
    "hz": ("gb18030", "hz"),
    "big5": ("big5", "cp950", "big5hkscs"),
    "cp950": ("cp950", "big5hkscs"),
    "big5hkscs": ("big5hkscs",),
}


# A GB18030 four-byte sequence (byte, digit, byte, digit): structural evidence that a
# detector weighing a few such characters in Latin text would miss.
_GB18030_FOUR_BYTE = re.compile(rb"[\x81-\xfe][\x30-\x39][\x81-\xfe][\x30-\x39]")


@dataclasses.dataclass(frozen=True)
class Decision:
    """Which codec decodes a file, and why.

    Attributes:
        encoding: the canonical Python codec name used (``codecs.lookup(name).name``;
            ``latin-1`` for an undecodable file, only to split its lines).
        decided_by: ``bom``, ``config``, ``utf-8``, ``detector`` or ``undecodable``.
        bom: whether a byte-order mark was found and stripped.
    """

    encoding: str
    decided_by: str
    bom: bool = False
    suspect_reason: str | None = None
    """Why the file probably is in another codec than the one used (``cjk_double_byte``)."""

    @property
    def undecodable(self) -> bool:
        return self.decided_by == "undecodable"

    @property
    def transcoded(self) -> bool:
        """Whether records were decoded from something other than UTF-8."""
        return not self.undecodable and not codecs.lookup(self.encoding).name.startswith("utf-8")


def check_encoding(name: str) -> str:
    """Validate an ``inputs[].encoding`` value; returns it unchanged.

    Raises:
        ValueError: not ``auto`` and not a text codec Python knows (lists common choices).
    """
    if name == "auto":
        return name
    try:
        "a".encode(name)  # LookupError for unknown names and for bytes codecs (base64, zlib)
    except (LookupError, TypeError, UnicodeError) as exc:
        raise ValueError(
            f"encoding {name!r} is not a known text codec; valid: {', '.join(COMMON_ENCODINGS)} "
            "(or any other Python text codec name)"
        ) from exc
    return name


def _strictly_decodes(sample: bytes, encoding: str, at_eof: bool) -> bool:
    try:
        codecs.getincrementaldecoder(encoding)("strict").decode(sample, final=at_eof)
    except (UnicodeDecodeError, LookupError):
        return False
    return True


def _detected_candidates(sample: bytes) -> list[str]:
    from charset_normalizer import from_bytes

    candidates: list[str] = []
    for match in from_bytes(sample):
        for name in _DETECTED_FAMILIES.get(match.encoding, (match.encoding,)):
            if name not in candidates:
                candidates.append(name)
    return candidates


def decide_encoding(sample: bytes, declared: str, at_eof: bool) -> Decision:
    """Decide the codec of a file from its first bytes (see the module docstring).

    Args:
        sample: the file's first bytes.
        declared: the source's ``encoding`` (``auto`` or a codec name).
        at_eof: whether ``sample`` is the whole file (else its end may cut a character).
    """
    for bom, encoding in _BOMS:
        if sample.startswith(bom):
            return Decision(encoding, "bom", bom=True)
    if declared != "auto":
        name = codecs.lookup(declared).name
        if _single_byte(name) and looks_cjk_double_byte(sample):
            return Decision(name, "config", suspect_reason="cjk_double_byte")
        return Decision(name, "config")
    if _strictly_decodes(sample, "utf-8", at_eof):
        return Decision("utf-8", "utf-8")
    # Cut at the last line break, charset-normalizer judges ASCII-based codecs (GBK, Big5)
    # on whole characters; the uncut sample is for UTF-16/32, where 0x0A is half a unit.
    if _GB18030_FOUR_BYTE.search(sample) and _strictly_decodes(sample, "gb18030", at_eof):
        return Decision("gb18030", "detector")
    cut = sample.rfind(b"\n") + 1
    samples = [sample] if at_eof or cut == 0 else [sample[:cut], sample]
    for part in samples:
        for encoding in _detected_candidates(part):
            if _strictly_decodes(sample, encoding, at_eof):
                return Decision(codecs.lookup(encoding).name, "detector")
    return Decision("latin-1", "undecodable")


CJK_MIN_BYTES = 16
"""Non-ASCII bytes a sample needs before its byte statistics say anything."""
_CJK_DOUBLE_BYTE = frozenset(
    codecs.lookup(name).name
    for name in ("gb18030", "gbk", "gb2312", "big5", "cp950", "big5hkscs", "cp949",
                 "euc-kr", "johab", "shift_jis", "cp932", "euc-jp")
)  # fmt: skip


def _single_byte(encoding: str) -> bool:
    """Whether ``encoding`` maps each byte to one character (latin-1, cp1252, koi8-r...)."""
    if encoding.startswith("utf"):
        return False
    return len(bytes(range(256)).decode(encoding, "replace")) == 256


def looks_cjk_double_byte(sample: bytes) -> bool:
    """Whether ``sample``'s bytes are, by charset-normalizer's statistics, CJK double-byte
    text (GBK, Big5, Shift-JIS, EUC-KR...) that decodes strictly as that codec; False for
    a sample with fewer than :data:`CJK_MIN_BYTES` non-ASCII bytes."""
    if sum(1 for b in sample if b >= 0x80) < CJK_MIN_BYTES:
        return False
    from charset_normalizer import from_bytes

    best = from_bytes(sample).best()
    if best is None or codecs.lookup(best.encoding).name not in _CJK_DOUBLE_BYTE:
        return False
    return _strictly_decodes(sample, best.encoding, at_eof=False)


class PrefixedStream(io.RawIOBase):
    """``prefix`` followed by the rest of ``raw`` (the sample was already read from it)."""

    def __init__(self, prefix: bytes, raw: BinaryIO) -> None:
        self._prefix = memoryview(prefix)
        self._raw = raw

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[override]
        if self._prefix:
            n = min(len(buffer), len(self._prefix))
            buffer[:n] = self._prefix[:n]
            self._prefix = self._prefix[n:]
            return n
        data = self._raw.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


def _past_ascii(head: bytes, raw: BinaryIO) -> tuple[bytes, bytes, bool]:
    """Read on until a chunk holds a non-ASCII byte (at most ASCII_SCAN_BYTES): an ASCII
    start says nothing about the codec. Returns (all bytes read, the sample: that chunk
    and the next, whether the file ended). The chunk before is ASCII, so the sample
    starts on a character boundary."""
    chunks = [head]
    read = len(head)
    while read < ASCII_SCAN_BYTES:
        chunk = raw.read(SAMPLE_BYTES)
        chunks.append(chunk)
        read += len(chunk)
        if len(chunk) < SAMPLE_BYTES:
            return b"".join(chunks), chunk, True
        if not chunk.isascii():
            after = raw.read(SAMPLE_BYTES)
            chunks.append(after)
            return b"".join(chunks), chunk + after, len(after) < SAMPLE_BYTES
    return b"".join(chunks), chunks[-1], False


def open_decoded(raw: BinaryIO, declared: str) -> tuple[TextIO, Decision]:
    """Decide ``raw``'s codec and return a text stream over it (universal newlines).

    Undecodable bytes become lone surrogates U+DC00..U+DCFF (:data:`ESCAPE_ERRORS`); the
    caller closes ``raw``.
    """
    head = raw.read(SAMPLE_BYTES)
    at_eof = len(head) < SAMPLE_BYTES
    sample = head
    if declared == "auto" and head.isascii() and not at_eof:
        head, sample, at_eof = _past_ascii(head, raw)
    decision = decide_encoding(sample, declared, at_eof)
    if decision.bom:
        head = head[len(_BOM_OF[decision.encoding]) :]
    stream = io.BufferedReader(PrefixedStream(head, raw), buffer_size=1 << 20)
    # newline=None: \r\n, \r and \n all end a line (CR-only files are common in old corpora)
    text = io.TextIOWrapper(stream, encoding=decision.encoding, errors=ESCAPE_ERRORS, newline=None)
    return text, decision


def mostly_replacement(text: str) -> bool:
    """Whether ``text`` is mostly U+FFFD (see :data:`MOJIBAKE_SHARE`): a record decoded
    with the wrong codec, not one with a damaged character."""
    replaced = text.count("\ufffd")
    if replaced < 2:
        return False
    visible = len(text) - sum(map(text.count, " \t\n"))
    return replaced > MOJIBAKE_SHARE * visible


def file_report(decision: Decision, records: int, invalid_records: int) -> dict:
    """What the manifest says about one file's decoding: the codec, how it was decided,
    whether a BOM was stripped, the records read, how many held bytes the codec could not
    decode, and ``suspect`` (undecodable, above :data:`SUSPECT_FILE_SHARE`, or a
    ``suspect_reason``, then given too)."""
    suspect = bool(records) and (
        decision.undecodable
        or invalid_records / records > SUSPECT_FILE_SHARE
        or decision.suspect_reason is not None
    )
    report = {
        "encoding": decision.encoding,
        "decided_by": decision.decided_by,
        "bom": decision.bom,
        "records": records,
        "invalid_records": invalid_records,
        "suspect": suspect,
    }
    if decision.suspect_reason is not None:
        report["suspect_reason"] = decision.suspect_reason
    return report
