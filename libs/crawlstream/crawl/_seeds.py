"""Seeds of a crawl: URLs, files of URLs (plain or gzip) and stdin into ``urls.discovered``.

Two entry points:

* ``read_seeds`` / ``send_seeds``: the few seeds of ``crawlstream run --seeds`` (a list in memory).
* ``SeedIntake``: bulk seeding for ``crawlstream seed`` (millions of lines): streamed in 1 MiB
  chunks (memory does not grow with the input), every line counted by outcome (``sent``,
  ``duplicate``, ``invalid`` by reason, blank and comment lines skipped), values encoded by a
  ``SeedEncoder`` and produced straight to the bus producer. Why each step is shaped the way
  it is, with measurements: docs/decisions/023-bulk-seeding-and-scalable-filter.md. A line
  ``URL N`` (whitespace, then an integer 0..2**31-1 ending the line) gives that URL the
  scheduling priority N (ADR 016).

Seeds pass through dedupe like any discovered URL, so re-seeding forwards nothing new; the
intake drops only duplicates it sees within a bounded window of recent URLs.
"""

from __future__ import annotations

import gzip
import io
import logging
import os
import stat
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, TextIO

from crawlstream.errors import ConfigError, InvalidUrl
from crawlstream.events import DiscoveredUrl, EventCodec, EventProducer, UrlRecord
from crawlstream.frontier import MAX_PRIORITY
from crawlstream.topics import URLS_DISCOVERED, URLS_RECORDS
from crawlstream.urls import KEY_HASH_MASK, MAX_URL_LENGTH, canonicalize, domain_checksum, fnv1a_64, url_key

__all__ = [
    "SeedEncoder",
    "SeedIntake",
    "SeedProgress",
    "SeedReport",
    "SeedSource",
    "UrlRecordPublisher",
    "check_priority",
    "open_seed_sources",
    "read_seeds",
    "seed_events",
    "send_seeds",
    "split_priority",
]

logger = logging.getLogger(__name__)

_CHUNK_BYTES = 1 << 20
_MAX_LINE_BYTES = 4 * MAX_URL_LENGTH + 1024
"""A line longer than this (UTF-8 bytes) cannot canonicalize: dropped unread as ``length``."""
_GZIP_MAGIC = b"\x1f\x8b"
_REPORT_EVERY = 8192
"""Lines between two updates of the report's counts and the progress display."""
_BOM = b"\xef\xbb\xbf"
_SURROGATES = "surrogatepass"


def _is_url(spec: str) -> bool:
    return "://" in spec


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
        if _is_url(spec):
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
    from crawlstream.lake._aliases import RAW_FORMS_DATASET, raw_form_extras

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


# ---------------------------------------------------------------------------------------------
# Avro values of seed events, precompiled


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


# 14 bits as two varint bytes that both continue; the top byte of a >= 2**56 zigzag value.
_NINE_GROUPS = 1 << 56
_PAIRS = [bytes(((x & 0x7F) | 0x80, ((x >> 7) & 0x7F) | 0x80)) for x in range(1 << 14)]
_TOPS = [_varint(y) for y in range(256)]
_LENGTHS = [_varint(2 * n) for n in range(4 * MAX_URL_LENGTH + 1)]
_MAX_LENGTH = len(_LENGTHS)


def avro_long(n: int) -> bytes:
    """Avro ``long`` (or ``int``): zigzag, then a base-128 varint, least significant group first.

    A url_key with a non-zero domain checksum (127 of 128 domains) is >= 2**56, so its zigzag
    form has nine full 7-bit groups: four table lookups of 14 bits each and one of the top
    byte (~0.35 us instead of ~1 us for the loop).
    """
    z = (n << 1) ^ (n >> 63)
    if z < _NINE_GROUPS:
        return _varint(z)
    return _PAIRS[z & 0x3FFF] + _PAIRS[(z >> 14) & 0x3FFF] + _PAIRS[(z >> 28) & 0x3FFF] + \
        _PAIRS[(z >> 42) & 0x3FFF] + _TOPS[z >> 56]


