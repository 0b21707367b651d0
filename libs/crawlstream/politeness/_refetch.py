"""URLs an operator wants fetched again, past dedupe (``crawlstream refetch``, ADR 022).

A quarantined page, or one a user wants fresh, was seen by the deduper already: its Bloom
filter drops every URL it has seen, forever. So these URLs go straight to ``urls.frontier``
(the scheduler's input) as ``DiscoveredUrl`` events with source ``refetch``; the scheduler
enqueues them unconditionally (validators of a revisit waiting for the URL are forgotten, so
the fetch asks for the whole page). Politeness, robots.txt and the page budget apply as to
any URL. The body fetched replaces the stored one (the store keeps one instance per URL).

Reading is lenient per line and strict per file: a line that is not a URL is counted under
its reason and skipped; a file that cannot be read stops everything before anything is sent.
"""

from __future__ import annotations

import gzip
import io
import sys
import time
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from crawlstream.errors import ConfigError, InvalidUrl
from crawlstream.events import EventProducer
from crawlstream.topics import URLS_FRONTIER
from crawlstream.urls import canonicalize

__all__ = ["REFETCH_SOURCE", "RefetchBatch", "read_refetch_urls", "send_refetch"]

REFETCH_SOURCE = "refetch"
"""``DiscoveredUrl.source`` of a URL sent past dedupe: the scheduler fetches it unconditionally."""

_GZIP_MAGIC = b"\x1f\x8b"
_MAX_LINE_BYTES = 64 * 1024


@dataclass
class RefetchBatch:
    """What ``read_refetch_urls`` found: ``urls`` canonical, in first-seen order, each once;
    ``invalid`` counts rejected lines by reason (``utf8``, ``too_long``, or the
    ``InvalidUrl.reason`` of the canonicalizer: ``scheme``, ``host``, ``port`` ...)."""

    urls: list[str] = field(default_factory=list)
    lines: int = 0
    duplicates: int = 0
    invalid: Counter[str] = field(default_factory=Counter)

    def summary(self) -> dict[str, object]:
        return {
            "lines": self.lines,
            "urls": len(self.urls),
            "duplicates": self.duplicates,
            "invalid": dict(sorted(self.invalid.items())),
        }


def _lines(spec: str, stdin: IO[bytes] | None) -> Iterator[bytes]:
    """Raw lines of a file (gzip by content, not by name) or of stdin (``-``)."""
    if spec == "-":
        given = stdin if stdin is not None else sys.stdin.buffer
        stream = given if isinstance(given, io.BufferedReader) else io.BufferedReader(given)  # type: ignore[type-var]
        gzipped = stream.peek(2)[:2] == _GZIP_MAGIC
        yield from (gzip.GzipFile(fileobj=stream) if gzipped else stream)
        return
    path = Path(spec)
    try:
        with open(path, "rb") as raw:
            gzipped = raw.read(2) == _GZIP_MAGIC
            raw.seek(0)
            yield from (gzip.GzipFile(fileobj=raw) if gzipped else raw)
    except OSError as exc:
        raise ConfigError(
            f"{spec!r} is neither a URL (scheme://...) nor a readable file of URLs ({exc}); "
            "give URLs, files with one URL per line (gzip allowed), or - for stdin"
        ) from exc


def read_refetch_urls(specs: Sequence[str], stdin: IO[bytes] | None = None) -> RefetchBatch:
    """The URLs named by ``specs``: a spec containing ``://`` is a URL, ``-`` is stdin, anything
    else a file with one URL per line (gzip-compressed or not). Blank lines and lines starting
    with ``#`` are ignored. Raises ``ConfigError`` for an unreadable or damaged file."""
    batch = RefetchBatch()
    seen: set[str] = set()
    for spec in specs:
        texts: Iterable[bytes] = [spec.encode("utf-8", "surrogateescape")] if "://" in spec else _lines(spec, stdin)
        try:
            for raw in texts:
                _take(raw, batch, seen)
        except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
            raise ConfigError(
                f"{spec!r}: the gzip stream is damaged ({exc}); nothing was sent. Check it with "
                "`gzip -t` and send the readable part uncompressed"
            ) from exc
    return batch


def _take(raw: bytes, batch: RefetchBatch, seen: set[str]) -> None:
    line = raw.strip()
    if not line or line.startswith(b"#"):
        return
    batch.lines += 1
    if len(line) > _MAX_LINE_BYTES:
        batch.invalid["too_long"] += 1
        return
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        batch.invalid["utf8"] += 1
        return
    try:
        url = canonicalize(text).url
    except InvalidUrl as exc:
        batch.invalid[exc.reason] += 1
        return
    if url in seen:
        batch.duplicates += 1
        return
    seen.add(url)
    batch.urls.append(url)


def send_refetch(out: EventProducer, urls: Sequence[str], dataset_id: int | None) -> int:
    """Send ``urls`` to ``urls.frontier`` and flush: a URL reported sent is on the bus."""
    from crawlstream.crawl._seeds import seed_events  # the same depth-0 events, another source

    events = seed_events(urls, int(time.time() * 1000), dataset_id, source=REFETCH_SOURCE)
    for event in events:
        out.send(URLS_FRONTIER, event)
    out.flush()
    return len(events)
