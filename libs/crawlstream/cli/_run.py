"""``crawlstream run``: the whole crawl on the embedded bus and Redis (or Kafka and ``REDIS_URL``
when set).

Seeds go to ``urls.discovered`` (every run: they pass through dedupe, so re-seeding a resumed
crawl adds nothing), then each crawl service runs on its own thread over one ``Host``, plus
a stats consumer that counts ``fetch.results`` for the progress line and the summary. With
``--processes`` N > 1 (the default: one per core) the crawl loop's four services run in N
worker processes instead, sharing the embedded log and the private Redis, partitions split
among them (``crawlstream.crawl._processes``, ADR 025); the content store, the lake sink and the
stats stay here. The terminal gets one progress line and a short summary; log lines go to
``<data_dir>/logs/crawlstream.log`` unless ``--log-level`` is given.
Ctrl-C / SIGTERM stop the loops after their batch (they commit and close); running again
with the same data dir resumes. With ``--exit-when-done`` the run ends once the crawl is
drained (see ``crawlstream.crawl._drain``) or ``--max-pages`` is reached. The one-line JSON
summary goes to stdout, progress and logs to stderr.

A service plugs in by name (``crawlstream.roles``): its ``service`` module has ``build(host) ->
service`` (``run``/``stop``/``close``), ``GROUP`` (its consumer group) and ``TOPICS`` (what it
consumes; the drain check waits for the group to consume them).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

from crawlstream.crawl import (
    STATS_GROUP,
    CrawlRunner,
    CrawlSummary,
    LagProbe,
    ProgressReporter,
    ServiceSpec,
    StatsHandler,
    read_seeds,
    send_seeds,
)
from crawlstream.crawl._processes import CRAWL_SERVICES, WorkerPool, default_processes, open_crawl_host
from crawlstream.errors import ConfigError
from crawlstream.logs import configure_logging
from crawlstream.politeness import Controls, Scheduler
from crawlstream.roles import role
from crawlstream.runtime import Host, LoopService, ServiceLoop, open_host
from crawlstream.settings import Settings
from crawlstream.topics import FETCH_RESULTS, URLS_DISCOVERED, URLS_FRONTIER

__all__ = [
    "CRAWL_SERVICES",
    "DEFAULT_SERVICES",
    "SETTINGS_SECTIONS",
    "crawl_processes",
    "log_to_data_dir",
    "open_run_host",
    "register",
    "run",
    "run_crawl",
]

logger = logging.getLogger(__name__)

# Run by default: the crawl loop, the content store and the lake.
DEFAULT_SERVICES = (*CRAWL_SERVICES, "bucket-compressor", "parquet-sink")


# The settings sections `--help` lists (crawlstream.cli._help): None = every one.
SETTINGS_SECTIONS: tuple[str, ...] | None = None


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "run",
        parents=[common],
        help="crawl on the embedded bus and Redis in --data-dir (--processes N workers); resumes when run again",
    )
    p.add_argument(
        "--seeds",
        nargs="+",
        action="extend",
        default=[],
        metavar="FILE_OR_URL",
        help="seed URLs, or files of one URL per line (repeatable; optional when resuming)",
    )
    p.add_argument(
        "--exit-when-done",
        action="store_true",
        help="exit when the crawl is drained or --max-pages is reached (default: run until Ctrl-C)",
    )
    p.add_argument(
        "--services",
        default=",".join(DEFAULT_SERVICES),
        help="comma list of services to run (default: %(default)s; the crawl loop's four are required)",
    )
    p.set_defaults(func=run)


def log_to_data_dir(args: argparse.Namespace, settings: Settings, command: str) -> Path | None:
    """Keep the terminal for the progress display: log lines go to ``<data_dir>/logs/crawlstream.log``.

    Not when the level was asked for (``--log-level`` or ``CRAWLSTREAM_LOG_LEVEL``): then the
    user wants the lines where they look. Returns the file (its path is printed once), or None.
    """
    if getattr(args, "log_level", None) is not None or "CRAWLSTREAM_LOG_LEVEL" in os.environ:
        return None
    path = settings.data_dir / "logs" / "crawlstream.log"
    configure_logging(settings.log_level, fmt=settings.log_format, file=path)
    sys.stderr.write(f"crawlstream {command}: log lines go to {path} (--log-level LEVEL shows them here)\n")
    sys.stderr.flush()
    return path


def crawl_processes(settings: Settings) -> int:
    """How many worker processes the crawl loop runs in (``--processes``; 1 on Kafka)."""
    if settings.kafka_bootstrap_servers:
        if settings.crawl.processes > 1:
            logger.info("--processes is for the embedded log; on Kafka, run more service processes instead")
        return 1
    return settings.crawl.processes or default_processes()


@contextmanager
def open_run_host(settings: Settings) -> Iterator[Host]:
    """The run's host: the embedded log exclusively (one process), or shared with its workers."""
    if crawl_processes(settings) == 1:
        with open_host(settings) as host:
            yield host
    else:
        with open_crawl_host(settings, member=(0, 1), first=True) as host:
            yield host