def avro_string(data: bytes) -> bytes:
    """Avro ``string`` / ``bytes``: the length as a ``long``, then the bytes."""
    n = len(data)
    return (_LENGTHS[n] if n < _MAX_LENGTH else _varint(2 * n)) + data


class SeedEncoder:
    """Wire values of depth-0 seed ``DiscoveredUrl`` events, without building an event per URL.

    Every field but ``url``, ``domain`` and ``url_key`` (the first three in the schema) and
    ``raw_url`` (the last) is the same for all seeds of a run, so their Avro bytes are encoded
    once by the codec (the template) and each value is ``header + url + domain + url_key +
    template tail``, the tail ending in ``raw_url``: null, or the seed line as written when it
    is not canonical (ADR 024). The constructor checks the result against the codec on probe
    events and falls back to the codec for every value if they ever differ (another field
    order, a registry schema).
    """

    def __init__(
        self,
        codec: EventCodec,
        now_ms: int,
        dataset_id: int | None,
        topic: str = URLS_DISCOVERED,
        priority: int | None = None,
    ) -> None:
        self._codec = codec
        self._topic = topic
        self._now_ms = now_ms
        self._dataset_id = dataset_id
        self.priority = priority  # DiscoveredUrl.priority of every seed (None = normal)
        empty = codec.encode(self._event("", "", 0, None), topic)
        with_raw = codec.encode(self._event("", "", 0, ""), topic)
        # header (5 bytes), then "" (0x00), "" (0x00), 0 (0x00), then the constant fields and
        # raw_url: null (0x00) or union branch 1 (0x02) and a string ("": 0x00).
        self._header, self._tail = empty[:5], empty[8:]
        self._raw_tail = with_raw[8:-1]
        self.precompiled = True
        probes = [
            self._event("http://xn--bcher-kva.example/\u00e9?q=1", "xn--bcher-kva.example",
                        (93 << 56) | 0xABCDEF0123456, None),
            self._event("http://a.example/", "a.example", 5, "HTTP://A.example"),
        ]
        self.precompiled = (
            empty[5:8] == b"\x00\x00\x00"
            and with_raw.endswith(b"\x02\x00")
            and all(self.encode(e.url, e.domain, e.url_key, e.raw_url) == codec.encode(e, topic) for e in probes)
        )
        if not self.precompiled:
            logger.warning("seed values are encoded by the codec: the DiscoveredUrl schema's field order changed")

    def _event(self, url: str, domain: str, key: int, raw_url: str | None) -> DiscoveredUrl:
        return DiscoveredUrl(
            url=url, domain=domain, url_key=key, depth=0, discovered_at_ms=self._now_ms, source="seed",
            dataset_id=self._dataset_id, priority=self.priority, raw_url=raw_url,
        )

    def domain_part(self, domain: str) -> bytes:
        """The Avro bytes of ``domain`` (a seed list repeats domains: callers cache this)."""
        return avro_string(domain.encode("utf-8"))

    def encode_parts(self, url_utf8: bytes, domain_part: bytes, key: int, raw_url: str | None = None) -> bytes:
        """``encode`` from the URL's UTF-8 bytes and a ``domain_part``; only when ``precompiled``."""
        n = len(url_utf8)
        return b"".join(
            (
                self._header,
                _LENGTHS[n] if n < _MAX_LENGTH else _varint(2 * n),
                url_utf8,
                domain_part,
                avro_long(key),
                self._tail if raw_url is None else self._raw_tail + avro_string(raw_url.encode("utf-8", _SURROGATES)),
            )
        )

    def encode(self, url: str, domain: str, key: int, raw_url: str | None = None) -> bytes:
        """The wire value of the seed event of canonical ``url`` in ``domain`` with ``key``
        (``raw_url``: the line as written, when it is not ``url``)."""
        if self.precompiled:
            return self.encode_parts(url.encode("utf-8", "surrogatepass"), self.domain_part(domain), key, raw_url)
        return self._codec.encode(self._event(url, domain, key, raw_url), self._topic)


