"""URL canonicalization: the one string form every URL is keyed, deduped and stored by.

Pure: no I/O, no clock, no environment. The rules are the public contract in
schemas/URL_KEYS.md; changing any of them changes url_keys, so it needs a new key version.

Two paths produce the same result (a test checks it on real URL lists): a fast path for the
common already-clean ``http(s)://host/path?query`` shape, matched by one regex, and a
WHATWG-style slow path for everything else (whitespace, backslashes, userinfo, IP literals,
IDNA, relative references, percent-escapes, dot segments).
"""

from __future__ import annotations

import ipaddress
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import unquote, urljoin

import idna

from crawlstream.errors import InvalidUrl

from ._domains import registered_domain_or_host

__all__ = ["MAX_HOST_LENGTH", "MAX_URL_LENGTH", "CanonicalUrl", "canonicalize"]

logger = logging.getLogger(__name__)

MAX_URL_LENGTH = 8192
"""Longest accepted input and canonical URL, in characters (8 KiB; browsers and CDNs cap near it)."""
MAX_HOST_LENGTH = 253
"""Longest host in its ASCII (punycode) form, as DNS allows."""

_DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True, slots=True)
class CanonicalUrl:
    """A URL in canonical form and the parts derived from it.

    ``url`` is what keys, dedupe and storage use; ``raw`` is the input kept for provenance.
    """

    url: str
    scheme: str
    host: str
    """Lowercase ASCII (punycode) host; IPv6 literals keep their brackets: ``[::1]``."""
    port: int | None
    """None when absent or the scheme's default (80/443)."""
    path_query: str
    """Path plus ``?query`` when there is one: ``/a/b?x=1``."""
    domain: str
    """Registered domain (eTLD+1) of ``host``; the host itself for IPs, localhost and hosts
    that are a public suffix alone."""
    raw: str


_FIELDS = ("url", "scheme", "host", "port", "path_query", "domain", "raw")


def _canonical_url_factory() -> Callable[[str, str, str, int | None, str, str, str], CanonicalUrl]:
    """A constructor of ``CanonicalUrl`` that sets its slots directly.

    The generated ``__init__`` of a frozen dataclass calls ``object.__setattr__`` per field
    (~1.5 us for seven, a quarter of canonicalizing a clean URL); the slot descriptors do the
    same in a third of the time. Used only while ``CanonicalUrl`` is exactly the slotted class
    this was written for (same fields, no ``__post_init__``); otherwise the class itself.
    """
    if tuple(getattr(CanonicalUrl, "__slots__", ())) != _FIELDS or hasattr(CanonicalUrl, "__post_init__"):
        return CanonicalUrl
    set_url, set_scheme, set_host, set_port, set_pq, set_domain, set_raw = (
        CanonicalUrl.__dict__[name].__set__ for name in _FIELDS
    )
    new = object.__new__

    def make(
        url: str, scheme: str, host: str, port: int | None, path_query: str, domain: str, raw: str
    ) -> CanonicalUrl:
        obj = new(CanonicalUrl)
        set_url(obj, url)
        set_scheme(obj, scheme)
        set_host(obj, host)
        set_port(obj, port)
        set_pq(obj, path_query)
        set_domain(obj, domain)
        set_raw(obj, raw)
        return obj

    return make


_new_canonical = _canonical_url_factory()


# ---------------------------------------------------------------------------------------------
# Character classes (see schemas/URL_KEYS.md "Percent-encoding").
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")

_HEX = "0123456789abcdefABCDEF"
_PCT_REPLACEMENT: dict[str, str] = {}
for _a in _HEX:
    for _b in _HEX:
        _ch = chr(int(_a + _b, 16))
        _PCT_REPLACEMENT[_a + _b] = _ch if _ch in _UNRESERVED else f"%{(_a + _b).upper()}"
del _a, _b, _ch

_PCT_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")
# Everything but printable ASCII is encoded, plus the WHATWG path set (" # < > ? ^ ` { })
# and the special-query set (" # < > ').
_PATH_NEEDS_ENCODING = re.compile(r"[^!$%&\'()*+,\-./0-9:;=@A-Z\[\\\]_a-z|~]")
_QUERY_NEEDS_ENCODING = re.compile(r"[^!$%&()*+,\-./0-9:;=?@A-Z\[\\\]^_`a-z{|}~]")
# A path the fast path can keep verbatim: allowed raw characters, no '%', and no '//' or
# '/.' (which may start a dot segment) anywhere. One character class plus two substring
# tests (``_clean_path``): a quarter of the time of the equivalent regex with a lookbehind
# per character, ``/(?:[!$&'()*+,\-0-9:;=@A-Z\[\\\]_a-z|~]|(?<!/)[./])*``.
_CLEAN_PATH_CHARS = re.compile(r"/[!$&'()*+,\-./0-9:;=@A-Z\[\\\]_a-z|~]*")
_CLEAN_QUERY = re.compile(r"[!$&()*+,\-./0-9:;=?@A-Z\[\\\]^_`a-z{|}~]*")

