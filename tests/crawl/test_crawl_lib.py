"""The run's orchestration pieces: drain detection, lag, crawl stats, progress, seeds, runner."""

from __future__ import annotations

import dataclasses
import io
import json
import threading
from pathlib import Path

import pytest

from crawlstream.bus import EmbeddedBus, TopicPartition
from crawlstream.cli import main
from crawlstream.crawl import (
    BusLag,
    CrawlRunner,
    CrawlStats,
    CrawlSummary,
    DrainDetector,
    LagProbe,
    Progress,
    ProgressReporter,
    RateMeter,
    ServiceSpec,
    StatsHandler,
    is_idle,
    load_stats,
    read_seeds,
    seed_events,
)
from crawlstream.crawl._progress import eta_seconds, format_progress
from crawlstream.errors import ConfigError
from crawlstream.events import EventCodec, EventProducer, FetchResult
from crawlstream.runtime import ServiceLoop
from crawlstream.settings import Settings
from crawlstream.topics import FETCH_RESULTS

T = TopicPartition("t", 0)


def _lag(lag: int, end: int = 5) -> BusLag:
    return BusLag({T: end}, lag, {"g": lag})


def test_idle_needs_no_lag_no_scheduler_work_and_no_growth_during_the_check() -> None:
    assert is_idle(_lag(0), 0, _lag(0))
    assert not is_idle(_lag(1), 0, _lag(0))
    assert not is_idle(_lag(0), 1, _lag(0))
    assert not is_idle(_lag(0), 0, _lag(0, end=6))  # something was produced and consumed meanwhile


def test_drain_detector_needs_consecutive_idle_checks() -> None:
    d = DrainDetector(2)
    assert [d.observe(x) for x in (True, False, True, True)] == [False, False, False, True]


def test_lag_probe_reads_group_commits_against_log_ends(tmp_path: Path) -> None:
    with EmbeddedBus(tmp_path / "bus", default_partitions=2) as bus:
        bus.create_topics(["t"], 2)
        producer = bus.producer()
        for i in range(5):
            producer.produce("t", b"x", partition=i % 2)
        producer.flush()
        member = bus.consumer("g")
        member.subscribe(["t"])
        got = member.consume(10, 1.0)
        member.commit({TopicPartition("t", 0): 2})  # 2 of partition 0's 3 messages
        probe = LagProbe({"g": bus.consumer("g")}, {"g": ["t"]}, bus.end_offsets)
        lag = probe.read()
        probe.close()
        member.close()
        producer.close()
    assert len(got) == 5
    assert lag.ends == {TopicPartition("t", 0): 3, TopicPartition("t", 1): 2}
    assert lag.lag == 1 + 2 and lag.lag_by_group == {"g": 3}


def _result(i: int, status: int = 200, outcome: str = "ok", truncated: bool = False) -> FetchResult:
    return FetchResult(
        url=f"http://a{i}.com/", url_key=i, domain=f"a{i}.com", depth=0, status=status, outcome=outcome,
        fetched_at_ms=0, elapsed_ms=1, attempt=0, truncated=truncated,
    )  # fmt: skip


def _count(bus: EmbeddedBus, path: Path, until: int) -> StatsHandler:
    consumer = bus.consumer("stats")
    handler = StatsHandler(path, consumer, save_interval_s=0.0)
    loop = ServiceLoop(
        service="stats", consumer=consumer, topics=[FETCH_RESULTS], codec=EventCodec.from_settings(Settings()),
        handler=handler, dlq_producer=bus.producer(), poll_timeout_s=0.05,
    )  # fmt: skip
    for _ in range(50):
        loop.run_once()
        if handler.stats.results >= until:
            break
    handler.save()
    loop.close()
    return handler


def test_crawl_stats_survive_a_restart_without_double_counting(tmp_path: Path) -> None:
    path = tmp_path / "stats.json"
    codec = EventCodec.from_settings(Settings())
    with EmbeddedBus(tmp_path / "bus", default_partitions=2) as bus:
        bus.create_topics([FETCH_RESULTS], 2)
        out = EventProducer(bus.producer(), codec)
        for i in range(6):
            out.send(FETCH_RESULTS, _result(i, status=0 if i == 5 else 200, outcome="timeout" if i == 5 else "ok"))
        out.producer.close()
        first = _count(bus, path, 6)
    # as if the process died after saving the stats but before committing: the group
    # starts over from offset 0, and the file says what was counted already
    (tmp_path / "bus" / "groups" / "stats" / "offsets.json").unlink()
    with EmbeddedBus(tmp_path / "bus", default_partitions=2) as bus:
        out = EventProducer(bus.producer(), codec)
        out.send(FETCH_RESULTS, _result(7, status=503, truncated=True))
        out.producer.close()
        second = _count(bus, path, 7)
    assert first.stats.results == 6 and first.stats.pages == 5 and first.stats.errors == 1
    stats = load_stats(path)
    assert second.stats.results == stats.results == 7
    assert stats.pages == 6 and stats.by_status[503] == 1 and stats.truncated == 1
    assert stats.errors == 2  # the timeout and the 503


def test_damaged_stats_file_recounts_from_the_start(tmp_path: Path) -> None:
    path = tmp_path / "stats.json"
    path.write_text("{not json")
    assert load_stats(path) == CrawlStats()


def _progress(pages: int = 10) -> Progress:
    return Progress(elapsed_s=65, pages=pages, pages_per_s=2.5, queued_urls=7, domains_waiting=3, in_flight=1,
                    errors=0, lag=4)  # fmt: skip