_RECORD_PROBES = (
    UrlRecord(7, "http://a.example/x?y=1", 1_700_000_000_000, {"status": "200"}, "a.example"),
    UrlRecord(2**31 - 1, "http://xn--bcher-kva.example/\u00e9", None, {}, "xn--bcher-kva.example"),
    UrlRecord(0, "http://b.example/", -5, {"target": "http://c.example/", "status": "301"}, "b.example"),
)


class UrlRecordPublisher:
    """One ``UrlRecord`` per call onto ``topic`` with ``headers``, as ``EventProducer.send``
    would put it (value, key, partition), from precompiled parts: the bulk seeding's raw
    forms and the PostgreSQL migration's lake rows (``publish`` of ``PostgresMigrator``).

    ``EventProducer.send`` of a ``UrlRecord`` costs ~15 us (a dict per record, fastavro's
    generic writer, type and domain checks); the value is assembled from Avro primitives
    instead (~3 us). The constructor checks the bytes against the codec on probe records and
    falls back to ``EventProducer.send`` if they ever differ. ``flush`` makes them durable."""

    def __init__(
        self,
        out: EventProducer,
        codec: EventCodec,
        headers: Sequence[tuple[str, bytes]] = (),
        topic: str = URLS_RECORDS,
    ) -> None:
        self._out = out
        self._topic = topic
        self._headers = list(headers)
        self._header = codec.encode(_RECORD_PROBES[0], topic)[:5]
        self._partitions = out.partition_count(topic)
        self._domains: dict[str, tuple[bytes, bytes, int]] = {}
        self._extras: dict[tuple[tuple[str, str], ...], bytes] = {}
        self._datasets: dict[int, bytes] = {}  # header + dataset_id: a migration writes two ids
        self.precompiled = True
        self.precompiled = all(
            self._value(p.dataset_id, p.url, p.domain or "", p.ts_ms, p.extras) == codec.encode(p, topic)
            for p in _RECORD_PROBES
        )
        if not self.precompiled:
            logger.warning("urls.records values are encoded by the codec: the UrlRecord schema's field order changed")

    def _domain(self, domain: str) -> tuple[bytes, bytes, int]:
        info = self._domains.get(domain)
        if info is None:
            if len(self._domains) >= 1 << 16:
                self._domains.clear()
            key = domain.encode("utf-8")
            info = self._domains[domain] = (key, b"\x02" + avro_string(key), domain_checksum(domain) % self._partitions)
        return info

    def _map(self, extras: Mapping[str, str]) -> bytes:
        if not extras:
            return b"\x00"
        items = tuple(extras.items())
        data = self._extras.get(items)
        if data is None:
            parts = [avro_long(len(items))]
            for name, value in items:
                parts.append(avro_string(name.encode("utf-8")))
                parts.append(avro_string(value.encode("utf-8", "surrogatepass")))
            parts.append(b"\x00")
            data = b"".join(parts)
            if len(self._extras) < 4096:  # statuses repeat; redirect targets do not
                self._extras[items] = data
        return data

    def _value(self, dataset_id: int, url: str, domain: str, ts_ms: int | None, extras: Mapping[str, str]) -> bytes:
        return self._row(dataset_id, url, ts_ms, self._map(extras) + self._domain(domain)[1])

    def _row(self, dataset_id: int, url: str, ts_ms: int | None, tail: bytes) -> bytes:
        """A record's value: the header and dataset id (cached), the URL, the time, then ``tail``
        (the encoded extras map and domain, which callers cache per domain)."""
        head = self._datasets.get(dataset_id)
        if head is None:
            head = self._datasets[dataset_id] = self._header + avro_long(dataset_id)
        time_part = b"\x00" if ts_ms is None else b"\x02" + avro_long(ts_ms)
        return b"".join((head, avro_string(url.encode("utf-8", "surrogatepass")), time_part, tail))

    def __call__(self, dataset_id: int, url: str, domain: str, ts_ms: int | None, extras: dict[str, str]) -> None:
        if not self.precompiled:
            self._out.send(self._topic, UrlRecord(dataset_id, url, ts_ms, extras, domain), headers=self._headers)
            return
        key, _, partition = self._domain(domain)
        self._out.producer.produce(
            self._topic,
            self._value(dataset_id, url, domain, ts_ms, extras),
            partition=partition,
            key=key,
            headers=self._headers,
        )

    def flush(self) -> None:
        self._out.flush()


