"""Registered domain (eTLD+1) from the Public Suffix List snapshot bundled in tldextract.

Pure: the extractor is built with no suffix-list URLs and no cache directory, so it reads
only the ``.tld_set_snapshot`` file shipped inside the tldextract wheel. It never opens a
socket and never writes a cache (tests/urls/test_url_domains.py runs it with sockets blocked).
"""

from __future__ import annotations

import ipaddress
import logging
import re
from functools import lru_cache

import tldextract

from crawlstream.errors import InvalidDomain

__all__ = ["registered_domain", "registered_domain_or_host"]

logger = logging.getLogger(__name__)

_EXTRACTOR = tldextract.TLDExtract(
    suffix_list_urls=(),
    cache_dir=None,
    fallback_to_snapshot=True,
    include_psl_private_domains=True,
)
# Characters that cannot occur in a host name (they would make tldextract parse a URL).
_BAD_HOST_CHARS = re.compile(r"[\s/\\:@?#\[\]%]")
_IPV4 = re.compile(r"\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}")
_LOCALHOST = "localhost"


def _ip_literal(host: str) -> bool:
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if ":" not in host and not _IPV4.fullmatch(host):
        return False
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


@lru_cache(maxsize=1 << 17)
def registered_domain(host: str) -> str:
    """The registered domain (eTLD+1) of ``host`` per the PSL algorithm, lowercase.

    * ICANN and private PSL sections both count (``foo.blogspot.com`` is its own domain),
      as the official PSL test vectors expect.
    * An unlisted TLD follows the default ``*`` rule: ``a.b.example`` -> ``b.example``.
    * IP literals (IPv4 dotted, IPv6 with or without brackets) and ``localhost`` are
      returned as given (lowercased): they are their own "domain".
    * Raises :class:`InvalidDomain` when there is no registrable domain: a public suffix
      alone (``com``, ``co.uk``, a single unlisted label), an empty host, a leading dot or
      an empty label.

    Unicode input gives Unicode output and punycode gives punycode (labels are kept as
    given); :func:`canonicalize` always passes punycode. Cached per host (LRU, 131072).
    """
    if not isinstance(host, str) or not host:
        raise InvalidDomain(f"expected a host name, got {host!r}")
    host = host.lower()
    if host.endswith("."):
        host = host[:-1]
    if _ip_literal(host) or host == _LOCALHOST:
        return host
    if not host or host.startswith(".") or ".." in host or _BAD_HOST_CHARS.search(host):
        raise InvalidDomain(
            f"expected a host name like 'www.example.com', got {host!r}: empty label or forbidden character"
        )
    result = _EXTRACTOR.extract_str(host, include_psl_private_domains=True)
    if not result.suffix:
        # Unlisted TLD: the PSL default rule "*" makes the last label the public suffix.
        labels = host.split(".")
        if len(labels) < 2:
            raise InvalidDomain(
                f"{host!r} is a single label (a TLD by the PSL default rule), not a registrable domain"
            )
        return ".".join(labels[-2:])
    if not result.domain:
        raise InvalidDomain(
            f"{host!r} is a public suffix, not a registrable domain; expected a name under it"
        )
    return f"{result.domain}.{result.suffix}"


@lru_cache(maxsize=1 << 17)
def registered_domain_or_host(host: str) -> str:
    """registered_domain(host), or the host itself when it is a public suffix / single label.

    This is the fallback :func:`canonicalize` uses so that every fetchable host (``http://ai/``,
    an intranet ``http://wiki/``) still has a domain to partition by.
    """
    try:
        return registered_domain(host)
    except InvalidDomain:
        return host