def test_progress_on_a_terminal_is_one_line_rewritten_in_place() -> None:
    stream = io.StringIO()
    reporter = ProgressReporter(stream, is_tty=True)
    reporter.update(_progress(1))
    reporter.update(_progress(2))
    reporter.close()
    text = stream.getvalue()
    assert text.count("\r") == 2 and text.endswith("\n") and text.count("\n") == 1
    assert "0:01:05 pages 2 (2.5/s)" in text and "domains 3 waiting" in text and "ETA" not in text


def test_progress_shows_an_eta_when_the_crawl_has_a_page_budget() -> None:
    assert eta_seconds(40, 100, 2.0) == 30.0
    assert eta_seconds(40, 0, 2.0) is None and eta_seconds(40, 100, 0.0) is None
    line = format_progress(dataclasses.replace(_progress(), eta_s=75.0))
    assert line.endswith("| ETA 0:01:15")


def test_progress_off_a_terminal_is_a_plain_line_every_interval() -> None:
    now = [0.0]
    stream = io.StringIO()
    reporter = ProgressReporter(stream, is_tty=False, log_interval_s=5.0, clock=lambda: now[0])
    for t in (0.0, 1.0, 4.9, 5.0, 6.0, 10.1):
        now[0] = t
        reporter.update(_progress())
    reporter.close()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 3 and "\r" not in stream.getvalue()  # at 0, 5.0 and 10.1
    assert all(line.startswith("0:01:05 pages 10 (2.5/s)") for line in lines)


def test_rate_meter_uses_a_moving_window() -> None:
    meter = RateMeter(window_s=10)
    assert meter.update(0, 0) == 0
    assert meter.update(5, 50) == 10
    assert meter.update(20, 50) == 0  # nothing in the last 15 s: the burst at 0..5 s left the window
    assert meter.update(21, 66) == pytest.approx(16 / 16)


def test_seeds_come_from_urls_and_files_canonical_and_unique(tmp_path: Path) -> None:
    f = tmp_path / "seeds.txt"
    f.write_text("# comment\n\nHTTP://Example.COM/a#x\nhttp://b.org\nnot a url at all\n")
    urls = read_seeds(["http://example.com/a", str(f)])
    assert urls == ["http://example.com/a", "http://b.org/"]
    events = seed_events(urls, 123, 1)
    assert [(e.depth, e.source, e.domain) for e in events] == [(0, "seed", "example.com"), (0, "seed", "b.org")]


def test_seed_lines_may_carry_a_priority_as_crawlstream_seed_reads_them(tmp_path: Path) -> None:
    f = tmp_path / "seeds.txt"
    f.write_text(
        "http://a.org/x 7\nHTTP://B.org/\t+3\nhttp://c.org/ 0\nhttp://a.org/x 9\n"
        "http://d.org/ 99999999999\nhttp://e.org/ -1\nhttp://f.org/plain\n"
    )
    priorities: dict[str, int] = {}
    urls = read_seeds([str(f)], raw=True, priorities=priorities)
    # the first line of a URL wins; 0 is normal; out-of-range priorities skip their line
    assert urls == ["http://a.org/x", "HTTP://B.org/", "http://c.org/", "http://f.org/plain"]
    assert priorities == {"http://a.org/x": 7, "HTTP://B.org/": 3}
    events = seed_events(urls, 123, 1, priorities=priorities)
    assert [(e.url, e.priority, e.raw_url) for e in events] == [
        ("http://a.org/x", 7, None),
        ("http://b.org/", 3, "HTTP://B.org/"),
        ("http://c.org/", None, None),
        ("http://f.org/plain", None, None),
    ]
    canonical: dict[str, int] = {}
    assert read_seeds([str(f)], priorities=canonical)[:2] == ["http://a.org/x", "http://b.org/"]
    assert canonical == {"http://a.org/x": 7, "http://b.org/": 3}


def test_a_missing_seed_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="neither a URL"):
        read_seeds([str(tmp_path / "nope.txt")])


def test_summary_is_one_json_line() -> None:
    stats = CrawlStats()
    stats.add(_result(1), 0, 0)
    line = CrawlSummary("drained", stats, 1, 2.0).to_line()
    assert "\n" not in line
    data = json.loads(line)
    assert data["reason"] == "drained" and data["pages_per_s"] == 0.5 and data["by_status"] == {"200": 1}


class _Service:
    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.stopped = threading.Event()
        self.closed = False

    def run(self) -> None:
        if self.fail:
            raise RuntimeError("boom")
        self.stopped.wait(10)

    def stop(self) -> None:
        self.stopped.set()

    def close(self) -> None:
        self.closed = True


def test_a_failing_service_stops_the_others_and_the_error_surfaces() -> None:
    good, bad = _Service(), _Service(fail=True)
    runner = CrawlRunner(
        [ServiceSpec("good", lambda: good, None, ()), ServiceSpec("bad", lambda: bad, None, ())],
        stop_event=threading.Event(), stats=CrawlStats, probe=LagProbe({}, {}, lambda t: []),
        scheduler_pending=lambda: (0, 0), reporter=ProgressReporter(io.StringIO(), is_tty=False),
        check_interval_s=0.01,
    )  # fmt: skip
    with pytest.raises(RuntimeError, match="boom"):
        runner.run()
    assert good.stopped.is_set() and good.closed and bad.closed


def test_run_without_seeds_on_an_empty_data_dir_is_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CRAWLSTREAM_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("CRAWLSTREAM_BUS_FSYNC", "never")
    assert main(["run", "--exit-when-done", "--services", "deduper,scheduler,fetcher,link-extractor"]) == 2
    assert "no seeds and nothing to resume" in capsys.readouterr().err