# ---------------------------------------------------------------------------------------------
# Inputs


@dataclass
class SeedSource:
    """One input of a bulk seeding: a URL argument, a file (plain or gzip, detected by its
    magic bytes) or ``-`` (stdin). ``size_bytes`` is its size on disk (compressed), None when
    unknown (a pipe); progress and ETA count bytes of it as they are read."""

    spec: str
    size_bytes: int | None

    @property
    def is_url(self) -> bool:
        return _is_url(self.spec)


def open_seed_sources(specs: Sequence[str]) -> list[SeedSource]:
    """Check every input before anything is sent: ``ConfigError`` names a missing/unreadable file."""
    sources = []
    for spec in specs:
        if _is_url(spec):
            sources.append(SeedSource(spec, None))
            continue
        if spec == "-":
            try:
                st = os.fstat(sys.stdin.fileno())
                size = st.st_size if stat.S_ISREG(st.st_mode) else None
            except (OSError, ValueError, io.UnsupportedOperation):
                size = None
            sources.append(SeedSource(spec, size))
            continue
        path = Path(spec)
        try:
            st = path.stat()
            if not stat.S_ISREG(st.st_mode) and not stat.S_ISFIFO(st.st_mode):
                raise IsADirectoryError(f"{spec} is not a regular file")
            if not os.access(path, os.R_OK):
                raise PermissionError(f"{spec} is not readable")
        except OSError as exc:
            raise ConfigError(
                f"seed input {spec!r} is neither a URL (scheme://...), '-' (stdin) nor a readable file ({exc}); "
                "give URLs, files of one URL per line (gzip allowed) or '-'"
            ) from exc
        sources.append(SeedSource(spec, st.st_size if stat.S_ISREG(st.st_mode) else None))
    return sources


class _Lines:
    """The raw lines (bytes, newline removed) of one binary stream, read in 1 MiB chunks.

    A line longer than ``_MAX_LINE_BYTES`` is never held whole: it is dropped as it streams
    past and counted in ``overlong``. ``position`` reports bytes consumed of the underlying
    (possibly compressed) file for progress.
    """

    def __init__(self, stream: BinaryIO, position: Callable[[], int]) -> None:
        self._stream = stream
        self.position = position
        self.overlong = 0

    def __iter__(self) -> Iterator[bytes]:
        # read1: at most one read of the file per call, so the lines before a corrupt or
        # truncated gzip tail come out before the error does (read(n) would lose them).
        read = getattr(self._stream, "read1", self._stream.read)
        carry = b""
        skipping = False  # inside an overlong line: drop up to the next newline
        first = True
        while chunk := read(_CHUNK_BYTES):
            if first:
                first = False
                if chunk.startswith(_BOM):
                    chunk = chunk[len(_BOM):]
            lines = chunk.split(b"\n")
            if skipping:
                if len(lines) == 1:
                    continue
                lines[0] = b""
                skipping = False
            else:
                lines[0] = carry + lines[0]
            carry = lines.pop()
            if len(carry) > _MAX_LINE_BYTES:
                carry = b""
                skipping = True
                self.overlong += 1
            yield from lines
        if carry:
            yield carry


# ---------------------------------------------------------------------------------------------
# Report and progress


