"""Replay cost: ``crawlstream replay`` events/s and CPU per million events, embedded log vs Kafka.

A URL dataset of real URLs (``urls/ada-url-various-datasets/kasztp.txt.gz``, 48,010 lines,
repeated under several dataset ids to reach the count) is produced to ``urls.records`` on
each backend; then ``replay_into`` (what the command runs) rebuilds the lake and the index
into an empty directory. Reported per backend, in the same run: replay events/s (consume,
decode, canonicalize, stage, write the lake) and the index build after it, this process's
CPU per million events, and on Kafka the broker's CPU too (its JVM, read from /proc).

``python -m bench replay [--quick]``
"""

from __future__ import annotations

import gzip
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._harness import shared_data
from crawlstream.events import UrlRecord
from crawlstream.settings import Settings
from crawlstream.settings._settings import BusSettings
from crawlstream.topics import CONTENT_STORED, URLS_RECORDS


def _urls() -> list[str]:
    """The list's valid URLs (a replay source holds only what producers could key by domain)."""
    from crawlstream.errors import InvalidUrl
    from crawlstream.urls import canonicalize

    path = shared_data() / "urls" / "ada-url-various-datasets" / "kasztp.txt.gz"
    with gzip.open(path, "rt", encoding="utf-8-sig", errors="replace") as lines:
        out = []
        for line in lines:
            try:
                out.append(canonicalize(line.strip()).url)
            except InvalidUrl:
                continue
        return out


def _jvm_cpu_s(pid: int | None) -> float:
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks  # utime + stime


def _replay_once(settings: Settings, count: int, urls: list[str], broker_pid: Any = None) -> dict[str, Any]:
    from crawlstream.cli._replay import replay_into
    from crawlstream.replay import prepare_target
    from crawlstream.runtime import open_host

    with open_host(settings) as host:
        events = host.event_producer()
        started = time.perf_counter()
        for i in range(count):
            events.send(URLS_RECORDS, UrlRecord(1 + i // len(urls), urls[i % len(urls)], ts_ms=1_700_000_000_000 + i))
        events.flush()
        produce_s = time.perf_counter() - started
    into = settings.data_dir.parent / "rebuilt"
    state, _ = prepare_target(into, [CONTENT_STORED, URLS_RECORDS])
    cpu0, wall0, broker0 = time.process_time(), time.perf_counter(), _jvm_cpu_s(broker_pid() if broker_pid else None)
    with open(os.devnull, "w") as quiet:
        summary = replay_into(settings, into, state, progress_out=quiet)
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    broker = _jvm_cpu_s(broker_pid() if broker_pid else None) - broker0
    index_s = float(summary["index"].get("seconds", 0.0)) if isinstance(summary.get("index"), dict) else 0.0
    replay_s = wall - index_s
    per_million = 1e6 / count
    return {
        "events": count,
        "produce_events_per_s": round(count / produce_s),
        "replay_events_per_s": round(count / replay_s),
        "replay_plus_index_events_per_s": round(count / wall),
        "index_build_s": round(index_s, 2),
        "wall_s_per_million_events": round(wall * per_million, 1),
        "client_cpu_s_per_million_events": round(cpu * per_million, 1),
        "broker_cpu_s_per_million_events": round(broker * per_million, 1) if broker_pid else None,
        "dead_lettered": summary["dead_lettered"],
    }


def run(quick: bool) -> dict[str, Any]:
    from crawlstream.devtools.localkafka import LocalKafka

    count = 20_000 if quick else 300_000
    urls = _urls()
    out: dict[str, Any] = {"load_avg_1m_before": round(os.getloadavg()[0], 2)}
    with tempfile.TemporaryDirectory(prefix="bench-replay-") as tmp:
        base = Path(tmp)
        embedded = Settings(data_dir=base / "embedded" / "live", bus=BusSettings(partitions=8, fsync="batch"))
        out["embedded"] = _replay_once(embedded, count, urls)
        with LocalKafka(brokers=1, data_dir=base / "kafka-cluster") as kafka:
            on_kafka = Settings(
                data_dir=base / "kafka" / "live",
                kafka_bootstrap_servers=kafka.bootstrap_servers,
                bus=BusSettings(partitions=8),
            )
            out["kafka"] = _replay_once(on_kafka, count, urls, broker_pid=lambda: kafka.pid_of(1))
    out["kafka_vs_embedded_replay_events_per_s"] = round(
        out["kafka"]["replay_events_per_s"] / out["embedded"]["replay_events_per_s"], 2
    )
    out["load_avg_1m_after"] = round(os.getloadavg()[0], 2)
    return out


if __name__ == "__main__":
    from bench._harness import main

    main(run)
