"""The fetch tests' fetcher: pointed at a demo web on loopback, and only at it."""

from __future__ import annotations

from typing import Any

from crawlstream.devtools.demoweb import DemoWeb
from crawlstream.fetch import Fetcher

UA = "crawlstream-test/1.0"


def demo_fetcher(web: DemoWeb, **kw: Any) -> Fetcher:
    """A fetcher of ``web`` (every other host fails as DNS); ``kw`` overrides the defaults."""
    opts: dict[str, Any] = dict(
        user_agent=UA,
        allow_private_networks=True,
        resolve_map=web.resolve_map,
        resolve_map_only=True,
        timeout_s=5.0,
        read_timeout_s=1.0,
        max_body_bytes=256 * 1024,
    )
    opts.update(kw)
    return Fetcher(**opts)
