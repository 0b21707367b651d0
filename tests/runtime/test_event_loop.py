"""The fetcher's event loop: uvloop by default, asyncio's on request or when uvloop is missing.

Real parts: uvloop and asyncio loops doing real TCP, the fetcher service on the embedded bus
fetching the synthetic web over loopback (its request log is the ground truth).
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from pathlib import Path

import pytest
import uvloop

from crawlstream.devtools.demoweb import DemoWeb
from crawlstream.errors import ConfigError
from crawlstream.events import EventCodec, FetchRequest, FetchResult
from crawlstream.fetch.service import FetchHandler, build
from crawlstream.runtime import event_loop_name, new_event_loop, open_host
from crawlstream.settings import Settings, load
from crawlstream.topics import FETCH_REQUESTS, FETCH_RESULTS
from crawlstream.urls import canonicalize, url_key


def _settings(data_dir: Path, event_loop: str | None = None) -> Settings:
    env = {
        "CRAWLSTREAM_DATA_DIR": str(data_dir),
        "CRAWLSTREAM_BUS_PARTITIONS": "2",
        "CRAWLSTREAM_BUS_FSYNC": "never",
        "CRAWLSTREAM_BUS_POLL_TIMEOUT_S": "0.05",
        "CRAWLSTREAM_FETCH_ALLOW_PRIVATE_NETWORKS": "true",
    }
    if event_loop is not None:
        env["CRAWLSTREAM_EVENT_LOOP"] = event_loop
    return load(env)


@pytest.mark.parametrize(("choice", "loop_class"), [("auto", uvloop.Loop), ("uvloop", uvloop.Loop)])
def test_uvloop_is_chosen_when_installed(choice: str, loop_class: type) -> None:
    loop = new_event_loop(choice)
    try:
        assert isinstance(loop, loop_class) and event_loop_name(choice) == "uvloop"
    finally:
        loop.close()


def test_asyncio_is_used_when_asked_for() -> None:
    loop = new_event_loop("asyncio")
    try:
        assert not isinstance(loop, uvloop.Loop) and isinstance(loop, asyncio.BaseEventLoop)
    finally:
        loop.close()


def test_without_uvloop_auto_falls_back_and_uvloop_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # what an interpreter without it sees: ImportError
    assert event_loop_name("auto") == "asyncio"
    loop = new_event_loop("auto")
    try:
        assert not isinstance(loop, uvloop.Loop)
    finally:
        loop.close()
    with pytest.raises(ConfigError, match=r"'uvloop' was asked for but cannot be imported.*CRAWLSTREAM_EVENT_LOOP"):
        new_event_loop("uvloop")


def test_a_bad_choice_is_refused_by_the_setting_and_the_function(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="CRAWLSTREAM_EVENT_LOOP"):
        _settings(tmp_path, "trio")
    with pytest.raises(ConfigError, match="one of auto, uvloop, asyncio"):
        new_event_loop("trio")
    assert _settings(tmp_path).event_loop == "auto"


@pytest.mark.parametrize("choice", ["uvloop", "asyncio"])
def test_a_loop_on_its_own_thread_serves_real_tcp(choice: str) -> None:
    """How the fetcher drives its loop: run_forever on a thread, coroutines sent from another."""
    loop = new_event_loop(choice)
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    async def echo_once() -> bytes:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write(b"echo:" + await reader.readline())
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"ping\n")
        answer = await reader.read()
        writer.close()
        server.close()
        await server.wait_closed()
        return answer

    try:
        assert asyncio.run_coroutine_threadsafe(echo_once(), loop).result(10) == b"echo:ping\n"
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


@pytest.mark.parametrize("choice", ["uvloop", "asyncio"])
def test_the_fetcher_fetches_the_same_pages_on_either_loop(tmp_path: Path, choice: str) -> None:
    with DemoWeb(3, pages_per_domain=3, seed=7) as web, open_host(_settings(tmp_path / "data", choice)) as host:
        out = host.event_producer()
        now_ms = int(time.time() * 1000)
        seeds = sorted(web.seed_urls())
        for seed in seeds:
            url = canonicalize(seed)
            out.send(
                FETCH_REQUESTS,
                FetchRequest(
                    url=url.url, url_key=url_key(url), domain=url.domain, depth=0, attempt=0, requested_at_ms=now_ms
                ),
            )
        out.flush()
        service = build(host, resolve_map=web.resolve_map)
        handler = service.handler
        assert isinstance(handler, FetchHandler)
        assert isinstance(handler._aio, uvloop.Loop) is (choice == "uvloop")
        try:
            deadline = time.monotonic() + 30
            while handler.fetched < len(seeds) and time.monotonic() < deadline:
                service.loop.run_once()
        finally:
            service.close()
        codec = EventCodec.from_settings(host.settings)
        consumer = host.bus.consumer("test-results")
        consumer.subscribe([FETCH_RESULTS])
        results = [codec.decode(m.value, FetchResult) for m in consumer.consume(100, 1.0)]
        consumer.close()
    assert handler.fetched == len(seeds)
    assert sorted(r.url for r in results) == sorted(canonicalize(s).url for s in seeds)
    assert {r.outcome for r in results} == {"ok"} and all(r.body_size_bytes > 0 for r in results)
    served = {canonicalize(f"http://{r.host}{r.path}").url for r in web.requests() if not r.path.startswith("/robots")}
    assert served == {r.url for r in results}