def run(args: argparse.Namespace, settings: Settings) -> int:
    priorities: dict[str, int] = {}  # a seed line's own "URL N" (ADR 016)
    # Seeds as written: their raw forms reach the alias map (ADR 024).
    seeds = read_seeds(args.seeds, raw=True, priorities=priorities)
    log_file = log_to_data_dir(args, settings, "run")
    names = [n.strip() for n in args.services.split(",") if n.strip()]
    with open_run_host(settings) as host:

        def on_signal(signum: int, frame: Any) -> None:
            logger.info("%s: stopping after the current batches", signal.Signals(signum).name)
            host.stop_event.set()

        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGTERM, on_signal)
        summary = run_crawl(
            host,
            seeds,
            services=names,
            exit_when_done=args.exit_when_done,
            log_file=log_file,
            seed_priorities=priorities,
        )
    sys.stderr.write(summary.to_text() + "\n")
    sys.stdout.write(summary.to_line() + "\n")
    sys.stdout.flush()
    for hint in summary.hints:
        sys.stderr.write(f"crawlstream run: {hint}\n")
    return 0


def run_crawl(
    host: Host,
    seeds: Sequence[str],
    *,
    services: Sequence[str] = DEFAULT_SERVICES,
    exit_when_done: bool = False,
    resolve_map: Mapping[str, tuple[str, int]] | None = None,
    progress_stream: TextIO | None = None,
    is_tty: bool | None = None,
    log_file: Path | None = None,
    seed_priorities: Mapping[str, int] | None = None,
) -> CrawlSummary:
    """Seed, run ``services`` on ``host`` until drained/max pages/``host.stop_event``; summarize.

    ``resolve_map`` overrides the fetcher's DNS (tests; the CLI uses ``fetch.resolve_map_file``);
    ``seed_priorities``: ``DiscoveredUrl.priority`` of seeds, by seed as given.
    Signals are the caller's business: set ``host.stop_event`` to stop. On a host of
    ``open_run_host`` with ``--processes`` N > 1, the crawl loop's services run in N worker
    processes (``log_file``: where they log; None = the inherited stderr) and the others here.
    """
    settings = host.settings
    specs = _service_specs(host, services, resolve_map)
    groups = {s.group: s.topics for s in specs if s.group is not None and s.topics}
    if getattr(host.bus, "shared", False):
        specs = _in_worker_processes(host, specs, resolve_map, log_file)
    _seed(host, seeds, seed_priorities)

    stats_handler, stats_service = _stats_service(host)
    # last: it counts the results the fetcher sends while finishing its fetches in flight
    specs.append(ServiceSpec("run-stats", lambda: stats_service, STATS_GROUP, (FETCH_RESULTS,), last=True))
    groups[STATS_GROUP] = (FETCH_RESULTS,)
    probe = LagProbe({g: host.bus.consumer(g) for g in groups}, groups, host.bus.end_offsets)
    reader = Scheduler.from_settings(settings, host.redis)
    partitions = host.bus.partition_count(URLS_FRONTIER)

    def scheduler_pending() -> tuple[int, int]:
        return reader.pending_all(range(partitions))

    # --max-pages is exact: the schedulers release no page beyond it (pages + in flight <= N),
    # so stopping there leaves nothing in flight to overshoot with.
    controls = Controls(host.redis)
    if settings.crawl.max_pages:
        in_flight = scheduler_pending()[1]
        controls.set_crawl_budget(settings.crawl.max_pages, stats_handler.snapshot().pages + in_flight)
    else:
        controls.clear_crawl_budget()

    runner = CrawlRunner(
        specs,
        stop_event=host.stop_event,
        stats=stats_handler.snapshot,
        probe=probe,
        scheduler_pending=scheduler_pending,
        reporter=ProgressReporter(
            progress_stream if progress_stream is not None else sys.stderr,
            is_tty=is_tty,
            log_interval_s=settings.crawl.progress_interval_s,
        ),
        exit_when_done=exit_when_done,
        max_pages=settings.crawl.max_pages,
        check_interval_s=settings.crawl.check_interval_s,
        drain_checks=settings.crawl.drain_checks,
    )
    try:
        return runner.run()
    finally:
        probe.close()