# The fast shape: lowercase http(s), a plain ASCII host, optional port, path without
# whitespace/backslash/non-ASCII, query without C0/space, any fragment.
_FAST = re.compile(
    r"(https?)://([A-Za-z0-9._\-]+)(?::([0-9]{1,5}))?"
    r"(/[!-\"$->@-\[\]-~]*)?"
    r"(?:\?([^#\x00-\x20]*))?"
    r"(?:#.*)?",
    re.DOTALL,
)
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*):")
_C0_OR_SPACE = "".join(chr(c) for c in range(0x21))
_TAB_NEWLINE = {0x09: None, 0x0A: None, 0x0D: None}
_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_\-]{0,61}[a-z0-9_])?|[a-z0-9_]")
_HOST_OK = re.compile(r"[a-z0-9_\-]+(?:\.[a-z0-9_\-]+)*")


def _encode_char(match: re.Match[str]) -> str:
    return "".join(f"%{b:02X}" for b in match.group().encode("utf-8", "surrogatepass"))


def _pct_escape(match: re.Match[str]) -> str:
    return _PCT_REPLACEMENT[match.group(1)]


def _normalize_percent(text: str, needs_encoding: re.Pattern[str]) -> str:
    """Decode escapes of unreserved characters, uppercase the rest, encode what must not be raw."""
    if "%" in text:
        text = _PCT_ESCAPE.sub(_pct_escape, text)
    return needs_encoding.sub(_encode_char, text)


def _normalize_path(path: str) -> str:
    """Percent-normalize, then remove dot segments (WHATWG), then collapse empty segments.

    The order matters: ``%2e`` becomes ``.`` first so it counts as a dot segment, and dot
    segments go before empty ones so ``/a//../b`` is ``/a/b`` as browsers resolve it.
    """
    if not path:
        return "/"
    path = _normalize_percent(path, _PATH_NEEDS_ENCODING)
    segments = path.split("/")[1:] if path.startswith("/") else path.split("/")
    out: list[str] = []
    last = len(segments) - 1
    for i, segment in enumerate(segments):
        if segment == "..":
            if out:
                out.pop()
            if i == last:
                out.append("")
        elif segment == ".":
            if i == last:
                out.append("")
        else:
            out.append(segment)
    # Duplicate slashes: drop empty segments, except a final one (the trailing slash).
    kept = [segment for segment in out[:-1] if segment]
    if out:
        kept.append(out[-1])
    return "/" + "/".join(kept)


def _query_key(param: str) -> str:
    return param.partition("=")[0]


def _normalize_query(query: str) -> str:
    """Percent-normalize, drop empty parameters, stable-sort by key (duplicates keep order)."""
    if not _CLEAN_QUERY.fullmatch(query):
        query = _normalize_percent(query, _QUERY_NEEDS_ENCODING)
    if "&" not in query:
        return query
    params = [param for param in query.split("&") if param]
    params.sort(key=_query_key)
    return "&".join(params)


# ---------------------------------------------------------------------------------------------
# Hosts


def _ipv4_number(part: str) -> int | None:
    """One WHATWG IPv4 part (decimal, 0x hex or 0-prefixed octal), or None if not a number."""
    radix = 10
    if part[:2] in ("0x", "0X"):
        part, radix = part[2:], 16
    elif len(part) > 1 and part[0] == "0":
        part, radix = part[1:], 8
    if not part:
        return 0
    try:
        return int(part, radix) if part.isalnum() and part.isascii() else None
    except ValueError:
        return None


def _ends_in_number(labels: list[str]) -> bool:
    last = labels[-1]
    if last.isascii() and last.isdigit():
        return True
    return last[:2] in ("0x", "0X") and all(c in _HEX for c in last[2:])


def _parse_ipv4(host: str, labels: list[str]) -> str:
    """Serialize a host that ends in a number as dotted IPv4, the WHATWG way, or raise."""
    numbers = [_ipv4_number(label) if label else None for label in labels]
    if len(labels) > 4 or any(n is None for n in numbers):
        raise InvalidUrl(f"expected an IPv4 address, found {host!r}", reason="host")
    values = [n for n in numbers if n is not None]
    if any(n > 255 for n in values[:-1]) or values[-1] >= 256 ** (5 - len(values)):
        raise InvalidUrl(f"IPv4 address {host!r} is out of range", reason="host")
    address = values[-1]
    for i, n in enumerate(values[:-1]):
        address += n * 256 ** (3 - i)
    return str(ipaddress.IPv4Address(address))


