"""A replayed ``urls.frontier`` batch is not appended to the frontier twice (issue 28, ADR 037).

Session 18's 2-hour soak fetched 434 pages twice without a fault to explain it. Read from its
Kafka logs and frontier files: 5,655 URLs sat twice in their domain's frontier file at attempt
0, 3,880 of them from one ``urls.frontier`` message each. The scheduler had appended a batch,
then resumed from an earlier offset (its commit failed in a broker outage, or a Redis outage
restarted it before the commit) and appended the batch again; each copy was fetched in turn,
minutes apart. These tests replay the scheduler's input on the real embedded bus, real files and
a real Redis: a second member of another group reads ``urls.frontier`` from the start, as a
member does whose committed offset is behind what it appended.
"""

from __future__ import annotations

import time
from collections import Counter

import redis

from crawlstream.events import DiscoveredUrl
from crawlstream.topics import URLS_FRONTIER
from crawlstream.urls import url_key


def test_a_replayed_frontier_batch_fetches_nothing_twice(service_rig) -> None:
    with service_rig(batch_size=3) as first:
        urls = first.seed(10)
        first.run()
        requests = first.requests()
        assert sorted(q.url for q in requests) == sorted(urls)
        first.answer(requests)
        first.run()
    with service_rig(batch_size=3, group="crawlstream.scheduler.behind") as again:
        again.run()  # reads urls.frontier (and fetch.results) from offset 0 again
        time.sleep(0.1)  # the domains' next fetch times (scheduler.min_delay_s is 0)
        again.run()
        assert again.handler.replayed == len(urls)
        assert Counter(q.url for q in again.requests()) == Counter(urls)  # each fetched once
        assert again.scheduler.pending(0) == (0, 0)


def test_new_urls_after_a_replay_are_still_appended(service_rig) -> None:
    """The mark skips only what was appended: the URLs produced after it are queued and fetched."""
    with service_rig(batch_size=3) as first:
        old = first.seed(4)
        first.run()
    with service_rig(batch_size=3, group="crawlstream.scheduler.behind") as again:
        fresh = [f"http://fresh{i}.example/" for i in range(3)]
        for i, url in enumerate(fresh):
            again.out.send(URLS_FRONTIER, _discovered(url, f"fresh{i}.example"))
        again.out.flush(10)
        again.run()
        assert again.handler.replayed == len(old)
        assert sorted(q.url for q in again.requests()) == sorted(old + fresh)


def test_a_replay_after_redis_lost_the_appends_queues_each_url_once(service_rig) -> None:
    """Session 22's 11 repeats: Redis (AOF, fsync every second) was killed and came back without
    the last append pipelines, so their bytes were adopted from the files and the replay appended
    them again. The mark beside the files still covers them, and their domains are queued."""
    with service_rig(batch_size=3) as first:
        before = _dump(first.host.redis)
        urls = first.seed(10)
        first.run()
        dispatched = len(first.requests())  # lost with Redis too: those tickets are sent again
        _restore(first.host.redis, before)
    with service_rig(batch_size=3, group="crawlstream.scheduler.behind") as again:
        again.run()
        seen = dispatched
        for _ in range(5):  # answer until nothing more is asked: a second copy would come next
            new = again.requests()[seen:]
            seen += len(new)
            again.answer(new)
            time.sleep(0.1)
            again.run()
        assert again.handler.replayed == len(urls)
        assert Counter(q.url for q in again.requests()[dispatched:]) == Counter(urls)  # each once
        assert again.scheduler.pending(0) == (0, 0)


def _dump(client: redis.Redis) -> dict[bytes, bytes]:
    return {key: client.dump(key) for key in client.keys("*")}


def _restore(client: redis.Redis, dumped: dict[bytes, bytes]) -> None:
    client.flushdb()
    for key, value in dumped.items():
        client.restore(key, 0, value)


def _discovered(url: str, domain: str) -> DiscoveredUrl:
    return DiscoveredUrl(url=url, domain=domain, url_key=url_key(url), depth=0,
                         discovered_at_ms=int(time.time() * 1000), source="seed")
