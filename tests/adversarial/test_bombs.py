"""Hostile response bodies and heads: the fetcher caps decoded bytes, time and memory.

A raw asyncio server on 127.0.0.1 speaks just enough HTTP/1.1 to misbehave in ways aiohttp's
own server would not allow: bombs in every Content-Encoding, endless and dripping bodies,
a Content-Length that lies, heads that never end. Each fetch must end, within its time
limit, as a defined outcome (``ok`` + ``truncated``, ``too_large``, ``timeout`` or ``error``
with a reason), never an exception, and with bounded memory (tracemalloc peak).

Caps here are the fetcher's own parameters (``Fetcher.from_settings`` reads them from
``fetch.max_body_bytes``, ``fetch.max_decompression_ratio``, ``fetch.timeout_s`` and
``fetch.read_timeout_s``), set small so the whole file runs in a few seconds.
"""

from __future__ import annotations

import asyncio
import gzip
import time
import tracemalloc
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass, fields, replace
from typing import Any, TypeVar

import brotli
import pytest
import zstandard

from crawlstream.fetch import Fetcher, FetchOutcome
from crawlstream.robots import MAX_ROBOTS_BYTES
from crawlstream.settings import FetchSettings

pytestmark = pytest.mark.timeout(30)

T = TypeVar("T")
HOST = "bombs.test"
MiB = 1024 * 1024
BOMB_BYTES = 10 * MiB  # decoded size of each bomb
CAP_BYTES = 256 * 1024  # max_body_bytes of most tests: far below every bomb
TIMEOUT_S = 1.5  # total time per fetch
READ_TIMEOUT_S = 0.75  # longest silence
# Peak Python memory one fetch may add: the cap, its copy, one decode step and one network
# chunk, with room for aiohttp's buffers. Every bomb here inflates to 40x this.
MEMORY_BUDGET_BYTES = 4 * CAP_BYTES + 1 * MiB

Writer = asyncio.StreamWriter
Handler = Callable[[Writer], Awaitable[None]]


# -- payloads (built once per session: compressing 10 MiB takes a moment) ----------------------


def _raw_deflate(data: bytes) -> bytes:
    comp = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    return comp.compress(data) + comp.flush()


ZEROS = bytes(BOMB_BYTES)
GZIP_BOMB = gzip.compress(ZEROS, 9)
GZIP_MEMBER = gzip.compress(bytes(MiB), 9)
ZSTD_BOMB = zstandard.ZstdCompressor(level=19).compress(ZEROS)
HUGE_HEADER_LINE = b"HTTP/1.1 200 OK\r\nX-Huge: " + b"a" * (8 * MiB) + b"\r\n\r\nbody"
MANY_HEADERS = b"HTTP/1.1 200 OK\r\n" + b"".join(b"X-H%d: v\r\n" % i for i in range(100_000)) + b"\r\nbody"
BODIES: dict[str, tuple[str, bytes]] = {  # name -> (Content-Encoding, body)
    "gzip": ("gzip", GZIP_BOMB),
    "x-gzip": ("x-gzip", GZIP_BOMB),
    "deflate": ("deflate", zlib.compress(ZEROS, 9)),
    "raw-deflate": ("deflate", _raw_deflate(ZEROS)),
    "br": ("br", brotli.compress(ZEROS, quality=5)),
    "gzip-members": ("gzip", GZIP_MEMBER * 10),  # 10 members of 1 MiB each
    "gzip-of-gzip": ("gzip", gzip.compress(GZIP_BOMB, 9)),  # nested: decoded once, the inner bomb stays packed
}