def _to_ascii(host: str) -> str:
    """UTS #46 mapping and punycode, label by label; plain ASCII labels pass unchanged.

    ASCII labels skip the IDNA 2008 code point check on purpose: real hosts use ``_``.
    """
    try:
        mapped = idna.uts46_remap(host, std3_rules=False)
    except (idna.IDNAError, UnicodeError, ValueError) as exc:
        raise InvalidUrl(
            f"host {host!r} is not a valid internationalized name: {exc}", reason="idna"
        ) from exc
    labels = mapped.split(".")
    for i, label in enumerate(labels):
        if label.isascii() and not label.startswith("xn--"):
            continue
        try:
            labels[i] = idna.alabel(label).decode("ascii")
        except (idna.IDNAError, UnicodeError, ValueError, IndexError) as exc:
            raise InvalidUrl(
                f"host label {label!r} of {host!r} is not valid IDNA: {exc}", reason="idna"
            ) from exc
    return ".".join(labels)


@lru_cache(maxsize=1 << 16)
def _host_and_domain(raw_host: str) -> tuple[str, str]:
    """(canonical host, registered domain) of a raw authority host; cached because hosts repeat."""
    if raw_host.startswith("["):
        if not raw_host.endswith("]"):
            raise InvalidUrl(f"expected ']' to close the IPv6 address in {raw_host!r}", reason="host")
        try:
            address = ipaddress.IPv6Address(raw_host[1:-1])
        except ValueError as exc:
            raise InvalidUrl(f"expected an IPv6 address, found {raw_host!r}", reason="host") from exc
        if address.scope_id:
            raise InvalidUrl(f"IPv6 zone ids are not allowed in URLs: {raw_host!r}", reason="host")
        host = f"[{address.compressed}]"
        return host, host
    host = raw_host
    if "%" in host:
        try:
            host = unquote(host, errors="strict")
        except UnicodeError as exc:
            raise InvalidUrl(f"host {raw_host!r} percent-decodes to invalid UTF-8", reason="host") from exc
    if host.isascii():
        host = host.lower()
        if "xn--" in host:
            host = _to_ascii(host)
    else:
        host = _to_ascii(host)
    if host.endswith("."):
        host = host[:-1]
    if not host:
        raise InvalidUrl(f"expected a host name, found {raw_host!r}", reason="host")
    labels = host.split(".")
    if _ends_in_number(labels):
        host = _parse_ipv4(host, labels)
        return host, host
    if len(host) > MAX_HOST_LENGTH or not _HOST_OK.fullmatch(host):
        raise InvalidUrl(
            f"expected a host of letters, digits, '-', '_' and dots (at most {MAX_HOST_LENGTH}), "
            f"found {raw_host!r}",
            reason="host",
        )
    if any(len(label) > 63 for label in labels):
        raise InvalidUrl(f"a label of host {raw_host!r} is longer than 63 characters", reason="host")
    return host, registered_domain_or_host(host)


# ---------------------------------------------------------------------------------------------
# Assembly


def _port_number(scheme: str, port: str, raw: str) -> int | None:
    if not port:
        return None
    if not port.isascii() or not port.isdigit():
        raise InvalidUrl(f"expected a numeric port, found {port!r} in {raw!r}", url=raw, reason="port")
    number = int(port)
    if number > 65535:
        raise InvalidUrl(f"port {number} is out of range (0-65535) in {raw!r}", url=raw, reason="port")
    return None if number == _DEFAULT_PORTS[scheme] else number


def _build(scheme: str, raw_host: str, port: int | None, path: str, query: str, raw: str) -> CanonicalUrl:
    try:
        host, domain = _host_and_domain(raw_host)
    except InvalidUrl as exc:
        exc.url = raw
        raise
    if not (path and _CLEAN_PATH_CHARS.fullmatch(path) and "//" not in path and "/." not in path):
        path = _normalize_path(path)
    if query:
        query = _normalize_query(query)
    path_query = f"{path}?{query}" if query else path
    authority = host if port is None else f"{host}:{port}"
    url = f"{scheme}://{authority}{path_query}"
    if len(url) > MAX_URL_LENGTH:
        raise InvalidUrl(
            f"canonical URL is {len(url)} characters, more than the {MAX_URL_LENGTH} allowed",
            url=raw,
            reason="length",
        )
    return _new_canonical(url, scheme, host, port, path_query, domain, raw)