@dataclass
class SeedReport:
    """What became of every input line: each non-blank, non-comment line lands in exactly one
    of ``sent``, ``duplicate`` (seen within the recent-URL window), ``invalid`` (by reason)."""

    lines: int = 0
    sent: int = 0
    duplicate: int = 0
    invalid_by_reason: Counter[str] = field(default_factory=Counter)
    blank: int = 0
    comments: int = 0
    inputs: int = 0
    raw_forms: int = 0
    """Seeds not written canonically whose raw form went to ``urls.records`` (ADR 024)."""
    seconds: float = 0.0

    @property
    def invalid(self) -> int:
        return sum(self.invalid_by_reason.values())

    def add(self, lines: int, sent: int, duplicate: int, blank: int, comments: int) -> None:
        self.lines += lines
        self.sent += sent
        self.duplicate += duplicate
        self.blank += blank
        self.comments += comments

    def to_json(self) -> dict[str, Any]:
        return {
            "seeded": self.sent,
            "lines": self.lines,
            "outcomes": {"sent": self.sent, "duplicate": self.duplicate, "invalid": self.invalid},
            "invalid_by_reason": dict(self.invalid_by_reason.most_common()),
            "skipped": {"blank": self.blank, "comment": self.comments},
            "raw_forms": self.raw_forms,
            "inputs": self.inputs,
            "seconds": round(self.seconds, 3),
            "urls_per_s": round(self.lines / self.seconds) if self.seconds > 0 else 0,
        }


