"""Runs a crawl's services on threads of one process until it is drained, full, or stopped.

The runner knows services only as ``ServiceSpec`` (a name, a builder, and the consumer group
and topics it reads): the CLI decides which services exist and how they are built, so a new
service (bucket compressor, parquet sink) plugs in by name without touching this module,
and its group joins the drain check automatically.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, cast

from crawlstream.crawl._drain import BusLag, DrainDetector, LagProbe, is_idle
from crawlstream.crawl._progress import Progress, ProgressReporter, RateMeter, eta_seconds
from crawlstream.crawl._stats import CrawlStats
from crawlstream.crawl._summary import CrawlSummary, summarize
from crawlstream.runtime import Runnable, startup_objects_frozen
from crawlstream.topics import FETCH_REQUESTS, URLS_FRONTIER

__all__ = ["CrawlRunner", "Drainable", "ServiceSpec"]

logger = logging.getLogger(__name__)


class Drainable(Runnable, Protocol):
    """A service that can be told to consume what is left, then stop."""

    def stop_when_idle(self) -> None: ...


@dataclass(frozen=True)
class ServiceSpec:
    """One service of the crawl. ``group``/``topics``: what the drain check waits for.

    ``last``: stopped only after every other service has stopped, and only once it has
    consumed what they produced while stopping (the run's own counters: the fetcher
    finishes its fetches in flight, and their results must be counted). Its ``build`` must
    return a ``Drainable`` that does not watch the crawl's stop event.
    """

    name: str
    build: Callable[[], Runnable]
    group: str | None
    topics: tuple[str, ...]
    last: bool = False


class _ServiceThread:
    def __init__(self, name: str, service: Runnable, last: bool) -> None:
        self.name = name
        self.service = service
        self.last = last
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._main, name=f"crawl-{name}", daemon=True)

    def _main(self) -> None:
        try:
            self.service.run()
        except BaseException as exc:  # reported by the runner, which stops the others
            self.error = exc
            logger.error("service %s failed: %s", self.name, exc, exc_info=True)
        finally:
            try:
                self.service.close()
            except BaseException as exc:
                if self.error is None:
                    self.error = exc
                logger.error("service %s failed to close: %s", self.name, exc, exc_info=True)


class CrawlRunner:
    """Starts every service on its own thread, reports progress, and decides when to stop.

    ``stats`` returns the crawl's counts so far; ``scheduler_pending`` returns (domains with
    queued URLs, requests in flight) over every partition; ``probe`` reads the groups' lag.
    The run ends when ``stop_event`` is set from outside (a signal: reason ``stopped``),
    when ``max_pages`` (> 0) pages are counted (``max_pages``), when ``exit_when_done`` and
    ``drain_checks`` consecutive checks find the crawl drained (``drained``), or when a
    service fails (its exception is re-raised after the others stopped).
    """

    def __init__(
        self,
        services: Sequence[ServiceSpec],
        *,
        stop_event: threading.Event,
        stats: Callable[[], CrawlStats],
        probe: LagProbe,
        scheduler_pending: Callable[[], tuple[int, int]],
        reporter: ProgressReporter,
        exit_when_done: bool = False,
        max_pages: int = 0,
        check_interval_s: float = 0.5,
        drain_checks: int = 2,
        join_timeout_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._specs = list(services)
        self._stop = stop_event
        self._stats = stats
        self._probe = probe
        self._scheduler_pending = scheduler_pending
        self._reporter = reporter
        self._exit_when_done = exit_when_done
        self._max_pages = max_pages
        self._check_interval_s = check_interval_s
        self._detector = DrainDetector(drain_checks)
        self._join_timeout_s = join_timeout_s
        self._clock = clock
        self._rate = RateMeter()

    def run(self) -> CrawlSummary:
        start_stats = self._stats()
        started = self._clock()
        threads: list[_ServiceThread] = []
        try:
            for spec in self._specs:  # build all first: a wiring error stops before any work
                threads.append(_ServiceThread(spec.name, spec.build(), spec.last))
        except BaseException:
            for built in threads:
                built.service.close()
            raise
        reason = "stopped"
        # Built: what start-up made lives to the end, so collections skip it (ADR 009).
        with startup_objects_frozen():
            for t in threads:
                t.thread.start()
            logger.info("crawl running: %s", ", ".join(t.name for t in threads))
            try:
                reason = self._watch(threads, start_stats, started)
            finally:
                self._stop.set()
                self._stop_threads([t for t in threads if not t.last], drain=False)
                self._stop_threads([t for t in threads if t.last], drain=True)
                self._reporter.close()
        failed = [t for t in threads if t.error is not None]
        if failed:
            raise failed[0].error  # type: ignore[misc]
        summary = summarize(reason, start_stats, self._stats(), self._clock() - started)
        logger.info("crawl ended (%s): %s", reason, summary.to_line())
        return summary

    def _stop_threads(self, threads: list[_ServiceThread], *, drain: bool) -> None:
        for t in threads:
            if drain and t.error is None:
                cast(Drainable, t.service).stop_when_idle()
            else:
                t.service.stop()
        for t in threads:
            t.thread.join(self._join_timeout_s)
            if t.thread.is_alive():
                logger.error("service %s did not stop within %.0f s", t.name, self._join_timeout_s)

    def _watch(self, threads: list[_ServiceThread], start_stats: CrawlStats, started: float) -> str:
        while not self._stop.wait(self._check_interval_s):
            if any(t.error is not None or not t.thread.is_alive() for t in threads):
                dead = [t.name for t in threads if not t.thread.is_alive()]
                logger.error("service thread(s) ended unexpectedly: %s; stopping the crawl", ", ".join(dead))
                return "failed"
            stats = self._stats()
            before = self._probe.read()
            waiting, in_flight = self._scheduler_pending()
            after = self._probe.read()
            self._report(stats, start_stats, started, before, waiting, in_flight)
            if self._max_pages and stats.pages >= self._max_pages:
                logger.info("max pages reached (%d >= %d)", stats.pages, self._max_pages)
                return "max_pages"
            if self._exit_when_done and self._detector.observe(is_idle(before, waiting + in_flight, after)):
                return "drained"
        return "stopped"

    def _report(
        self, stats: CrawlStats, start: CrawlStats, started: float, lag: BusLag, waiting: int, in_flight: int
    ) -> None:
        now = self._clock()
        frontier = sum(n for tp, n in lag.ends.items() if tp.topic == URLS_FRONTIER)
        requested = sum(n for tp, n in lag.ends.items() if tp.topic == FETCH_REQUESTS)
        rate = self._rate.update(now, stats.pages - start.pages)
        self._reporter.update(
            Progress(
                elapsed_s=now - started,
                pages=stats.pages,
                pages_per_s=rate,
                queued_urls=max(0, frontier - requested),
                domains_waiting=waiting,
                in_flight=in_flight,
                errors=stats.errors,
                lag=lag.lag,
                eta_s=eta_seconds(stats.pages, self._max_pages, rate),
            )
        )