def _split_authority(authority: str, raw: str) -> tuple[str, str]:
    """(host, port) from ``userinfo@host:port``; userinfo is dropped (it must never reach keys or logs)."""
    if "@" in authority:
        authority = authority.rpartition("@")[2]
    if authority.startswith("["):
        end = authority.find("]")
        if end < 0:
            raise InvalidUrl("expected ']' to close the IPv6 address", url=raw, reason="host")
        host, rest = authority[: end + 1], authority[end + 1 :]
        if rest and not rest.startswith(":"):
            raise InvalidUrl(f"unexpected {rest!r} after the IPv6 address", url=raw, reason="host")
        return host, rest[1:]
    host, _, port = authority.partition(":")
    if not host:
        raise InvalidUrl("expected a host after '//', found none", url=raw, reason="host")
    return host, port


def _canonicalize_absolute(scheme: str, rest: str, raw: str) -> CanonicalUrl:
    """Everything after ``scheme:`` of an absolute http(s) URL (tabs/newlines already removed)."""
    rest = rest.partition("#")[0]
    before_query, has_query, query = rest.partition("?")
    before_query = before_query.replace("\\", "/").lstrip("/")
    authority, slash, path = before_query.partition("/")
    host, port_text = _split_authority(authority, raw)
    port = _port_number(scheme, port_text, raw)
    return _build(scheme, host, port, slash + path, query if has_query else "", raw)


def _starts_with_two_slashes(text: str) -> bool:
    return text[:1] in ("/", "\\") and text[1:2] in ("/", "\\")


def _base_scheme(base: str) -> str:
    match = _SCHEME.match(base.strip(_C0_OR_SPACE).translate(_TAB_NEWLINE))
    return match.group(1).lower() if match else ""


def _canonicalize_slow(url: str, base: str | None) -> CanonicalUrl:
    text = url.strip(_C0_OR_SPACE).translate(_TAB_NEWLINE)
    match = _SCHEME.match(text)
    if match is not None:
        scheme = match.group(1).lower()
        rest = text[match.end() :]
        if scheme not in _DEFAULT_PORTS:
            raise InvalidUrl(
                f"expected an http or https URL, found scheme {scheme!r}", url=url, reason="scheme"
            )
        if base is None or _starts_with_two_slashes(rest) or scheme != _base_scheme(base):
            return _canonicalize_absolute(scheme, rest, url)
        text = rest  # "http:foo" or "http:/foo" against an http base is a relative reference
    if base is None:
        raise InvalidUrl(
            "expected an absolute http(s) URL, found a relative one and no base", url=url, reason="scheme"
        )
    base_canon = canonicalize(base)
    if _starts_with_two_slashes(text):
        # Scheme-relative: in http(s) any run of slashes/backslashes leads to the authority.
        return _canonicalize_absolute(base_canon.scheme, text, url)
    # Backslashes count as slashes before the query in http(s), as browsers treat them.
    head, sep, tail = text.partition("?")
    head, hsep, fragment = head.partition("#")
    text = head.replace("\\", "/") + hsep + fragment + sep + tail
    joined = urljoin(base_canon.url, text)
    result = canonicalize(joined)
    return _new_canonical(
        result.url, result.scheme, result.host, result.port, result.path_query, result.domain, url
    )


def canonicalize(url: str, base: str | None = None) -> CanonicalUrl:
    """Canonicalize ``url`` (resolved against ``base`` when relative). Idempotent.

    Raises :class:`~crawlstream.errors.InvalidUrl` (and nothing else, for any ``str``) with
    ``reason`` one of ``scheme`` (not http(s), or relative without a base), ``host``, ``idna``,
    ``port``, ``length`` (over MAX_URL_LENGTH = 8192 characters, input or result), ``parse``.
    """
    if not isinstance(url, str):
        raise InvalidUrl(f"expected a URL string, found {type(url).__name__}", reason="parse")
    if len(url) > MAX_URL_LENGTH:
        raise InvalidUrl(
            f"URL is {len(url)} characters, more than the {MAX_URL_LENGTH} allowed",
            url=url[:200],
            reason="length",
        )
    if base is None:
        fast = _FAST.fullmatch(url)
        if fast is not None:
            scheme, host, port_text, path, query = fast.groups()
            port = _port_number(scheme, port_text, url) if port_text else None
            return _build(scheme, host, port, path or "/", query or "", url)
    try:
        return _canonicalize_slow(url, base)
    except InvalidUrl:
        raise
    except (ValueError, UnicodeError, IndexError) as exc:
        # A parser corner we did not foresee: still bad input, never a crash.
        raise InvalidUrl(f"could not parse URL: {exc}", url=url, reason="parse") from exc
