"""The ``url_filter`` op: URL normalization, blocklists, exact URL dedup, per-domain cap.

A barrier stage (the dedup and the cap need every record). Each record's ``meta.url`` is
parsed as a browser parses it (the WHATWG URL standard, by ``ada-url``), so the host a
blocklist sees is the host a browser would visit: ``\\`` is a path separator
(``http://evil.cn\\@good.cn`` is on ``evil.cn``), a host is percent-decoded, mapped by UTS
46 (NFKC widths, case) and written in ASCII (``中国`` -> ``xn--fiqs8s``), user info is dropped,
tabs and newlines are removed. Then it is normalized (:func:`normalize_url`): the trailing
dot of the host, default port, fragment and tracking parameters (``utm_*``, ``fbclid``,
``gclid``...) removed, dot segments resolved, query parameters sorted. The result is
written to ``meta.url_normalized``. Listed domains are read the same way
(:func:`normalize_host`).

Rules, each a drop reason counted in the manifest (first that applies):

=======================  ==================================================================
reason                   when
=======================  ==================================================================
``url:invalid``          ``meta.url`` is set but is not an http(s) URL with a host
``url:blocked_domain``   the host is a listed domain or a subdomain of one (``www.`` ignored)
``url:blocked_substring`` the normalized URL, or its readable form (Unicode host, decoded
                         path and query), contains a listed substring (after NFKC and
                         case folding of both)
``url:duplicate``        (``dedup``) another capture of the same URL (the key ignores the
                         scheme and ``www.``) is later by ``meta.warc_date``; the latest is
                         kept, ties broken by a hash of the id
``url:domain_cap``       (``max_per_domain``) the domain already has that many records: the
                         ones kept are those with the smallest keyed hash of their id, so
                         the choice does not depend on order, splits or workers
=======================  ==================================================================

Records without ``meta.url`` pass untouched. The planner is
:mod:`dataforge.ops.url_filter.planner`.
"""

from __future__ import annotations

import dataclasses
import functools
import posixpath
import unicodedata
from typing import Any, ClassVar
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

import ada_url
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from dataforge.ops.barrier import BarrierContext
from dataforge.ops.base import BarrierOp
from dataforge.records import DROP, ORD, meta_dicts, with_meta
from dataforge.typed_config import check_range

__all__ = [
    "KEY",
    "REASON",
    "UrlFilter",
    "normalize_host",
    "normalize_url",
    "url_key",
]

KEY = "_url_key"  # uint64 hash of the dedup key (null: no URL)
DOMAIN = "_url_domain"  # uint64 hash of the domain
DATE = "_url_date"  # capture time in seconds (int64; missing: the smallest value)
RANK = "_url_rank"  # uint64 hash of the id: ties and the domain cap
BLOCK = "_url_block"  # blocklist reason decided per record in prepare
REASON = "_url_reason"  # decision column written by the planner
TRACKING_PARAMS = frozenset({"fbclid", "gclid", "yclid", "msclkid", "dclid", "mc_eid", "_ga"})
_DEFAULT_PORTS = {"http": 80, "https": 443}
_SAFE_PATH = "/%:@!$&'()*+,;=-._~"
_NO_DATE = np.iinfo(np.int64).min
_PARTS = (
    "protocol",
    "username",
    "hostname",
    "port",
    "pathname",
    "search",
)  # only these: all of them doubled the time


def normalize_url(url: str) -> str | None:
    """The normalized form of an http(s) URL (see the module docstring); None if invalid."""
    try:
        parts = ada_url.parse_url(url, attributes=_PARTS)
    except ValueError:
        return None
    scheme = parts["protocol"].rstrip(":")
    host = parts["hostname"].rstrip(".")
    if scheme not in _DEFAULT_PORTS or not host:
        return None
    netloc = f"{host}:{parts['port']}" if parts["port"] else host  # a default port is ""
    path = posixpath.normpath(unquote(parts["pathname"]))
    if parts["pathname"].endswith("/") and not path.endswith("/"):
        path += "/"
    path = quote(path.replace("//", "/"), safe=_SAFE_PATH)
    query = sorted(
        (k, v)
        for k, v in parse_qsl(parts["search"].removeprefix("?"), keep_blank_values=True)
        if not k.lower().startswith("utm_") and k.lower() not in TRACKING_PARAMS
    )
    return urlunsplit((scheme, netloc, path, urlencode(query), ""))


def normalize_host(name: str) -> str | None:
    """A host name as :func:`normalize_url` writes it (``ＥＶＩＬ.中国.`` ->
    ``evil.xn--fiqs8s``); None if ``name`` is not a host name alone (a path, port or user
    info in it, or no host a browser would accept)."""
    try:
        parts = ada_url.parse_url(f"http://{name}/", attributes=_PARTS)
    except ValueError:
        return None
    if parts["pathname"] != "/" or parts["port"] or parts["username"] or parts["search"]:
        return None
    return parts["hostname"].rstrip(".") or None


def readable_url(normalized: str) -> str:
    """``normalized`` as a reader would write it: the host in Unicode, the path and query
    percent-decoded (what a listed substring such as ``赌场`` is compared with)."""
    parts = urlsplit(normalized)
    host = ada_url.idna_to_unicode(parts.netloc)
    rest = normalized.split("://", 1)[1][len(parts.netloc) :]
    return f"{parts.scheme}://{host}{unquote(rest)}"


def _folded(text: str) -> str:
    return unicodedata.normalize("NFKC", text).casefold()