def _clock(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600:d}:{s // 60 % 60:02d}:{s % 60:02d}"


class SeedProgress:
    """Progress of a seeding on ``stream`` (stderr): on a terminal one line redrawn in place
    every ``interval_s`` (default 0.25 s), otherwise a plain line every 5 s; ETA when the
    input's size is known."""

    def __init__(
        self,
        stream: TextIO,
        total_bytes: int | None,
        *,
        interval_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stream = stream
        try:
            self.tty = stream.isatty()
        except (AttributeError, ValueError):
            self.tty = False
        self.total_bytes = total_bytes
        self.interval_s = interval_s if interval_s is not None else (0.25 if self.tty else 5.0)
        self._clock = clock
        self._started = clock()
        self._last = self._started
        self._drawn = False

    def line(self, report: SeedReport, bytes_done: int, now: float) -> str:
        elapsed = max(now - self._started, 1e-9)
        text = (
            f"seed {_clock(elapsed)} {report.lines:,} URLs ({report.lines / elapsed:,.0f}/s) | sent {report.sent:,}"
            f" | duplicate {report.duplicate:,} | invalid {report.invalid:,}"
        )
        if self.total_bytes:
            done = min(1.0, bytes_done / self.total_bytes)
            eta = elapsed * (1 - done) / done if done > 0 else None
            text += f" | {done:.0%}" + (f" ETA {_clock(eta)}" if eta is not None else "")
        return text

    def update(self, report: SeedReport, bytes_done: int) -> None:
        now = self._clock()
        if now - self._last < self.interval_s:
            return
        self._last = now
        self._write(self.line(report, bytes_done, now))

    def finish(self, report: SeedReport, bytes_done: int) -> None:
        self._write(self.line(report, bytes_done, self._clock()))
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()

    def _write(self, text: str) -> None:
        if self.tty:
            self.stream.write("\r\x1b[K" + text)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()
        self._drawn = True


# ---------------------------------------------------------------------------------------------
# The intake


class SeedIntake:
    """Streams seed inputs onto ``urls.discovered`` of ``out``'s bus; see the module docstring.

    ``flush_every`` bounds what the producer holds before ``flush`` (the embedded producer
    buffers until then; 0: flush only at the end, for a producer that bounds its own queue);
    ``dedupe_window`` is how many recent distinct URLs are remembered to
    drop repeats (memory ~100 bytes each; the deduper remains the authority on what is new).
    ``topic`` is ``urls.discovered`` but for tests on a shared broker. ``priority``: the
    ``DiscoveredUrl.priority`` of every seed (None or 0 = normal); a line's own ``URL N`` wins.
    """

    def __init__(
        self,
        out: EventProducer,
        codec: EventCodec,
        dataset_id: int | None,
        *,
        flush_every: int = 50_000,
        dedupe_window: int = 1 << 17,
        now_ms: int | None = None,
        stdin: BinaryIO | None = None,
        topic: str = URLS_DISCOVERED,
        priority: int | None = None,
    ) -> None:
        self.out = out
        self.topic = topic
        self.now_ms = now_ms if now_ms is not None else time.time_ns() // 1_000_000
        self.encoder = SeedEncoder(codec, self.now_ms, dataset_id, topic, check_priority(priority))
        self._encoders: dict[int | None, SeedEncoder] = {self.encoder.priority: self.encoder}
        self.raw_forms = UrlRecordPublisher(out, codec)
        self.flush_every = flush_every
        self.dedupe_window = dedupe_window
        self._stdin = stdin
        self._bytes_before = 0  # bytes of the inputs already finished
        self._current: _Lines | None = None

    def _encoder_for(self, priority: int | None) -> SeedEncoder:
        """The encoder of seeds with ``priority`` (a line's own ``URL N``), made on first use."""
        encoder = self._encoders.get(priority)
        if encoder is None:
            if len(self._encoders) >= 1024:
                self._encoders = {self.encoder.priority: self.encoder}
            base = self.encoder
            encoder = SeedEncoder(base._codec, self.now_ms, base._dataset_id, self.topic, priority)
            self._encoders[priority] = encoder
        return encoder

    def bytes_done(self) -> int:
        current = self._current
        return self._bytes_before + (current.position() if current is not None else 0)

    def run(self, sources: Sequence[SeedSource], progress: SeedProgress | None = None) -> SeedReport:
        """Send every valid line of ``sources``; flushes before returning (what is counted sent
        is on the bus). A ``BusUnavailable`` from the producer propagates."""
        started = time.perf_counter()
        report = SeedReport(inputs=len(sources))
        recent: set[str] = set()
        args = [s.spec for s in sources if s.is_url]
        if args:
            self._send_lines((a.encode("utf-8", "surrogatepass") for a in args), report, recent, progress)
        for source in sources:
            if source.is_url:
                continue
            self._read_source(source, report, recent, progress)
        self.out.flush()
        report.seconds = time.perf_counter() - started
        if progress is not None:
            progress.finish(report, self.bytes_done())
        return report

    def _read_source(
        self, source: SeedSource, report: SeedReport, recent: set[str], progress: SeedProgress | None
    ) -> None:
        if source.spec == "-":
            raw = self._stdin if self._stdin is not None else sys.stdin.buffer
            self._read_stream(raw, source, report, recent, progress, close=False)
            return
        try:
            raw_file = open(source.spec, "rb")  # noqa: SIM115 - closed by _read_stream
        except OSError as exc:
            raise ConfigError(f"cannot open seed file {source.spec!r} ({exc})") from exc
        self._read_stream(raw_file, source, report, recent, progress, close=True)

    def _read_stream(
        self,
        raw: BinaryIO,
        source: SeedSource,
        report: SeedReport,
        recent: set[str],
        progress: SeedProgress | None,
        *,
        close: bool,
    ) -> None:
        buffered: Any = raw if hasattr(raw, "peek") else io.BufferedReader(raw)

        def position() -> int:
            """Bytes of the file (compressed, when it is gzip) read so far; 0 for a pipe."""
            if source.size_bytes is None:
                return 0
            try:
                return int(buffered.tell())
            except (OSError, ValueError):
                return 0

        try:
            stream: BinaryIO = buffered
            if buffered.peek(2)[:2] == _GZIP_MAGIC:
                stream = gzip.GzipFile(fileobj=buffered, mode="rb")  # type: ignore[assignment]
            lines = _Lines(stream, position)
            self._current = lines
            try:
                self._send_lines(lines, report, recent, progress)
            except (OSError, EOFError, gzip.BadGzipFile) as exc:
                # A corrupt or truncated gzip member: what came before it is sent, the rest is one bad input.
                report.invalid_by_reason["unreadable_input"] += 1
                report.lines += 1
                logger.warning("seed input %s: stopped reading at a corrupt part (%s)", source.spec, exc)
            if lines.overlong:
                report.invalid_by_reason["length"] += lines.overlong
                report.lines += lines.overlong
        finally:
            self._bytes_before += source.size_bytes or 0
            self._current = None
            if close:
                raw.close()

    def _send_lines(
        self, lines: Iterable[bytes], report: SeedReport, recent: set[str], progress: SeedProgress | None
    ) -> None:
        """The hot loop (~10 us per line): skip, decode, canonicalize, drop recent repeats,
        key, encode, produce. Counts are kept in locals and folded into ``report`` every
        8192 lines, where progress is also drawn, and at the end."""
        from crawlstream.lake._aliases import RAW_FORMS_DATASET, raw_form_extras  # as in raw_form_records

        out = self.out
        produce = out.producer.produce
        topic = self.topic
        partitions = out.partition_count(topic)
        encoder = self.encoder
        publish_raw = self.raw_forms
        precompiled = encoder.precompiled
        encode_parts = encoder.encode_parts
        encode = encoder.encode
        canon = canonicalize
        fnv = fnv1a_64
        invalid = report.invalid_by_reason
        window = self.dedupe_window
        flush_every = self.flush_every
        now_ms = self.now_ms
        # per registered domain: (message key, Avro bytes, partition, checksum bits of url_key)
        domains: dict[str, tuple[bytes, bytes, int, int]] = {}
        pending = 0
        lines_n = sent = duplicate = blank = comments = 0
        raw_forms = report.raw_forms
        since_report = 0
        try:
            for raw in lines:
                since_report += 1
                if since_report >= _REPORT_EVERY:
                    since_report = 0
                    report.add(lines_n, sent, duplicate, blank, comments)
                    lines_n = sent = duplicate = blank = comments = 0
                    if progress is not None:
                        progress.update(report, self.bytes_done())
                raw = raw.strip()
                if not raw:
                    blank += 1
                    continue
                if raw[0] == 35:  # '#'
                    comments += 1
                    continue
                lines_n += 1
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError:
                    invalid["encoding"] += 1
                    continue
                line_encoder = None
                if len(text.split(maxsplit=1)) > 1:  # "URL N" (any whitespace, as split_priority): its own priority
                    try:
                        text, line_priority = split_priority(text)
                    except ValueError:
                        invalid["priority"] += 1
                        continue
                    if line_priority is not None:
                        line_encoder = self._encoder_for(line_priority or None)
                try:
                    c = canon(text)
                except InvalidUrl as exc:
                    invalid[exc.reason or "parse"] += 1
                    continue
                url = c.url
                if url in recent:
                    duplicate += 1
                    continue
                if len(recent) >= window:
                    recent.clear()
                recent.add(url)
                domain = c.domain
                info = domains.get(domain)
                if info is None:
                    if len(domains) >= 1 << 16:
                        domains.clear()
                    checksum = domain_checksum(domain)
                    info = domains[domain] = (
                        domain.encode("utf-8"), encoder.domain_part(domain), checksum % partitions, checksum << 56
                    )
                dkey, dpart, partition, high = info
                utf8 = url.encode("utf-8")
                key = high | (fnv(utf8) & KEY_HASH_MASK)  # == canonical_url_key(domain, url)
                raw_url = None if text == url else text
                if line_encoder is None:
                    value_bytes = (
                        encode_parts(utf8, dpart, key, raw_url) if precompiled else encode(url, domain, key, raw_url)
                    )
                elif line_encoder.precompiled:
                    value_bytes = line_encoder.encode_parts(utf8, dpart, key, raw_url)
                else:
                    value_bytes = line_encoder.encode(url, domain, key, raw_url)
                produce(
                    topic,
                    value_bytes,
                    partition=partition,
                    key=dkey,
                    timestamp_ms=now_ms,
                )
                if raw_url is not None:  # a seed not written canonically: raw_form_records' row (ADR 024)
                    publish_raw(RAW_FORMS_DATASET, text, domain, now_ms, raw_form_extras(text, "seed"))
                    raw_forms += 1
                sent += 1
                pending += 1
                if pending == flush_every:
                    out.flush()
                    pending = 0
        finally:  # counted even when a corrupt input ends the loop: those URLs were produced
            report.add(lines_n, sent, duplicate, blank, comments)
            report.raw_forms = raw_forms
