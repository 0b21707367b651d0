"""Bulk seeding (``crawlstream seed``): seed inputs streamed onto ``urls.discovered``.

See ``_seeds`` for what a seed line is and docs/decisions/023-bulk-seeding-and-scalable-filter.md
for why each step is shaped the way it is.
"""

from __future__ import annotations

import gzip
import io
import logging
import sys
import time
from collections.abc import Iterable, Sequence
from itertools import islice
from typing import Any, BinaryIO

from crawlstream.crawl._seed_encoder import SeedEncoder
from crawlstream.crawl._seed_inputs import SeedLines, SeedSource
from crawlstream.crawl._seed_report import SeedProgress, SeedReport
from crawlstream.crawl._seeds import check_priority, split_priority
from crawlstream.errors import ConfigError, InvalidUrl
from crawlstream.events import AvroPublisher, EventCodec, EventProducer, UrlRecordPublisher
from crawlstream.topics import URLS_DISCOVERED
from crawlstream.urls import KEY_HASH_MASK, canonicalize, fnv1a_64

__all__ = ["SeedIntake"]

logger = logging.getLogger(__name__)

_GZIP_MAGIC = b"\x1f\x8b"
_REPORT_EVERY = 8192
"""Lines between two updates of the report's counts and the progress display."""


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
        self.discovered = AvroPublisher(out, topic, flush_every=flush_every)
        self.raw_forms = UrlRecordPublisher(out, codec)
        self.dedupe_window = dedupe_window
        self._stdin = stdin
        self._bytes_before = 0  # bytes of the inputs already finished
        self._current: SeedLines | None = None

    def _encoder_for(self, priority: int | None) -> SeedEncoder:
        """The encoder of seeds with ``priority`` (a line's own ``URL N``), made on first use."""
        encoder = self._encoders.get(priority)
        if encoder is None:
            if len(self._encoders) >= 1024:
                self._encoders = {self.encoder.priority: self.encoder}
            encoder = self._encoders[priority] = self.encoder.with_priority(priority)
        return encoder

    def bytes_done(self) -> int:
        current = self._current
        return self._bytes_before + (current.position() if current is not None else 0)

    def run(self, sources: Sequence[SeedSource], progress: SeedProgress | None = None) -> SeedReport:
        """Send every valid line of ``sources``; flushes before returning (what is counted sent
        is on the bus). A ``BusUnavailable`` from the producer propagates."""
        started = time.perf_counter()
        raw_forms_before = self.raw_forms.sent
        report = SeedReport(inputs=len(sources))
        recent: set[str] = set()
        args = [s.spec for s in sources if s.is_url]
        if args:
            self._send_lines((a.encode("utf-8", "surrogatepass") for a in args), report, recent, progress)
        for source in sources:
            if source.is_url:
                continue
            self._read_source(source, report, recent, progress)
        self.discovered.flush()
        report.raw_forms = self.raw_forms.sent - raw_forms_before
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
            lines = SeedLines(stream, position)
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
        """Send ``lines`` in runs of ``_REPORT_EVERY``; after each run its counts are in ``report``
        and ``progress`` is drawn."""
        rest = iter(lines)
        while self._send_run(islice(rest, _REPORT_EVERY), report, recent) == _REPORT_EVERY:
            if progress is not None:
                progress.update(report, self.bytes_done())

    def _send_run(self, lines: Iterable[bytes], report: SeedReport, recent: set[str]) -> int:
        """The hot loop (~10 us per line): skip, decode, canonicalize, drop recent repeats, key,
        encode, produce. Counts are kept in locals and folded into ``report`` at the end, even
        when a corrupt input ends the loop (the URLs before it were produced). Returns the
        number of lines read."""
        from crawlstream.lake import RAW_FORMS_DATASET, raw_form_extras  # as in raw_form_records

        domain_parts, produce = self.discovered.domain, self.discovered.produce
        publish_raw = self.raw_forms
        encoder = self.encoder
        canon, fnv = canonicalize, fnv1a_64
        invalid = report.invalid_by_reason
        window = self.dedupe_window
        now_ms = self.now_ms
        read = lines_n = sent = duplicate = blank = comments = 0
        try:
            for raw in lines:
                read += 1
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
                line_encoder = encoder
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
                parts = domain_parts(domain)
                _, domain_avro, _, key_bits = parts
                utf8 = url.encode("utf-8")
                key = key_bits | (fnv(utf8) & KEY_HASH_MASK)  # == canonical_url_key(domain, url)
                raw_url = None if text == url else text
                if line_encoder.precompiled:
                    value_bytes = line_encoder.encode_parts(utf8, domain_avro, key, raw_url)
                else:
                    value_bytes = line_encoder.encode(url, domain, key, raw_url)
                produce(value_bytes, parts, now_ms)
                if raw_url is not None:  # a seed not written canonically: raw_form_records' row (ADR 024)
                    publish_raw(RAW_FORMS_DATASET, text, domain, now_ms, raw_form_extras(text, "seed"))
                sent += 1
        finally:  # counted even when a corrupt input ends the loop: those URLs were produced
            report.add(lines_n, sent, duplicate, blank, comments)
        return read
