"""The fetch tests' fetcher: pointed at a demo web on loopback, and only at it."""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any

from crawlstream.devtools.demoweb import DemoWeb
from crawlstream.fetch import Fetcher
from crawlstream.settings import FetchSettings

UA = "crawlstream-test/1.0"


def demo_fetcher(web: DemoWeb, **kw: Any) -> Fetcher:
    """A fetcher of ``web`` (every other host fails as DNS); ``kw`` overrides the defaults
    (``fetch.*`` settings, or the fetcher's other parameters)."""
    config = FetchSettings(
        user_agent=UA, allow_private_networks=True, timeout_s=5.0, read_timeout_s=1.0, max_body_bytes=256 * 1024
    )
    settings = {f.name for f in fields(FetchSettings)}
    config = replace(config, **{k: v for k, v in kw.items() if k in settings})
    opts: dict[str, Any] = dict(resolve_map=web.resolve_map, resolve_map_only=True)
    opts.update((k, v) for k, v in kw.items() if k not in settings)
    return Fetcher(config=config, **opts)
