"""A crawl of the synthetic web exports as a WARC archivists accept (issue 13, ADR 022): the embedded
pipeline (real HTTP on 127.0.0.1, the embedded bus and Redis, the real content store), then
`crawlstream export-warc`. Every response carries the head the server sent (status line and
headers exactly as the fetcher received them, the server's own `Server` header included) and
`WARC-IP-Address: 127.0.0.1`; `warcio check` passes and `cdxj-indexer` indexes every response."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from aiohttp.http import SERVER_SOFTWARE
from warcio.archiveiterator import ArchiveIterator

from crawlstream.bus import EmbeddedBus
from crawlstream.cli import main
from crawlstream.cli._run import run_crawl
from crawlstream.devtools.demoweb import DemoWeb
from crawlstream.events import EventCodec, FetchResult
from crawlstream.runtime import open_host
from crawlstream.settings import Settings, load
from crawlstream.store import open_store
from crawlstream.topics import FETCH_RESULTS

BIN = Path(sys.executable).parent
SERVICES = ("deduper", "scheduler", "fetcher", "link-extractor", "bucket-compressor")


@dataclass
class Crawled:
    data_dir: Path
    settings: Settings
    heads: dict[str, list[bytes]]  # the head of each ok result, by URL (a replay may fetch a page twice)


def _settings(data_dir: Path) -> Settings:
    return load(
        {
            "CRAWLSTREAM_DATA_DIR": str(data_dir),
            "CRAWLSTREAM_BUS_PARTITIONS": "2",
            "CRAWLSTREAM_BUS_FSYNC": "never",
            "CRAWLSTREAM_BUS_POLL_TIMEOUT_S": "0.1",
            "CRAWLSTREAM_DEDUPE_EXPECTED_URLS": "10000",
            "CRAWLSTREAM_SCHEDULER_MIN_DELAY_S": "0.05",
            "CRAWLSTREAM_SCHEDULER_MAX_BACKOFF_S": "0.3",
            "CRAWLSTREAM_FETCH_TIMEOUT_S": "10",  # generous: the machine is shared
            "CRAWLSTREAM_FETCH_ALLOW_PRIVATE_NETWORKS": "true",
            "CRAWLSTREAM_CRAWL_CHECK_INTERVAL_S": "0.2",
        }
    )


def _ok_heads(settings: Settings) -> dict[str, list[bytes]]:
    codec = EventCodec.from_settings(settings)
    out: dict[str, list[bytes]] = {}
    with EmbeddedBus(settings.data_dir / "bus") as bus:
        consumer = bus.consumer("test-reader.warc")
        consumer.subscribe([FETCH_RESULTS])
        while batch := consumer.consume(1000, 0.5):
            for message in batch:
                event = codec.decode(message.value)
                if isinstance(event, FetchResult) and event.outcome == "ok":
                    assert event.response_head is not None and event.ip_address == "127.0.0.1"
                    out.setdefault(event.url, []).append(event.response_head)
        consumer.close()
    return out


@pytest.fixture(scope="module")
def crawled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Crawled]:
    data_dir = tmp_path_factory.mktemp("warc-crawl") / "data"
    settings = _settings(data_dir)
    with DemoWeb(4, pages_per_domain=6, seed=11, special_every=0, crawl_delay_s=0.05) as web:
        with open_host(settings) as host:
            summary = run_crawl(
                host, web.seed_urls(), services=SERVICES, exit_when_done=True, resolve_map=web.resolve_map
            )
        assert summary.reason == "drained"
    yield Crawled(data_dir, settings, _ok_heads(settings))


def test_a_crawl_exports_the_heads_the_server_sent(crawled: Crawled, tmp_path: Path) -> None:
    out = tmp_path / "crawl.warc.gz"
    assert main(["export-warc", "--data-dir", str(crawled.data_dir), str(out)]) == 0
    with open_store(crawled.settings) as store:
        stored = {e.url: store.get(e.url) for e in store.search()}
    assert len(stored) >= 20 and set(stored) <= set(crawled.heads)

    responses, requests = {}, {}
    with open(out, "rb") as fh:
        for record in ArchiveIterator(fh):
            uri = record.rec_headers.get_header("WARC-Target-URI")
            if record.rec_type in ("response", "request"):
                assert record.rec_headers.get_header("WARC-IP-Address") == "127.0.0.1", uri
            if record.rec_type == "response":
                responses[uri] = (record.http_headers, record.content_stream().read())
            if record.rec_type == "request":
                requests[uri] = record.http_headers
    assert set(requests) == set(stored)
    for url, http in requests.items():  # the request the fetcher sent, kept with the page
        parts = urlsplit(url)
        assert http.protocol == "GET" and http.statusline == f"{parts.path or '/'} HTTP/1.1", url
        assert http.get_header("Host") == parts.netloc
        assert http.get_header("User-Agent") == crawled.settings.fetch.user_agent
        assert http.get_header("Accept-Encoding")
    assert set(responses) == set(stored)
    for url, (http, payload) in responses.items():
        assert payload == stored[url]
        # byte for byte what the fetcher received: status line and every header, in order
        assert http.to_str().encode("latin-1") in crawled.heads[url], url
        assert http.protocol == "HTTP/1.1" and http.statusline == "200 OK"
        assert http.get_header("Server") == SERVER_SOFTWARE
        assert http.get_header("Content-Length") == str(len(payload))

    check = subprocess.run([str(BIN / "warcio"), "check", "-v", str(out)], capture_output=True, text=True, timeout=120)
    assert check.returncode == 0, check.stdout + check.stderr
    cdxj = subprocess.run(
        [str(BIN / "cdxj-indexer"), str(out)], capture_output=True, text=True, cwd=tmp_path, check=True, timeout=120
    )
    indexed = [json.loads(line.split(" ", 2)[2]) for line in cdxj.stdout.splitlines()]
    assert sorted(line["url"] for line in indexed) == sorted(stored)
    assert {line["status"] for line in indexed} == {"200"}
