"""Which discovered URLs a crawl keeps: allowed registered domains and a depth limit (pure)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from crawlstream.urls import CanonicalUrl, registered_domain_or_host

if TYPE_CHECKING:
    from crawlstream.settings import Settings

__all__ = ["Scope"]


@dataclass(frozen=True)
class Scope:
    """``allowed_domains`` None = every domain; ``max_depth`` None = unlimited (seeds are depth 0)."""

    allowed_domains: frozenset[str] | None = None
    max_depth: int | None = None

    @classmethod
    def from_settings(cls, settings: Settings, allowed_domains: frozenset[str] | None = None) -> Scope:
        return cls(allowed_domains, settings.scheduler.max_depth)

    def allows(self, url: CanonicalUrl | str, depth: int) -> bool:
        if self.max_depth is not None and depth > self.max_depth:
            return False
        if self.allowed_domains is None:
            return True
        if isinstance(url, CanonicalUrl):
            domain = url.domain
        else:
            domain = registered_domain_or_host(urlsplit(url).hostname or "")
        return domain in self.allowed_domains
