"""What the soak checks on the whole history: the web's request log against politeness, repeated
requests against the faults that explain them, lag recovery after each fault, and the stored
and indexed pages against what the web served.

The pure parts take the request log and the fault log (``time.monotonic()`` seconds, one clock:
the web runs in the harness process); the stored/indexed parts read the data dir once every
service has stopped.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from crawlstream.devtools.demoweb import DemoWeb, RequestRecord, pairs_apart

ROBOTS_PATHS = ("/robots.txt", "/robots-moved.txt")
RETRYABLE = ("/status/500", "/status/503", "/status/429", "/slow")  # the web's always-failing pages
SLACK_S = 0.005  # clock granularity between the scheduler (ms, wall clock) and the server (monotonic)
# Faults after which a request may legitimately be sent again: the work a member held, or a
# message whose commit a broker or Redis fault lost, is redone (at-least-once delivery).
REPLAYING = ("member-kill", "zombie", "broker-kill", "two-brokers", "redis-kill")
REPLAY_WINDOW_S = 60.0  # a request up to this long before a replaying fault may be replayed


@dataclass
class FaultRecord:
    """One injected fault as it happened (monotonic seconds; ``restored_s`` when undone)."""

    t_s: float
    kind: str
    target: str
    detail: str = ""
    restored_s: float | None = None


def page_requests(log: Iterable[RequestRecord]) -> list[RequestRecord]:
    return [r for r in log if r.path not in ROBOTS_PATHS]


def politeness(web: DemoWeb, pages: Sequence[RequestRecord], min_delay_s: float) -> dict[str, Any]:
    """Robots-disallowed requests, and gaps between requests to one registered domain shorter
    than the delay or the domain's Crawl-delay (each listed, first 20)."""
    model = web.model
    disallowed = [r.url for r in pages if any(r.path.startswith(p) for p in web.disallowed_paths(r.host))]
    by_domain: dict[int, list[RequestRecord]] = defaultdict(list)
    for r in pages:
        index = model.domain_index(r.host)
        if index is not None:
            by_domain[index].append(r)
    close: list[str] = []
    gaps_checked = 0
    for index, records in by_domain.items():
        hosts = [h for h in model.hosts if model.domain_index(h) == index]
        required = max(min_delay_s, *(model.crawl_delay_s_for(h) or 0.0 for h in hosts))
        for _, b, gap in pairs_apart(records):
            gaps_checked += 1
            if gap < required - SLACK_S:
                close.append(f"{model.domains[index]}: {gap:.3f}s < {required:.3f}s at t={b.time_s:.1f}")
    return {
        "requests": len(pages),
        "gaps_checked": gaps_checked,
        "disallowed_requests": len(disallowed),
        "spacing_violations": len(close),
        "violations": len(disallowed) + len(close),
        "examples": (disallowed + close)[:20],
    }


def repeats(
    pages: Sequence[RequestRecord], faults: Sequence[FaultRecord], max_retries: int, t0: float = 0.0
) -> dict[str, Any]:
    """Requests beyond each URL's allowance (one, or ``1 + max_retries`` for the web's always
    failing pages); each is "explained" when a replaying fault was in force (from its start to
    ``REPLAY_WINDOW_S`` after it was undone: members rejoin, services restart in-process, the
    groups rebalance) at some point between the URL's previous request and this one, or when the
    previous one was abandoned (its client had timed out before a stalled server got to it: the
    crawler's retry). Examples give times from ``t0`` (the run's start: the fault log's clock)."""
    by_url: dict[str, list[RequestRecord]] = defaultdict(list)
    for r in pages:
        by_url[r.url].append(r)
    spans = [(f.t_s, (f.restored_s or f.t_s) + REPLAY_WINDOW_S) for f in faults if f.kind in REPLAYING]
    explained, timed_out, unexplained = 0, 0, []
    for url, records in by_url.items():
        allowed = 1 + max_retries if url.endswith(RETRYABLE) else 1
        records.sort(key=lambda r: r.time_s)
        for prev, this in zip(records[allowed - 1 :], records[allowed:], strict=False):
            if prev.abandoned:
                timed_out += 1
            elif any(start <= this.time_s and prev.time_s <= end for start, end in spans):
                explained += 1
            else:
                unexplained.append(f"{url} at t={this.time_s - t0:.1f} (previous t={prev.time_s - t0:.1f})")
    return {
        "urls": len(by_url),
        "beyond_allowance": explained + timed_out + len(unexplained),
        "explained_by_faults": explained,
        "explained_by_time_outs": timed_out,
        "unexplained": len(unexplained),
        "examples": unexplained[:20],
    }