def _site(host: str) -> str:
    return host[4:] if host.startswith("www.") else host


def url_key(normalized: str) -> tuple[str, str]:
    """(dedup key, domain) of a normalized URL: the key ignores the scheme and ``www.``."""
    parts = urlsplit(normalized)
    domain = _site(parts.hostname or "")
    rest = normalized.split("://", 1)[1][len(parts.netloc) :]
    return f"{_site(parts.netloc)}{rest}", domain


def _seconds(date: str | None) -> int:
    if not date:
        return int(_NO_DATE)
    try:
        return int(np.datetime64(date.rstrip("Z"), "s").astype(np.int64))
    except ValueError:
        return int(_NO_DATE)


def _hash(text: str, seed: int = 0) -> int:
    return xxhash.xxh64_intdigest(text.encode("utf-8"), seed)


class UrlFilter(BarrierOp):
    """URL normalization, blocklists, dedup and per-domain cap (see the module docstring)."""

    name: ClassVar[str] = "url_filter"

    @dataclasses.dataclass(frozen=True)
    class Config:
        blocked_domains: tuple[str, ...] = ()
        """Domains dropped with all their subdomains (``example.com`` blocks
        ``news.example.com``)."""
        blocked_substrings: tuple[str, ...] = ()
        """Substrings of the normalized URL that drop it (``/login``, ``casino``)."""
        dedup: bool = True
        """Keep only the latest capture of each URL."""
        max_per_domain: int | None = None
        """Most records kept per domain; null: no cap."""
        seed: int | None = None
        """Seed of the domain cap's choice; null: the pipeline seed."""

        def __post_init__(self) -> None:
            check_range("url_filter.max_per_domain", self.max_per_domain, 1)
            for d in self.blocked_domains:
                if not d or "/" in d or normalize_host(d) is None:
                    raise ValueError(f"url_filter.blocked_domains: {d!r} is not a host name")

    @property
    def seed(self) -> int:
        return self.config.seed if self.config.seed is not None else self.context.seed

    @functools.cached_property
    def _blocked_sites(self) -> tuple[str, ...]:
        return tuple(_site(normalize_host(d) or "") for d in self.config.blocked_domains)

    @functools.cached_property
    def _blocked_substrings(self) -> tuple[str, ...]:
        return tuple(_folded(s) for s in self.config.blocked_substrings if s)

    def _blocked(self, normalized: str, domain: str) -> str | None:
        if any(domain == b or domain.endswith("." + b) for b in self._blocked_sites):
            return "url:blocked_domain"
        if self._blocked_substrings:
            forms = (_folded(normalized), _folded(readable_url(normalized)))
            if any(s in form for s in self._blocked_substrings for form in forms):
                return "url:blocked_substring"
        return None

    def prepare(self, batch: pa.Table) -> pa.Table:
        """Add the hashed key, domain, capture time, id rank and blocklist reason."""
        metas = meta_dicts(batch)
        n = batch.num_rows
        keys, domains = [None] * n, [None] * n
        dates = np.full(n, _NO_DATE, dtype=np.int64)
        blocks: list[str | None] = [None] * n
        normalized_urls: list[str | None] = [None] * n
        for i, meta in enumerate(metas):
            url = meta.get("url")
            if not isinstance(url, str):
                continue
            normalized = normalize_url(url)
            if normalized is None:
                blocks[i] = "url:invalid"
                continue
            key, domain = url_key(normalized)
            normalized_urls[i] = normalized
            blocks[i] = self._blocked(normalized, domain)
            keys[i], domains[i] = _hash(key), _hash(domain)
            dates[i] = _seconds(meta.get("warc_date"))
        ranks = [
            _hash(i, self.seed & 0xFFFF_FFFF_FFFF_FFFF) for i in batch.column("id").to_pylist()
        ]
        batch = with_meta(batch, "url_normalized", normalized_urls)
        columns = {
            KEY: pa.array(keys, pa.uint64()),
            DOMAIN: pa.array(domains, pa.uint64()),
            DATE: pa.array(dates, pa.int64()),
            RANK: pa.array(ranks, pa.uint64()),
            BLOCK: pa.array(blocks, pa.string()),
        }
        for name, values in columns.items():
            if name in batch.column_names:
                batch = batch.drop_columns([name])
            batch = batch.append_column(name, values)
        return batch

    def plan(self, ctx: BarrierContext) -> dict[str, Any]:
        """The global decision over all prepared parts (:mod:`dataforge.ops.url_filter.planner`)."""
        from dataforge.ops.url_filter.planner import plan  # deferred: it imports this module

        return plan(self, ctx)

    def apply(self, batch: pa.Table, decision: pa.Table | None) -> pa.Table:
        """Drop by the blocklist reason from ``prepare``, then by the planner's decision
        (``_ord``, ``_url_reason``); the helper columns are removed."""
        reasons = batch.column(BLOCK).combine_chunks()
        if decision is not None and decision.num_rows:
            pos = pc.index_in(batch.column(ORD), value_set=decision.column(ORD))
            planned = pc.take(decision.column(REASON), pos)
            reasons = pc.coalesce(reasons, planned)
        merged = pc.coalesce(batch.column(DROP), reasons)
        out = batch.set_column(batch.schema.get_field_index(DROP), DROP, merged)
        return out.drop_columns(
            [c for c in (KEY, DOMAIN, DATE, RANK, BLOCK) if c in out.column_names]
        )
