"""Per-IP claims in a real Redis: shared by every gate, spaced, per address."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time

import pytest
import redis

from crawlstream.politeness import IP_KEY_PREFIX, RedisIpGate


def test_claims_at_one_address_from_many_gates_are_spaced_and_other_addresses_are_free(
    redis_client: redis.Redis,
) -> None:
    spacing_s = 0.03
    pool = redis_client.connection_pool
    gates = [RedisIpGate(redis.Redis(connection_pool=pool), spacing_s) for _ in range(4)]
    claimed_at: list[int] = []  # ms of Redis's clock, the one every gate shares
    lock = threading.Lock()

    def take(gate: RedisIpGate) -> None:
        got = 0
        while got < 5:
            wait_ms, now_ms = gate.try_claim("203.0.113.7")
            if wait_ms == 0:
                got += 1
                with lock:
                    claimed_at.append(now_ms)
            else:
                time.sleep(wait_ms / 1000)

    threads = [threading.Thread(target=take, args=(g,)) for g in gates]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    claimed_at.sort()
    assert len(claimed_at) == 20
    gaps = [b - a for a, b in itertools.pairwise(claimed_at)]
    assert min(gaps) >= 30, gaps  # never two claims closer than the spacing, whichever gate
    assert gates[0].try_claim("203.0.113.8")[0] == 0  # another address: claimed at once


def test_looking_claims_nothing(redis_client: redis.Redis) -> None:
    gate = RedisIpGate(redis_client, 0.5)
    assert gate.try_claim("198.51.100.1", look_only=True)[0] == 0
    assert gate.try_claim("198.51.100.1", look_only=True)[0] == 0  # still free: looking took nothing
    assert gate.try_claim("198.51.100.1")[0] == 0
    wait_ms, _ = gate.try_claim("198.51.100.1", look_only=True)
    assert 400 < wait_ms <= 500


def test_claim_waits_out_the_spacing_and_counts_it(redis_client: redis.Redis) -> None:
    gate = RedisIpGate(redis_client, 0.1)

    async def three() -> list[float]:
        await gate.wait_free("192.0.2.1")
        return [await gate.claim("192.0.2.1") for _ in range(3)]

    started = time.monotonic()
    waits = asyncio.run(three())
    assert waits[0] < 0.02 and all(w >= 0.09 for w in waits[1:]), waits
    assert time.monotonic() - started >= 0.19
    assert gate.claims == 3 and gate.waited_s == pytest.approx(sum(waits))


def test_one_key_per_address_whatever_its_spelling_and_it_expires(redis_client: redis.Redis) -> None:
    gate = RedisIpGate(redis_client, 1.0)
    assert RedisIpGate.key("::ffff:192.0.2.9") == RedisIpGate.key("192.0.2.9") == IP_KEY_PREFIX + "192.0.2.9"
    assert RedisIpGate.key("2001:DB8:0:0::1") == IP_KEY_PREFIX + "2001:db8::1"
    assert RedisIpGate.key("fe80::1%eth0") == IP_KEY_PREFIX + "fe80::1"
    assert gate.try_claim("::ffff:192.0.2.9")[0] == 0
    assert 900 < gate.try_claim("192.0.2.9")[0] <= 1000
    ttl_ms = redis_client.pttl(IP_KEY_PREFIX + "192.0.2.9")
    assert 3_600_000 < ttl_ms <= 3_601_000  # an hour idle, past the spacing


@pytest.mark.parametrize("spacing", [0.0, -1.0, float("nan")])
def test_a_spacing_that_is_not_positive_is_refused(redis_client: redis.Redis, spacing: float) -> None:
    with pytest.raises(ValueError, match="per-IP spacing must be > 0"):
        RedisIpGate(redis_client, spacing)


def test_the_fetcher_gets_a_gate_only_when_asked_and_refuses_one_without_the_schedulers_redis() -> None:
    from types import SimpleNamespace

    from crawlstream.errors import ConfigError
    from crawlstream.fetch.service import ip_gate
    from crawlstream.settings import load

    assert ip_gate(SimpleNamespace(settings=load({}))) is None  # type: ignore[arg-type]  # off by default
    on_kafka = load({"KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:9", "CRAWLSTREAM_FETCH_PER_IP_DELAY_S": "1"})
    with pytest.raises(ConfigError, match="REDIS_URL"):
        ip_gate(SimpleNamespace(settings=on_kafka))  # type: ignore[arg-type]
    for bad in ("-1", "nan"):
        with pytest.raises(ConfigError, match="CRAWLSTREAM_FETCH_PER_IP_DELAY_S"):
            load({"CRAWLSTREAM_FETCH_PER_IP_DELAY_S": bad})
