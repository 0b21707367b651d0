"""The deployment's own Redis (``crawlstream.devtools.deployment.LocalRedis``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from redis import Redis

from crawlstream.devtools.deployment import LocalRedis


def test_a_relative_directory_starts_and_survives_a_restart(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`make soak SOAK_DIR=../../soak-2h/x` failed at once: redis-server changes into its --dir
    before it opens its log file, so a relative log path named a directory that did not exist."""
    monkeypatch.chdir(tmp_path)
    with LocalRedis(Path("run") / "redis") as server:
        Redis.from_url(server.url).set("k", "v")
        server.stop()
        server.start()
        assert Redis.from_url(server.url).get("k") == b"v"
    assert (tmp_path / "run" / "redis" / "redis.log").stat().st_size > 0
