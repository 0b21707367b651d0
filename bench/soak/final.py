"""The end of a soak: undo every fault, stop fetching, drain the rest, stop everything, then check
the whole history (``invariants``) against the store, the lake and the index."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from bench.soak.chaos import ChaosPlan
from bench.soak.client import ApiClient
from bench.soak.invariants import listing_check, page_requests, politeness, repeats, retry_pending, served_pages
from crawlstream.bus import KafkaBus
from crawlstream.crawl import LagProbe
from crawlstream.devtools.deployment import group_of, groups_assigned
from crawlstream.events import EventCodec, FetchResult
from crawlstream.frontier import FileState
from crawlstream.index import IndexReader
from crawlstream.politeness import Scheduler
from crawlstream.redisconn import open_redis
from crawlstream.settings import Settings
from crawlstream.store import open_store
from crawlstream.topics import FETCH_RESULTS
from crawlstream.urls import canonicalize, partition_for

if TYPE_CHECKING:
    from bench.soak.run import Soak

logger = logging.getLogger("bench.soak")
SETTLE_S = 300.0  # bound on each step of the wind-down


def _until(soak: Soak, condition: Callable[[], bool], what: str, timeout_s: float = SETTLE_S) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        soak.run_due()
        soak.supervise()
        soak.probe_liveness()
        if condition():
            return True
        time.sleep(0.5)
    logger.error("wind-down: gave up waiting until %s after %.0f s", what, timeout_s)
    return False


def wind_down(soak: Soak) -> dict[str, bool]:
    """Every fault undone and every member back; then the crawl stops from the top down: the
    schedulers first (nothing new is dispatched), the fetchers once every dispatched request was
    fetched, the rest once what was fetched is stored; then every member stops on SIGTERM."""
    steps = {}
    soak.run_due(everything=True)
    steps["faults_undone"] = _until(soak, lambda: all(f.restored_s is not None for f in soak.faults), "faults undone")
    consumers = [m for m in soak.members.values() if m.name not in ("index-compactor", "query-api")]
    steps["members_back"] = _until(
        soak,
        lambda: all(m.process.running for m in soak.members.values())
        and groups_assigned([m.process for m in consumers]),
        "every member is back and each group owns its partitions",
        timeout_s=120.0,
    )
    _stop(soak, "scheduler")
    steps["requests_fetched"] = _drain(soak, ("fetcher",), "every dispatched request is fetched")
    _stop(soak, "fetcher")
    stores = ("bucket-compressor", "parquet-sink", "link-extractor")
    steps["drained"] = _drain(soak, stores, "what was fetched is stored")
    soak._stop.set()
    _stop(soak, *{m.name for m in soak.members.values()})
    unclean = [m.label for m in soak.members.values() if m.process.returncode != 0]
    if unclean:  # reported, not judged here: what they held is checked below like the rest
        logger.error("wind-down: not stopped cleanly by SIGTERM (SIGKILLed after 30 s): %s", ", ".join(unclean))
    soak.unclean_exits = unclean
    steps["staging_published"] = _publish_staging(soak)
    return steps


def _stop(soak: Soak, *names: str) -> None:
    """SIGTERM every member of ``names`` at once (they leave their groups in parallel), then wait."""
    chosen = [m for m in soak.members.values() if m.name in names]
    for member in chosen:
        member.held = "stopped at the end"
        member.process.terminate()
    for member in chosen:
        member.process.stop()


def _drain(soak: Soak, names: tuple[str, ...], what: str) -> bool:
    """Until the groups of ``names`` have lag 0 three reads in a row."""
    bus = KafkaBus.from_settings(soak.where.settings)
    groups = dict(group_of(n) for n in names)
    probe = LagProbe({g: bus.consumer(g) for g in groups}, groups, bus.end_offsets)
    zero = [0]

    def drained() -> bool:
        try:
            zero[0] = zero[0] + 1 if probe.read().lag == 0 else 0
        except Exception as exc:  # an outage reads as "not yet"
            logger.info("drain: %s", exc)
            zero[0] = 0
        return zero[0] >= 3

    try:
        return _until(soak, drained, what)
    finally:
        probe.close()
        bus.close()


LastResult = tuple[str, str | None, int]  # outcome, error, attempt


def last_results(settings: Settings, urls: set[str], timeout_s: float = 1800.0) -> tuple[dict[str, LastResult], int]:
    """The last ``fetch.results`` event of each of ``urls`` as ``(outcome, error, attempt)``,
    read once from the start, every message decoded; and how many messages were left unread
    when ``timeout_s`` ran out (0: the answer is complete)."""
    if not urls:
        return {}, 0
    bus = KafkaBus.from_settings(settings)
    codec = EventCodec.from_settings(settings)
    total = sum(bus.end_offsets(FETCH_RESULTS))
    consumer = bus.consumer(f"soak-check-{time.monotonic_ns()}")
    last: dict[str, LastResult] = {}
    seen = 0
    try:
        consumer.subscribe([FETCH_RESULTS])
        deadline = time.monotonic() + timeout_s
        while seen < total and time.monotonic() < deadline:
            batch = consumer.consume(1000, 0.5)
            seen += len(batch)
            for message in batch:
                result = codec.decode(message.value, FetchResult)
                if result.url in urls:
                    last[result.url] = (result.outcome, result.error, result.attempt)
    finally:
        consumer.close()
        bus.close()
    if seen < total:
        logger.error("final checks: read %d of %d fetch.results events in %.0f s", seen, total, timeout_s)
    return last, total - seen


def queued_in_frontier(settings: Settings, urls: set[str]) -> dict[str, str]:
    """Of ``urls``, those still queued unread in their domain's frontier file: a retry whose
    request has not been handed out yet. Its last result need not say so: a ticket that expired
    (its request dropped in a broker outage) has none, and a robots.txt that could not be read
    answers robots_disallowed with a back-off. Read from the scheduler's own state (Redis and the
    files), which the next dispatch reads."""
    by_domain: dict[str, set[str]] = {}
    for url in urls:
        by_domain.setdefault(canonicalize(url).domain, set()).add(url)
    queued: dict[str, str] = {}
    with open_redis(settings.redis_url, settings.data_dir) as handle:
        scheduler = Scheduler.from_settings(settings, handle.client)
        for domain, waiting in by_domain.items():
            partition = partition_for(domain, settings.bus.partitions)
            state = scheduler.domain_state(partition, domain)
            unread = FileState(state.generation, state.offset, state.size)
            for entry, _ in scheduler.files.read(partition, domain, unread, limit=1 << 20):
                if entry.url in waiting:
                    queued[entry.url] = f"queued in the frontier, attempt {entry.attempt}"
    return queued


def _publish_staging(soak: Soak, timeout_s: float = 120.0) -> bool:
    """What an operator's next start does: one parquet-sink member adopts the staging logs of
    members that did not publish before they stopped (a member killed while it held rows), then
    stops. True once no staging log holds a row."""
    staging = soak.where.settings.data_dir / "parquet-sink" / "staging"

    def staged() -> list[str]:
        return [str(p) for p in staging.glob("*/rows.log") if p.stat().st_size > 0]

    if not staged():
        return True
    logger.info("wind-down: rows staged but not published: %s; one parquet-sink adopts them", staged())
    sink = soak._spawn("parquet-sink", "parquet-sink-final")
    try:
        deadline = time.monotonic() + timeout_s
        while staged() and time.monotonic() < deadline and sink.running:
            time.sleep(0.5)
    finally:
        sink.stop()
    return not staged()


def _listing(settings: Settings, domains: list[str]) -> dict[str, list[str]]:
    """Every domain's URLs in the crawl's dataset, as the index the API serves lists them."""
    reader = IndexReader.from_settings(settings)
    dataset = settings.crawl.dataset_id
    out: dict[str, list[str]] = {}
    try:
        with reader.pin() as idx:
            for domain in domains:
                if not any(ds.dataset_id == dataset for ds in idx.datasets_for_domain(domain) or []):
                    continue
                urls: list[str] = []
                offset: int | None = 0
                while offset is not None:
                    page = idx.urls(domain, dataset, offset, 1000)
                    if page is None:
                        break
                    urls.extend(row[1] for row in page.rows)
                    offset = page.next_offset
                out[domain] = urls
    finally:
        reader.close()
    return out


def _build(env: Mapping[str, str], *extra: str) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-m", "crawlstream", "index", "build", *extra], env=dict(env),
                          capture_output=True, text=True, timeout=1800, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"index build {' '.join(extra)} failed: {proc.stderr[-2000:]}")
    start = proc.stdout.find("{")
    return json.loads(proc.stdout[start:]) if start >= 0 else {}


def final_checks(
    soak: Soak, plan: ChaosPlan, client: ApiClient, members: Mapping[str, int], max_retries: int, min_delay_s: float
) -> dict[str, Any]:
    client.stop()
    steps = wind_down(soak)
    where, settings = soak.where, soak.where.settings
    pages = page_requests(where.web.requests())
    polite = politeness(where.web, pages, min_delay_s)
    rep = repeats(pages, soak.faults, max_retries, t0=soak.t0)
    served, unreachable = served_pages(where.web, pages)
    store = open_store(settings)
    try:
        stored = {u for u in served if store.entry(u) is not None}
        stats, report = store.stats(), store.verify()
    finally:
        store.close()
    last, unread = last_results(settings, served - stored)
    pending = retry_pending(last, max_retries)
    pending.update(queued_in_frontier(settings, served - stored - set(pending)))
    lost = served - stored - set(pending)
    (soak.cfg.root / "lost.txt").write_text("".join(f"{u}\n" for u in sorted(lost)))
    _build(where.env)
    domains = sorted(where.web.model.domains)
    served_index = _listing(settings, domains)
    _build(where.env, "--full")
    rebuilt = _listing(settings, domains)
    listing = listing_check(rebuilt, stored - where.web.noindex_pages())
    kinds = plan.counts()
    injected: dict[str, int] = dict.fromkeys(kinds, 0)
    for f in soak.faults:
        injected[f.kind] += 1
    summary: dict[str, Any] = {
        "minutes": soak.cfg.minutes,
        "seed": soak.cfg.seed,
        "web": {"domains": soak.cfg.domains, "pages_per_domain": soak.cfg.pages_per_domain},
        "members": dict(members),
        "faults": {"planned": kinds, "injected": injected, "total": len(soak.faults)},
        "wind_down": steps,
        "unclean_exits": soak.unclean_exits,
        "pages": {"served_200_reachable": len(served), "served_200_unreachable": len(unreachable),
                  "stored": len(stored), "pending_retry": len(pending), "lost": len(lost),
                  "results_unread": unread,
                  "store_urls": stats.urls, "store_damaged": len(report.problems),
                  "lost_examples": sorted(lost)[:20], "pending_examples": dict(sorted(pending.items())[:10])},
        "listing": listing,
        "index_equals_full_rebuild": served_index == rebuilt,
        "politeness": polite,
        "repeats": rep,
        "client": client.summary(),
        "restarts": {label: {"restarts": m.restarts, "crashes": len(m.crashes), "liveness_kills": m.liveness_kills}
                     for label, m in soak.members.items()},
        "checks": soak.checks,
    }
    summary["ok"] = bool(
        steps["faults_undone"] and steps["requests_fetched"] and steps["drained"] and steps["staging_published"]
        and not lost
        and not unread
        and not report.problems
        and listing["duplicated"] == 0
        and listing["expected_not_listed"] == 0
        and listing["listed_not_expected"] == 0
        and summary["index_equals_full_rebuild"]
        and polite["violations"] == 0
        and rep["unexplained"] == 0
        and client.summary()["bad_walks"] == 0
    )
    return summary
