"""Which sitemaps a host has, from its robots.txt policy (pure)."""

from __future__ import annotations

from crawlstream.robots import RobotsPolicy

__all__ = ["MAX_ROBOTS_SITEMAPS", "robots_sitemaps"]

MAX_ROBOTS_SITEMAPS = 100
"""``Sitemap:`` lines kept from one robots.txt: a FetchResult carries them, so a hostile
robots.txt of 500 KiB of such lines must not make every result of its host that big."""


def robots_sitemaps(origin: str, policy: RobotsPolicy) -> tuple[str, ...]:
    """The ``Sitemap:`` URLs of ``origin``'s robots.txt (as written: the link extractor
    canonicalizes and scopes them like links), or ``<origin>/sitemap.xml`` when it names none.

    Nothing when robots.txt disallows everything (5xx, RFC 9309): no request would be made.
    """
    if policy.kind == "disallow_all":
        return ()
    declared = tuple(dict.fromkeys(s.strip() for s in policy.sitemaps if s.strip()))[:MAX_ROBOTS_SITEMAPS]
    return declared or (f"{origin}/sitemap.xml",)