def head(status: str = "200 OK", **headers: str) -> bytes:
    lines = [f"HTTP/1.1 {status}"] + [f"{k.replace('_', '-')}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


# -- the hostile server -----------------------------------------------------------------------
# It shares the fetcher's event loop and process, so it never holds more than one 64 KiB piece
# in its write buffer (tracemalloc then measures the fetcher, not the server) and yields after
# every piece (on the real network the server is not on our loop, so it must not starve it).


async def send(w: Writer, data: bytes) -> None:
    view = memoryview(data)
    for i in range(0, len(view), 64 * 1024):
        w.write(view[i : i + 64 * 1024])
        await w.drain()
        await asyncio.sleep(0)


async def send_body(w: Writer, encoding: str, body: bytes) -> None:
    headers = head(Content_Type="text/html", Content_Encoding=encoding, Content_Length=str(len(body)))
    await send(w, headers)
    await send(w, body)


async def endless_chunked(w: Writer) -> None:
    """Transfer-Encoding: chunked, 64 KiB chunks forever (until the client hangs up)."""
    w.write(head(Content_Type="text/html", Transfer_Encoding="chunked"))
    chunk = b"%x\r\n" % (64 * 1024) + b"<p>" * (64 * 1024 // 3) + b"<p>"[: 64 * 1024 % 3] + b"\r\n"
    for _ in range(100_000):  # 6 GiB: never reached, the client stops first
        await send(w, chunk)


async def endless_gzip(w: Writer) -> None:
    """gzip members of 1 MiB of zeros, chunked, forever: a bomb with no size at all."""
    w.write(head(Content_Type="text/html", Content_Encoding="gzip", Transfer_Encoding="chunked"))
    chunk = b"%x\r\n" % len(GZIP_MEMBER) + GZIP_MEMBER + b"\r\n"
    for _ in range(100_000):
        await send(w, chunk)


async def slow_drip(w: Writer) -> None:
    """A byte every 0.25 s: never silent long enough for the read timeout, so only the total one ends it."""
    w.write(head(Content_Type="text/html", Content_Length="1000000"))
    for _ in range(400):
        w.write(b"x")
        await w.drain()
        await asyncio.sleep(0.25)


async def drip_headers(w: Writer) -> None:
    """A header line every 0.25 s, forever: the head never ends."""
    w.write(b"HTTP/1.1 200 OK\r\n")
    for i in range(400):
        w.write(b"X-Drip-%d: %d\r\n" % (i, i))
        await w.drain()
        await asyncio.sleep(0.25)


async def endless_headers(w: Writer) -> None:
    """Header lines as fast as the socket takes them, forever."""
    w.write(b"HTTP/1.1 200 OK\r\n")
    lines = (b"X-Pad: " + b"a" * 1000 + b"\r\n") * 64
    for _ in range(200_000):  # 13 GB: never reached
        await send(w, lines)


async def huge_header_line(w: Writer) -> None:
    await send(w, HUGE_HEADER_LINE)


async def many_small_headers(w: Writer) -> None:
    await send(w, MANY_HEADERS)


async def length_lie_then_close(w: Writer) -> None:
    """Content-Length says a terabyte; 1000 bytes come, then the connection closes."""
    w.write(head(Content_Type="text/html", Content_Length=str(10**12)) + b"y" * 1000)
    await w.drain()


async def length_lie_then_hang(w: Writer) -> None:
    w.write(head(Content_Type="text/html", Content_Length=str(10**12)) + b"y" * 1000)
    await w.drain()
    await asyncio.sleep(20)


async def length_lie_endless(w: Writer) -> None:
    """Content-Length says a terabyte and the bytes keep coming."""
    w.write(head(Content_Type="text/html", Content_Length=str(10**12)))
    block = b"z" * (64 * 1024)
    for _ in range(100_000):
        await send(w, block)


async def length_overflow(w: Writer) -> None:
    w.write(head(Content_Type="text/html", Content_Length="9" * 40) + b"abc")
    await w.drain()


async def length_negative(w: Writer) -> None:
    w.write(head(Content_Type="text/html", Content_Length="-5") + b"abc")
    await w.drain()


async def corrupt(w: Writer, encoding: str) -> None:
    await send_body(w, encoding, b"\x1f\x8b\x08\x00garbage that is not compressed" * 10)


async def stacked_encodings(w: Writer) -> None:
    await send_body(w, "gzip, gzip", BODIES["gzip-of-gzip"][1])


async def zstd_bomb(w: Writer) -> None:
    """zstd was never asked for (Accept-Encoding has no zstd): not decoded at all."""
    await send_body(w, "zstd", ZSTD_BOMB)


async def robots_bomb(w: Writer) -> None:
    await send_body(w, "gzip", GZIP_BOMB)


async def ok_page(w: Writer) -> None:
    body = b"<html>fine</html>"
    w.write(head(Content_Type="text/html", Content_Length=str(len(body))) + body)
    await w.drain()


def bomb(encoding: str, body: bytes) -> Handler:
    return lambda w: send_body(w, encoding, body)


ROUTES: dict[str, Handler] = {
    **{f"/bomb/{name}": bomb(encoding, body) for name, (encoding, body) in BODIES.items()},
    "/endless-chunked": endless_chunked,
    "/endless-gzip": endless_gzip,
    "/slow-drip": slow_drip,
    "/drip-headers": drip_headers,
    "/endless-headers": endless_headers,
    "/huge-header-line": huge_header_line,
    "/many-headers": many_small_headers,
    "/length-lie-close": length_lie_then_close,
    "/length-lie-hang": length_lie_then_hang,
    "/length-lie-endless": length_lie_endless,
    "/length-overflow": length_overflow,
    "/length-negative": length_negative,
    "/corrupt-br": lambda w: corrupt(w, "br"),
    "/corrupt-gzip": lambda w: corrupt(w, "gzip"),
    "/corrupt-deflate": lambda w: corrupt(w, "deflate"),
    "/stacked-encodings": stacked_encodings,
    "/zstd-bomb": zstd_bomb,
    "/robots.txt": robots_bomb,
    "/page": ok_page,
}


@dataclass
class Server:
    port: int
    requests: list[str]


@asynccontextmanager
async def hostile_server() -> AsyncIterator[Server]:
    tasks: set[asyncio.Task[None]] = set()
    requests: list[str] = []

    async def serve(reader: asyncio.StreamReader, writer: Writer) -> None:
        tasks.add(asyncio.current_task())  # type: ignore[arg-type]
        try:
            request_head = await reader.readuntil(b"\r\n\r\n")
            path = request_head.split(b" ", 2)[1].decode()
            requests.append(path)
            await ROUTES[path](writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the fetcher hung up: what every endless route waits for
        except asyncio.CancelledError:
            pass  # the test is over (ends quietly: a cancelled stream handler is logged as an error)
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        yield Server(server.sockets[0].getsockname()[1], requests)
    finally:
        server.close()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await server.wait_closed()


@dataclass
class Measured:
    out: FetchOutcome
    seconds: float
    peak_bytes: int


def fetch(path: str, **kw: Any) -> Measured:
    async def go() -> Measured:
        async with hostile_server() as server:
            config = FetchSettings(
                user_agent="crawlstream-adversarial/1.0",
                allow_private_networks=True,
                timeout_s=TIMEOUT_S,
                read_timeout_s=READ_TIMEOUT_S,
                max_body_bytes=CAP_BYTES,
            )
            settings = {f.name for f in fields(FetchSettings)}
            config = replace(config, **{k: v for k, v in kw.items() if k in settings})
            opts: dict[str, Any] = dict(
                resolve_map={HOST: ("127.0.0.1", server.port)}, resolve_map_only=True, obey_robots=False
            )
            opts.update((k, v) for k, v in kw.items() if k not in settings)
            fetcher = Fetcher(config=config, **opts)
            tracemalloc.start()
            started = time.monotonic()
            try:
                out = await fetcher.afetch(f"http://{HOST}{path}")
                seconds = time.monotonic() - started
                peak = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
                await fetcher.aclose()
            return Measured(out, seconds, peak)

    return run(go())


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(asyncio.wait_for(coro, 20))


# -- bombs ------------------------------------------------------------------------------------


def test_bomb_payloads_really_are_bombs() -> None:
    for name, (_encoding, body) in BODIES.items():
        if name != "gzip-of-gzip":
            assert len(body) * 100 < BOMB_BYTES, name  # over 100:1


@pytest.mark.parametrize("name", sorted(set(BODIES) - {"gzip-of-gzip"}))
def test_bomb_is_cut_at_the_decoded_cap_with_bounded_memory(name: str) -> None:
    m = fetch(f"/bomb/{name}")
    assert m.out.outcome == "ok" and m.out.truncated
    assert m.out.body_size_bytes == len(m.out.body) == CAP_BYTES and m.out.body == bytes(CAP_BYTES)
    assert m.peak_bytes < MEMORY_BUDGET_BYTES, f"{m.peak_bytes / MiB:.1f} MiB"


@pytest.mark.parametrize("name", sorted(set(BODIES) - {"gzip-of-gzip"}))
def test_bomb_under_a_large_cap_is_abandoned_by_the_ratio_limit(name: str) -> None:
    """With a cap above the bomb the ratio guard stops it soon after 1 MiB decoded."""
    m = fetch(f"/bomb/{name}", max_body_bytes=64 * MiB)
    assert m.out.outcome == "too_large" and m.out.truncated and "ratio" in m.out.error
    assert m.out.body_size_bytes <= 2 * MiB
    assert m.peak_bytes < 4 * 2 * MiB + MiB, f"{m.peak_bytes / MiB:.1f} MiB"


def test_nested_gzip_is_decoded_once_and_the_inner_bomb_stays_packed() -> None:
    m = fetch("/bomb/gzip-of-gzip")
    assert m.out.outcome == "ok" and not m.out.truncated
    assert m.out.body == GZIP_BOMB


def test_stacked_content_encodings_are_refused_undecoded() -> None:
    m = fetch("/stacked-encodings")
    assert m.out.outcome == "error" and "not supported" in m.out.error
    assert m.peak_bytes < MEMORY_BUDGET_BYTES


def test_zstd_body_we_never_asked_for_is_refused_undecoded() -> None:
    m = fetch("/zstd-bomb")
    assert m.out.outcome == "error" and "zstd" in m.out.error
    assert m.peak_bytes < MEMORY_BUDGET_BYTES


def test_endless_gzip_stream_is_cut_at_the_cap() -> None:
    m = fetch("/endless-gzip")
    assert m.out.outcome == "ok" and m.out.truncated and m.out.body_size_bytes == CAP_BYTES
    assert m.seconds < TIMEOUT_S
    assert m.peak_bytes < MEMORY_BUDGET_BYTES


def test_endless_gzip_stream_under_a_large_cap_is_too_large() -> None:
    m = fetch("/endless-gzip", max_body_bytes=64 * MiB)
    assert m.out.outcome == "too_large" and m.out.body_size_bytes <= 2 * MiB


@pytest.mark.parametrize("encoding", ["br", "gzip", "deflate"])
def test_corrupt_compressed_body_is_an_error_outcome_not_an_exception(encoding: str) -> None:
    """Regression (br): brotli's own ``brotli.error`` escaped ``afetch`` and would stop the fetcher service."""
    m = fetch(f"/corrupt-{encoding}")
    assert m.out.outcome == "error" and m.out.error


def test_robots_txt_bomb_is_capped_and_the_page_still_fetched() -> None:
    m = fetch("/page", obey_robots=True)
    assert m.out.outcome == "ok" and m.out.body == b"<html>fine</html>"
    assert m.peak_bytes < MEMORY_BUDGET_BYTES + MAX_ROBOTS_BYTES


# -- endless and slow bodies -------------------------------------------------------------------


def test_endless_chunked_body_is_cut_at_the_cap() -> None:
    m = fetch("/endless-chunked")
    assert m.out.outcome == "ok" and m.out.truncated and m.out.body_size_bytes == CAP_BYTES
    assert m.seconds < TIMEOUT_S
    assert m.peak_bytes < MEMORY_BUDGET_BYTES


def test_slow_drip_body_ends_at_the_total_timeout() -> None:
    m = fetch("/slow-drip")
    assert m.out.outcome == "timeout" and m.out.status == 0
    assert TIMEOUT_S * 0.8 <= m.seconds < TIMEOUT_S + 1.0


def test_content_length_lie_then_close_is_a_lost_connection() -> None:
    """A body cut short by the close: connect_error, which the scheduler retries a bounded
    number of times (a reset mid-response is usually transient)."""
    m = fetch("/length-lie-close")
    assert m.out.outcome == "connect_error" and m.out.error and "connection lost" in m.out.error
    assert m.seconds < TIMEOUT_S


def test_content_length_lie_then_silence_times_out() -> None:
    m = fetch("/length-lie-hang")
    assert m.out.outcome == "timeout"
    assert m.seconds < TIMEOUT_S + 1.0


def test_content_length_lie_with_endless_bytes_is_cut_at_the_cap() -> None:
    m = fetch("/length-lie-endless")
    assert m.out.outcome == "ok" and m.out.truncated and m.out.body_size_bytes == CAP_BYTES
    assert m.peak_bytes < MEMORY_BUDGET_BYTES


@pytest.mark.parametrize("path", ["/length-overflow", "/length-negative"])
def test_unparseable_content_length_is_an_error_outcome(path: str) -> None:
    m = fetch(path)
    assert m.out.outcome == "error" and m.out.error


# -- heads that never end ----------------------------------------------------------------------


def test_head_dripping_forever_times_out() -> None:
    m = fetch("/drip-headers")
    assert m.out.outcome == "timeout"
    assert m.seconds < TIMEOUT_S + 1.0


@pytest.mark.parametrize("path", ["/endless-headers", "/huge-header-line", "/many-headers"])
def test_oversized_head_is_refused_with_bounded_memory(path: str) -> None:
    m = fetch(path)
    assert m.out.outcome in ("error", "timeout") and m.out.error
    assert m.seconds < TIMEOUT_S + 1.0
    assert m.peak_bytes < MEMORY_BUDGET_BYTES, f"{m.peak_bytes / MiB:.1f} MiB"
