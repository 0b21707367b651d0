"""Seeds of a crawl: ``--seeds`` values (URLs or files of URLs) into DiscoveredUrl events."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from crawlstream.errors import ConfigError, InvalidUrl
from crawlstream.events import DiscoveredUrl, EventProducer
from crawlstream.topics import URLS_DISCOVERED
from crawlstream.urls import canonicalize, url_key

__all__ = ["read_seeds", "seed_events", "send_seeds"]

logger = logging.getLogger(__name__)


def _is_url(spec: str) -> bool:
    return "://" in spec


def read_seeds(specs: Sequence[str]) -> list[str]:
    """The URLs named by ``specs``, in order, without duplicates.

    A spec containing ``://`` is a URL; anything else is a file with one URL per line
    (blank lines and lines starting with ``#`` are ignored). A missing file is a
    ``ConfigError``; a malformed URL is skipped with a warning (one bad line of a big seed
    list should not stop a crawl).
    """
    raw: list[str] = []
    for spec in specs:
        if _is_url(spec):
            raw.append(spec)
            continue
        path = Path(spec)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(
                f"--seeds {spec!r} is neither a URL (scheme://...) nor a readable file ({exc}); "
                "give a URL or a file with one URL per line"
            ) from exc
        raw.extend(line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#"))
    urls: list[str] = []
    skipped = 0
    for text in raw:
        try:
            urls.append(canonicalize(text).url)
        except InvalidUrl as exc:
            skipped += 1
            if skipped == 1:
                logger.warning("seed %r skipped: %s", text, exc)
    if skipped:
        logger.warning("%d malformed seed URLs skipped", skipped)
    return list(dict.fromkeys(urls))


def seed_events(urls: Iterable[str], now_ms: int, dataset_id: int | None) -> list[DiscoveredUrl]:
    """Depth-0 ``source="seed"`` events; they go through dedupe like any URL, so re-seeding a
    resumed crawl forwards nothing new."""
    events = []
    for url in urls:
        canonical = canonicalize(url)
        events.append(
            DiscoveredUrl(
                url=canonical.url,
                domain=canonical.domain,
                url_key=url_key(canonical),
                depth=0,
                discovered_at_ms=now_ms,
                source="seed",
                dataset_id=dataset_id,
            )
        )
    return events


def send_seeds(out: EventProducer, urls: Sequence[str], dataset_id: int | None) -> None:
    """Send the seed events to ``urls.discovered`` and flush: a seed reported sent is on the bus."""
    for event in seed_events(urls, int(time.time() * 1000), dataset_id):
        out.send(URLS_DISCOVERED, event)
    out.flush()
    logger.info("seeded %d URLs to %s", len(urls), URLS_DISCOVERED)