def _in_worker_processes(
    host: Host, specs: list[ServiceSpec], resolve_map: Mapping[str, tuple[str, int]] | None, log_file: Path | None
) -> list[ServiceSpec]:
    """``specs`` with the crawl loop's services replaced by one ``workers`` spec: a pool of
    ``--processes`` worker processes that run them on the shared log (ADR 025)."""
    pool = WorkerPool(
        host.settings,
        crawl_processes(host.settings),
        services=[s.name for s in specs if s.name in CRAWL_SERVICES],
        resolve_map=resolve_map,
        log_file=log_file,
        crawl_stop=host.stop_event,
    )
    return [ServiceSpec("workers", lambda: pool, None, ()), *(s for s in specs if s.name not in CRAWL_SERVICES)]


def _stats_service(host: Host) -> tuple[StatsHandler, LoopService]:
    """The run's stats: a loop counting ``fetch.results`` into ``<data_dir>/crawl/stats.json``."""
    settings = host.settings
    stats_consumer = host.bus.consumer(STATS_GROUP)
    stats_handler = StatsHandler(settings.data_dir / "crawl" / "stats.json", stats_consumer)
    stats_loop = ServiceLoop(
        service="run-stats",
        consumer=stats_consumer,
        topics=[FETCH_RESULTS],
        codec=host.codec,
        handler=stats_handler,
        dlq_producer=host.bus.producer(),
        poll_timeout_s=settings.bus.poll_timeout_s,
        commit_interval_s=settings.bus.commit_interval_s,
        registry=host.registry,
        disk_floor=host.disk_floor,  # stats.json is under the data dir (ADR 033)
    )
    return stats_handler, LoopService(stats_loop, stats_handler, on_close=stats_handler.save)


def _service_specs(
    host: Host, names: Sequence[str], resolve_map: Mapping[str, tuple[str, int]] | None
) -> list[ServiceSpec]:
    missing = [n for n in CRAWL_SERVICES if n not in names]
    if missing:
        raise ConfigError(f"--services must include the crawl loop {CRAWL_SERVICES}; missing {missing}")
    specs: list[ServiceSpec] = []
    for name in dict.fromkeys(names):
        module = role(name).module()
        kwargs: dict[str, Any] = {}
        if name == "fetcher" and resolve_map is not None:
            kwargs["resolve_map"] = dict(resolve_map)
        specs.append(
            ServiceSpec(
                name,
                _builder(module, host, kwargs),
                getattr(module, "GROUP", None),
                tuple(getattr(module, "TOPICS", ())),
            )
        )
    return specs


def _builder(module: Any, host: Host, kwargs: dict[str, Any]) -> Any:
    return lambda: module.build(host, **kwargs)


def _seed(host: Host, seeds: Sequence[str], priorities: Mapping[str, int] | None) -> None:
    if seeds:
        send_seeds(host.event_producer(), seeds, host.settings.crawl.dataset_id, priorities)
        return
    if not any(host.bus.end_offsets(URLS_DISCOVERED)) and not _has_frontier(host):
        raise ConfigError(
            f"no seeds and nothing to resume in {host.settings.data_dir}: give --seeds URL or --seeds FILE"
        )


def _has_frontier(host: Host) -> bool:
    """Whether the scheduler holds queued domains (a data dir filled by ``crawlstream migrate``)."""
    scheduler = Scheduler.from_settings(host.settings, host.redis)
    return scheduler.pending_all(range(host.bus.partition_count(URLS_FRONTIER)))[0] > 0