def lag_recovery(
    faults: Sequence[FaultRecord], lag: Sequence[tuple[float, int | None]], floor: int = 500
) -> dict[str, Any]:
    """Seconds from each fault's end (its restore; the fault itself for kills restored at once)
    until the total consumer lag is back near its level before the fault: at most ``floor`` or
    1.5x the median of the two minutes before it. A fault whose lag has not come back by the
    next sample after the run is reported as not recovered."""
    per_fault: list[dict[str, Any]] = []
    for f in faults:
        end = f.restored_s if f.restored_s is not None else f.t_s
        before = [v for t, v in lag if f.t_s - 120 <= t < f.t_s and v is not None]
        bound = max(floor, int(1.5 * statistics.median(before))) if before else floor
        after = [(t, v) for t, v in lag if t >= end and v is not None]
        back = next((t for t, v in after if v <= bound), None)
        per_fault.append({"kind": f.kind, "target": f.target, "bound": bound,
                          "recovered_s": None if back is None else round(back - end, 1)})
    times: list[float] = [p["recovered_s"] for p in per_fault if p["recovered_s"] is not None]
    return {
        "faults": per_fault,
        "recovered": len(times),
        "not_recovered": len(per_fault) - len(times),
        "p50_s": round(statistics.median(times), 1) if times else None,
        "max_s": max(times) if times else None,
    }


UNSTORABLE = ("slow", "bomb")  # kinds of page the web serves with 200 that a crawl gives up on


RETRIED = ("timeout", "connect_error", "error")  # failures of a page the web answered 200: retried


def retry_pending(last: Mapping[str, tuple[str, str | None, int]], max_retries: int) -> dict[str, str]:
    """Of the unstored pages' last results (``url -> (outcome, error, attempt)``), those the
    scheduler still has queued for a retry: a failure it retries, with an attempt left. A retry
    waits at the back of its domain's queue, so a run stopped mid-crawl leaves some; a page whose
    last attempt was its final one was given up, and counts as lost."""
    return {
        url: f"{outcome} ({error}), attempt {attempt}"
        for url, (outcome, error, attempt) in last.items()
        if outcome in RETRIED and attempt < max_retries
    }


def served_pages(web: DemoWeb, pages: Sequence[RequestRecord]) -> tuple[set[str], set[str]]:
    """(reachable pages the web answered 200 and a crawl stores, pages it answered 200 that
    are not reachable). Not expected in the store: a slow page (it outlasts the fetch timeout)
    and a gzip bomb (it inflates past the body limit), though the web did answer 200."""
    ok = {r.url for r in pages if r.status == 200 and web.model.page(r.host, r.path).kind not in UNSTORABLE}
    reachable = web.reachable_pages()
    return ok & reachable, ok - reachable


def listing_check(listings: Mapping[str, Sequence[str]], expected: set[str]) -> dict[str, Any]:
    """What the index lists for the crawl's dataset, per domain, against what it should: every
    stored page that did not ask for noindex, each once."""
    duplicated = sorted(u for urls in listings.values() for u, n in Counter(urls).items() if n > 1)
    listed = {u for urls in listings.values() for u in urls}
    missing = sorted(expected - listed)
    return {
        "listed": sum(map(len, listings.values())),
        "listed_distinct": len(listed),
        "duplicated": len(duplicated),
        "expected_not_listed": len(missing),
        "listed_not_expected": len(listed - expected),
        "examples": (duplicated + missing)[:20],
    }
