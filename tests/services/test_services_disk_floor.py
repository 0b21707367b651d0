"""The services below the data dir's free-space floor (ADR 033), on a real disk: the parquet sink
pauses (no staging, no lake file, no commit) and resumes by itself; the wiring gives the floor
to every service on the embedded log."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from crawlstream.lake.service import build
from crawlstream.settings import Settings
from tests.durable._ballast import Ballast, floor_mib
from tests.services._support import drain, host_for
from tests.services.test_parquet_sink import CRAWLED_URLS, EXPECTED_SERVED, RECORD_URLS, lake_count, send_events, served

pytestmark = pytest.mark.timeout(60)


def test_parquet_sink_pauses_below_the_floor_and_resumes_exactly_once(make_settings: Callable[..., Settings]) -> None:
    settings = make_settings()
    settings.data_dir.mkdir(parents=True)
    floor = floor_mib(settings.data_dir)
    settings = make_settings(CRAWLSTREAM_DATA_DIR_MIN_FREE_MB=str(floor))
    send_events(settings)
    ballast = Ballast(settings.data_dir, floor)
    with host_for(settings) as host:
        service = build(host, instance="sink-0")
        try:
            ballast.lay()
            try:
                assert [service.loop.run_once() for _ in range(3)] == [0, 0, 0]
                assert service.loop.paused
                assert service.staging.rows == 0 and service.handler.rows_staged == 0
                assert not (settings.data_dir / "urls").exists()
            finally:
                ballast.lift()
            deadline = time.monotonic() + 10
            consumed = 0
            while consumed == 0:  # the floor's reading is up to 1 s old
                assert time.monotonic() < deadline, "the sink did not resume"
                consumed = service.loop.run_once()
            consumed += drain(service.loop)
            assert consumed == len(CRAWLED_URLS) + len(RECORD_URLS)
            assert not service.loop.paused
        finally:
            service.close()
    assert lake_count(settings.data_dir) == 75
    assert served(settings.data_dir) == EXPECTED_SERVED


def test_every_service_pauses_on_the_embedded_log(make_settings: Callable[..., Settings]) -> None:
    """The fetcher and the link extractor write only to the bus; the embedded log is under the
    data dir, so they get the floor too (on Kafka they do not: ``writes_data_dir=False``)."""
    from crawlstream.fetch.service import build as build_fetcher
    from crawlstream.links.service import build as build_links

    settings = make_settings(CRAWLSTREAM_DATA_DIR_MIN_FREE_MB="512")
    with host_for(settings) as host:
        for build_service in (build_fetcher, build_links):
            service = build_service(host)
            try:
                assert service.loop._disk_floor is host.disk_floor is not None
                assert host.disk_floor.min_free_bytes == 512 * 1024 * 1024
            finally:
                service.close()
    off = make_settings(CRAWLSTREAM_DATA_DIR_MIN_FREE_MB="0")
    with host_for(off) as host:
        service = build(host, instance="sink-0")
        try:
            assert host.disk_floor is None and service.loop._disk_floor is None
        finally:
            service.close()
