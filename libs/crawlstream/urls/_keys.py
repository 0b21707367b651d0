"""url_key: the int63 identity of a canonical URL (seed "URL keys README", exact).

Layout, most significant bit first::

    bit 63      0 (so the key fits a signed 64-bit column)
    bits 56-62  domain_checksum(registered domain), 7 bits
    bits 0-55   fnv1a_64(UTF-8 of the canonical URL) & (2**56 - 1)

Pure: no I/O. 56 bits collide (about 7 pairs per 1e9 URLs): stores keep the URL next to
the key and compare it.
"""

from __future__ import annotations

from collections.abc import Iterable

from crawlstream.errors import InvalidUrl

from ._canonical import CanonicalUrl, canonicalize
from ._hashing import KEY_HASH_MASK, domain_checksum, fnv1a_64

__all__ = ["canonical_url_key", "compose_key", "url_key", "url_keys"]


def compose_key(checksum: int, url_hash: int) -> int:
    """Assemble a key from a 7-bit checksum and a (64-bit) URL hash."""
    return ((checksum & 0x7F) << 56) | (url_hash & KEY_HASH_MASK)


def canonical_url_key(domain: str, url: str) -> int:
    """The url_key of an already canonical ``url`` whose registered domain is ``domain`` (no parse)."""
    return compose_key(domain_checksum(domain), fnv1a_64(url.encode("utf-8")))


def url_key(url: str | CanonicalUrl) -> int:
    """The url_key of ``url``; a ``str`` is canonicalized first (may raise InvalidUrl)."""
    canon = url if isinstance(url, CanonicalUrl) else canonicalize(url)
    return canonical_url_key(canon.domain, canon.url)


def url_keys(urls: Iterable[str | CanonicalUrl]) -> list[int | None]:
    """Keys of many URLs at once; None where a URL is invalid (batch jobs count those)."""
    keys: list[int | None] = []
    append = keys.append
    for url in urls:
        try:
            append(url_key(url))
        except InvalidUrl:
            append(None)
    return keys
