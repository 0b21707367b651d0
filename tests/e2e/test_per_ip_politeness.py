"""Per-IP politeness on a live embedded crawl: every host of the synthetic web resolves to
127.0.0.1, so with ``fetch.per_ip_delay_s`` on, the web's own request log must show every
request (robots.txt and sitemaps included) at least that far from the one before it, across
all domains, while each page is still fetched exactly once.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from e2e_support import crawl_settings, demo_web, page_requests

from crawlstream.cli._run import CRAWL_SERVICES, run_crawl
from crawlstream.devtools.demoweb import pairs_apart
from crawlstream.runtime import open_host

PER_IP_DELAY_S = 0.12
# Arrival times are read by the server after the request crossed loopback and an event loop;
# a request sent on its turn can arrive a little late, the next one on time (40 ms seen once in a
# full suite on 2 loaded cores). Without the per-IP gate the four domains' requests interleave
# with gaps near 0, so this still tells the gate's spacing apart.
JITTER_S = 0.05


def test_hosts_on_one_address_share_one_spacing_budget(tmp_path: Path) -> None:
    settings = crawl_settings(tmp_path / "data", CRAWLSTREAM_FETCH_PER_IP_DELAY_S=str(PER_IP_DELAY_S))
    with demo_web(4, pages_per_domain=4, special_every=0) as web, open_host(settings) as host:
        assert {ip for ip, _port in web.resolve_map.values()} == {"127.0.0.1"}
        summary = run_crawl(
            host, web.seed_urls(), services=CRAWL_SERVICES, exit_when_done=True, resolve_map=web.resolve_map
        )
        log = web.requests()
    assert summary.reason == "drained"
    pairs = pairs_apart(log)
    close = [(a.url, b.url, round(gap, 3)) for a, b, gap in pairs if gap < PER_IP_DELAY_S - JITTER_S]
    domains = {web.model.domain_index(r.host) for r in log}
    assert len(log) > 25 and len(domains) == 4  # many hosts, one address
    assert min(gap for _, _, gap in pairs) >= PER_IP_DELAY_S - JITTER_S, close
    counts = Counter(r.url for r in page_requests(log))
    assert set(counts) == web.reachable_pages() and set(counts.values()) == {1}  # each page once
