"""Seeds of a crawl: URLs, files of URLs (plain or gzip) and stdin into ``urls.discovered``.

Two entry points:

* ``read_seeds`` / ``send_seeds`` (here): the few seeds of ``crawlstream run --seeds`` (a list in
  memory).
* ``SeedIntake`` (``_seed_intake``): bulk seeding for ``crawlstream seed`` (millions of lines):
  streamed in 1 MiB chunks (``_seed_inputs``: memory does not grow with the input), every line
  counted by outcome (``_seed_report``: ``sent``, ``duplicate``, ``invalid`` by reason, blank
  and comment lines skipped), values encoded by a ``SeedEncoder`` (``_seed_encoder``) and
  produced straight to the bus producer by ``crawlstream.events.AvroPublisher``. Why each step
  is shaped the way it is, with measurements: docs/decisions/023-bulk-seeding-and-scalable-filter.md.

A line ``URL N`` (whitespace, then an integer 0..2**31-1 ending the line) gives that URL the
scheduling priority N (ADR 016; ``split_priority``).

Seeds pass through dedupe like any discovered URL, so re-seeding forwards nothing new; the
intake drops only duplicates it sees within a bounded window of recent URLs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from crawlstream.crawl._seed_inputs import is_url_spec
from crawlstream.errors import ConfigError, InvalidUrl
from crawlstream.events import DiscoveredUrl, EventProducer, UrlRecord
from crawlstream.frontier import MAX_PRIORITY
from crawlstream.topics import URLS_DISCOVERED, URLS_RECORDS
from crawlstream.urls import canonicalize, url_key

__all__ = [
    "check_priority",
    "raw_form_records",
    "read_seeds",
    "seed_events",
    "send_seeds",
    "split_priority",
]

logger = logging.getLogger(__name__)


def check_priority(priority: int | None) -> int | None:
    """A seed priority as sent: None for None and 0 (normal), the value for 1..2**31-1;
    ``ConfigError`` otherwise (``DiscoveredUrl.priority`` is an Avro int, higher first)."""
    if priority is None or priority == 0:
        return None
    if not isinstance(priority, int) or not 0 < priority <= MAX_PRIORITY:
        raise ConfigError(f"seed priority must be an integer 0..{MAX_PRIORITY} (0 = normal), found {priority!r}")
    return priority


def split_priority(line: str) -> tuple[str, int | None]:
    """``"URL N"`` -> (``"URL"``, N): a seed line's own priority (whitespace, then an integer
    ending the line; 0 = normal, which overrides ``--priority``); other lines -> (line, None).
    ``ValueError`` for an integer outside 0..2**31-1."""
    parts = line.rsplit(None, 1)
    if len(parts) == 2:
        tail = parts[1]
        digits = tail[1:] if tail[:1] in ("+", "-") else tail
        if digits.isdigit() and digits.isascii():
            if len(digits) > 10 or not 0 <= int(tail) <= MAX_PRIORITY:
                raise ValueError(f"priority {tail} is outside 0..{MAX_PRIORITY}")
            return parts[0], int(tail)
    return line, None


def read_seeds(
    specs: Sequence[str], *, raw: bool = False, priorities: dict[str, int] | None = None
) -> list[str]:
    """The URLs named by ``specs``, in order, without duplicates (for a few seeds; see ``SeedIntake``);
    ``raw``: each URL as written (stripped; the first of equal canonical forms), so that
    :func:`send_seeds` records the raw forms (docs/decisions/024-url-provenance.md).

    A spec containing ``://`` is a URL; anything else is a file with one URL per line
    (blank lines and lines starting with ``#`` are ignored); a line ``URL N`` gives that URL
    priority N (``split_priority``), put in ``priorities`` under the URL as returned. A missing
    file is a ``ConfigError``; a malformed URL or priority is skipped with a warning (one bad
    line of a big seed list should not stop a crawl).
    """
    lines: list[str] = []
    for spec in specs:
        if is_url_spec(spec):
            lines.append(spec)
            continue
        path = Path(spec)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(
                f"--seeds {spec!r} is neither a URL (scheme://...) nor a readable file ({exc}); "
                "give a URL or a file with one URL per line"
            ) from exc
        lines.extend(line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#"))
    urls: dict[str, str] = {}  # canonical form -> the first form as written
    line_priority: dict[str, int] = {}  # canonical form -> the priority of its first line
    skipped = 0
    for line in lines:
        try:
            text, priority = split_priority(line)
            canonical = canonicalize(text).url
        except (InvalidUrl, ValueError) as exc:
            skipped += 1
            if skipped == 1:
                logger.warning("seed %r skipped: %s", line, exc)
            continue
        if canonical not in urls:
            urls[canonical] = text.strip()
            if priority:
                line_priority[canonical] = priority
    if skipped:
        logger.warning("%d malformed seed URLs skipped", skipped)
    if priorities is not None:
        priorities.update((urls[c] if raw else c, p) for c, p in line_priority.items())
    return list(urls.values()) if raw else list(urls)


def seed_events(
    urls: Iterable[str],
    now_ms: int,
    dataset_id: int | None,
    *,
    source: str = "seed",
    priorities: Mapping[str, int] | None = None,
) -> list[DiscoveredUrl]:
    """Depth-0 events of ``source``: seeds go through dedupe like any URL, so re-seeding a
    resumed crawl forwards nothing new; ``crawlstream refetch`` sends its own to the frontier.
    ``priorities``: ``DiscoveredUrl.priority`` by URL as given (absent = normal)."""
    priorities = priorities or {}
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
                source=source,
                dataset_id=dataset_id,
                priority=priorities.get(url),
                raw_url=url if url != canonical.url else None,
            )
        )
    return events


def raw_form_records(urls: Iterable[str], now_ms: int) -> list[UrlRecord]:
    """The alias map's rows (ADR 024) of seeds written in a non-canonical form: the parquet sink
    keeps each as its canonical URL's row of the raw-forms dataset. Canonical seeds: none."""
    # Imported here: crawlstream.lake imports pyarrow, which a crawl worker never needs (~0.1 s).
    from crawlstream.lake import RAW_FORMS_DATASET, raw_form_extras

    out = []
    for text in urls:
        canonical = canonicalize(text)
        if canonical.url != text:
            extras = raw_form_extras(text, "seed")
            out.append(UrlRecord(RAW_FORMS_DATASET, text, now_ms, extras, canonical.domain))
    return out


def send_seeds(
    out: EventProducer, urls: Sequence[str], dataset_id: int | None, priorities: Mapping[str, int] | None = None
) -> None:
    """Send the seed events to ``urls.discovered`` (and the raw forms of seeds not written
    canonically to ``urls.records``) and flush: a seed reported sent is on the bus."""
    now_ms = int(time.time() * 1000)
    for event in seed_events(urls, now_ms, dataset_id, priorities=priorities):
        out.send(URLS_DISCOVERED, event)
    for record in raw_form_records(urls, now_ms):
        out.send(URLS_RECORDS, record)
    out.flush()
    logger.info("seeded %d URLs to %s", len(urls), URLS_DISCOVERED)
