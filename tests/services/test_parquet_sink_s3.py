"""The parquet sink with its lake on S3: its staging log stays local (ADR 028), its files go to
the lake's store; a publication the S3 outage interrupts leaves no object and the staged rows."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from crawlstream.devtools.locals3 import LocalS3
from crawlstream.errors import StorageUnavailable
from crawlstream.index import IndexBuilder
from crawlstream.lake._staging import StagingLog
from crawlstream.lake.service import build, staging_root
from crawlstream.objectstore import lake_location, open_objects
from crawlstream.settings import Settings
from tests.index._s3 import mirror
from tests.services._support import drain, host_for
from tests.services.test_parquet_sink import EXPECTED_SERVED, run_sink, send_events, served


def test_a_publication_interrupted_by_an_outage_keeps_the_staged_rows_and_leaves_no_object(
    make_settings: Callable[..., Settings], s3_server: LocalS3, s3_prefix: str, tmp_path: Path
) -> None:
    settings = make_settings(CRAWLSTREAM_LAKE_URI=s3_prefix, CRAWLSTREAM_S3_DEADLINE_S="1",
                             CRAWLSTREAM_LAKE_SINK_FLUSH_INTERVAL_S="3600", **s3_server.env)
    lake = open_objects(lake_location(settings), settings.s3)
    send_events(settings)
    with host_for(settings) as host:
        service = build(host, instance="sink-0")
        drain(service.loop)  # 75 rows staged (fsynced) and committed, none published yet
        s3_server.stop(keep_data=True)
        try:
            with pytest.raises(StorageUnavailable):
                service.close()  # a clean stop publishes what is staged: S3 is down
        finally:
            s3_server.restart()
    assert lake.list() == []  # nothing at all under the lake's prefix: no half object
    staged = StagingLog(staging_root(settings) / "sink-0")
    assert len(staged.replay()) == 75
    staged.close()
    run_sink(settings)  # recovers the staging log into the lake
    assert len(lake.list("urls")) > 0
    IndexBuilder.from_settings(settings).build()
    assert served(mirror(lake, tmp_path / "mirror"), build=False) == EXPECTED_SERVED
