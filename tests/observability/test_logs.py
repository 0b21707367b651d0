"""configure_logging: text or one JSON object per line, to stderr or a file, with the service and
the call site's partition/url_key."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from crawlstream.logs import configure_logging, log_fields, service_context, set_default_service


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    level = root.level
    yield
    configure_logging("WARNING")  # removes the test's handler; pytest's own keep stderr
    root.setLevel(level)
    set_default_service(None)


def _json_lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_json_format_writes_one_object_per_line_with_the_context_fields(tmp_path: Path) -> None:
    log_file = tmp_path / "logs" / "crawlstream.log"
    configure_logging("INFO", fmt="json", file=log_file)
    log = logging.getLogger("crawlstream.test")
    with service_context("fetcher"):
        log.warning("fetch of %s failed:\nline two", "u", extra=log_fields(partition=3, url_key="00ab", topic=None))
    log.info("no context")
    log.debug("below the level")

    first, second = _json_lines(log_file)
    assert first["level"] == "WARNING"
    assert first["logger"] == "crawlstream.test"
    assert first["message"] == "fetch of u failed:\nline two"
    assert first["service"] == "fetcher"
    assert first["partition"] == 3
    assert first["url_key"] == "00ab"
    assert "topic" not in first
    assert str(first["ts"]).endswith("Z") and str(first["ts"])[10] == "T"
    assert second["service"] is None
    assert set(second) == {"ts", "level", "logger", "message", "service"}


def test_service_is_per_thread_over_the_process_default(tmp_path: Path) -> None:
    log_file = tmp_path / "x.log"
    configure_logging("INFO", fmt="json", file=log_file)
    set_default_service("scheduler")
    log = logging.getLogger("crawlstream.test")

    def on_thread() -> None:
        with service_context("deduper"):
            log.info("from the deduper's thread")

    thread = threading.Thread(target=on_thread)
    thread.start()
    thread.join()
    log.info("from the main thread")

    assert [line["service"] for line in _json_lines(log_file)] == ["deduper", "scheduler"]


def test_json_lines_carry_the_traceback(tmp_path: Path) -> None:
    log_file = tmp_path / "x.log"
    configure_logging("INFO", fmt="json", file=log_file)
    try:
        raise ValueError("boom")
    except ValueError:
        logging.getLogger("crawlstream.test").exception("handler failed")
    (line,) = _json_lines(log_file)
    assert "ValueError: boom" in str(line["exc"])


def test_a_second_call_replaces_the_first_handler(tmp_path: Path) -> None:
    first, second = tmp_path / "1.log", tmp_path / "2.log"
    configure_logging("INFO", file=first)
    configure_logging("INFO", fmt="json", file=second)
    logging.getLogger("crawlstream.test").info("only in the second")
    assert first.read_text() == ""
    assert _json_lines(second)[0]["message"] == "only in the second"


def test_stderr_is_left_to_handlers_someone_else_installed(tmp_path: Path) -> None:
    """As logging.basicConfig: an embedding application's (here pytest's) handlers keep stderr."""
    root = logging.getLogger()
    before = list(root.handlers)
    assert before, "pytest's capture handlers are on the root logger"
    configure_logging("INFO", fmt="json", file=tmp_path / "x.log")
    assert len(root.handlers) == len(before) + 1
    configure_logging("INFO", fmt="json")
    assert root.handlers == before


def test_text_format_is_the_default(tmp_path: Path) -> None:
    log_file = tmp_path / "x.log"
    configure_logging("INFO", file=log_file)
    logging.getLogger("crawlstream.test").info("hello %d", 7)
    assert log_file.read_text().rstrip().endswith(" INFO crawlstream.test: hello 7")


def test_log_fields_refuses_unknown_names() -> None:
    with pytest.raises(TypeError, match="not a log context field"):
        log_fields(body="x")


def test_an_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="text, json"):
        configure_logging("INFO", fmt="xml")


def test_the_cli_logs_json_lines_to_stderr_when_the_env_asks(tmp_path: Path) -> None:
    """CRAWLSTREAM_LOG_FORMAT=json: the log lines of a real command are JSON objects (its progress
    line, which is not a log line, stays text)."""
    env = {"CRAWLSTREAM_LOG_FORMAT": "json", "CRAWLSTREAM_LOG_LEVEL": "DEBUG", "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(
        [sys.executable, "-m", "crawlstream", "seed", "--data-dir", str(tmp_path), "--seeds", "https://example.com/"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stderr.splitlines() if line.startswith("{")]
    assert lines, "the command logged nothing"
    assert {"ts", "level", "logger", "message", "service"} <= set(lines[0])
    assert any(line["logger"] == "crawlstream.cli" for line in lines)  # the effective-settings line
