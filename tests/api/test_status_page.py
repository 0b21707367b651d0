"""The ``/status`` page in a real headless Chromium (Debian's package, driven by Playwright),
against a real ``crawlstream serve`` and a real ``crawlstream run`` of the synthetic web.

Skipped only when no Chromium is installed and ``CI`` is not set (``make chromium`` installs
it; ``make test`` depends on it); under CI a missing Chromium fails. A screenshot of the page
is kept in ``test-artifacts/`` at the repository root (git-ignored).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from crawlstream.devtools.demoweb import DemoWeb
from crawlstream.devtools.localproc import free_port
from tests.e2e.e2e_support import crawl_env

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts"
_CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
_CHROMIUM_PATHS = ("/usr/lib/chromium/chromium", "/usr/bin/chromium")


def _chromium() -> str:
    """The system Chromium's path, or skip (fail under CI) when there is none."""
    for name in _CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    for path in _CHROMIUM_PATHS:
        if os.access(path, os.X_OK):
            return path
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail("no chromium binary found under CI: `make chromium` (apt-get install chromium) must run first")
    pytest.skip("no chromium binary found: run `make chromium` (apt-get install chromium) to run the status page test")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    executable = _chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        args = ["--no-sandbox"] if os.geteuid() == 0 else []
        b = pw.chromium.launch(executable_path=executable, headless=True, args=args)
        try:
            yield b
        finally:
            b.close()


def _env(data_dir: Path, **extra: str) -> dict[str, str]:
    """A fast, polite crawl of the synthetic web (tests/e2e's settings), quiet on stderr."""
    quiet = {"CRAWLSTREAM_LOG_LEVEL": "WARNING", "CRAWLSTREAM_SCHEDULER_MAX_RETRIES": "1"}
    return {**os.environ, **crawl_env(data_dir, **{**quiet, **extra})}


@contextmanager
def _serve(env: dict[str, str]) -> Iterator[str]:
    """``crawlstream serve`` on a free loopback port; yields its base URL; SIGTERM at the end.

    The port is free when chosen but may be taken before the server binds it (other test
    processes share the machine): a server that exits saying so is started again on another."""
    for attempt in range(3):
        port = free_port()
        proc = subprocess.Popen(
            [sys.executable, "-m", "crawlstream", "serve"],
            env={**env, "CRAWLSTREAM_API_PORT": str(port)},
            cwd=REPO,
            stderr=subprocess.PIPE,
        )
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while proc.poll() is None:
            try:
                with urllib.request.urlopen(base + "/status", timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    proc.kill()
                    proc.wait(5)
                    pytest.fail("crawlstream serve did not listen within 30 s")
                time.sleep(0.1)
        if proc.poll() is None:
            break
        err = proc.stderr.read().decode() if proc.stderr else ""
        if "cannot listen" not in err or attempt == 2:
            pytest.fail(f"crawlstream serve exited {proc.returncode}: {err[-2000:]}")
    try:
        yield base
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


def _json_value(doc: dict[str, Any], field: str) -> Any:
    """The value a ``data-field`` of the page names in a ``/v1/status`` answer."""
    if field.startswith("services."):
        group, key = field.removeprefix("services.").rsplit(".", 1)
        return next(s[key] for s in doc["services"] if s["group"] == group)
    if field.startswith("errors.by_kind."):
        return doc["errors"]["by_kind"][field.removeprefix("errors.by_kind.")]
    if field.startswith("errors.dlq."):
        return doc["errors"]["dlq"][field.removeprefix("errors.dlq.")]
    if field.startswith("top_domains."):
        domain = field.removeprefix("top_domains.")
        return next(d["pages"] for d in doc["top_domains"]["items"] if d["domain"] == domain)
    value: Any = doc
    for part in field.split("."):
        value = None if value is None else value.get(part)
    return value


def _shown(page: Any) -> list[dict[str, str]]:
    return list(
        page.eval_on_selector_all(
            "[data-field]",
            "els => els.map(e => ({field: e.dataset.field, format: e.dataset.format ?? 'int', "
            "value: e.dataset.value ?? '', text: e.textContent}))",
        )
    )


def _human_age(seconds: float) -> str:
    """How the page writes an age (the test's own statement of it)."""
    s = max(0, round(seconds))
    if s < 10:
        return "just now"
    if s < 60:
        return f"{s} s ago"
    minutes = round(s / 60)
    if minutes < 60:
        return f"{minutes} min ago"
    if minutes < 24 * 60:
        big, small = f"{minutes // 60} h", f"{minutes % 60} min" if minutes % 60 else ""
    else:
        big, small = f"{minutes // 1440} d", f"{minutes % 1440 // 60} h" if minutes % 1440 // 60 else ""
    return " ".join(filter(None, (big, small, "ago")))


def test_the_age_wording() -> None:
    assert [_human_age(s) for s in (0, 9.4, 42, 2566, 3590, 7500, 7200, 93784)] == [
        "just now", "just now", "42 s ago", "43 min ago", "1 h ago", "2 h 5 min ago", "2 h ago", "1 d 2 h ago",
    ]  # fmt: skip


def _assert_page_shows(doc: dict[str, Any], shown: list[dict[str, str]]) -> None:
    """Every number on the page is the answer's: its raw value exactly; counts also as text."""
    assert shown
    for el in shown:
        expected = _json_value(doc, el["field"])
        if expected is None:
            assert (el["value"], el["text"]) == ("", "n/a"), el
            continue
        if el["format"] == "age":
            assert float(el["value"]) == expected and el["text"] == _human_age(expected), el
            continue
        if isinstance(expected, float):  # JavaScript writes 2.0 as "2"
            assert float(el["value"]) == expected, el
            shown_text = el["text"].split()[0].rstrip("x")  # "8.2", "1.23x": rounded as shown
            decimals = len(shown_text.partition(".")[2])
            assert float(shown_text) == pytest.approx(expected, abs=0.5 * 10**-decimals + 1e-9), el
            continue
        assert el["value"] == str(expected), el
        if isinstance(expected, int) and not el["text"].endswith("B"):  # bytes: formatted
            assert el["text"] == str(expected), el


def _next_render(page: Any) -> dict[str, Any]:
    """The next ``/v1/status`` answer the page receives, once the page shows it."""
    with page.expect_response(lambda r: r.url.endswith("/v1/status"), timeout=15_000) as info:
        pass
    doc: dict[str, Any] = info.value.json()
    page.wait_for_function(
        "at => document.body.dataset.generatedAt === at", arg=str(doc["generated_at_ms"]), timeout=5_000
    )
    return doc


def _console_errors(page: Any) -> list[str]:
    errors: list[str] = []
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(f"uncaught: {exc}"))
    return errors


def test_status_page_shows_the_api_numbers_and_follows_a_running_crawl(browser: Any, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    env = _env(data_dir)
    small = {"huge_bytes": 262144, "bomb_bytes": 1 << 20, "sitemap_bomb_bytes": 1 << 20}  # the specials, cheaper
    with DemoWeb(8, pages_per_domain=6, seed=4, crawl_delay_s=0.2, slow_s=2.0, **small) as web, _serve(env) as base:
        resolve_map = tmp_path / "resolve.json"
        resolve_map.write_text(json.dumps(web.resolve_map))
        crawl = subprocess.Popen(
            [sys.executable, "-m", "crawlstream", "run", "--seeds", *web.seed_urls()],  # runs until SIGTERM
            env={**env, "CRAWLSTREAM_FETCH_RESOLVE_MAP_FILE": str(resolve_map)},
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        page = browser.new_page(viewport={"width": 1200, "height": 1000})
        errors = _console_errors(page)
        try:
            page.goto(base + "/status")
            started = time.monotonic()
            pages_seen: list[int | None] = []
            deadline = started + 60
            # Follow the running crawl until the page has shown two different page counts,
            # then stop it (SIGTERM: a clean stop that saves its counts) and read it once more.
            while len({n for n in pages_seen if n}) < 2:
                assert time.monotonic() < deadline, f"the page never showed the crawl progress: {pages_seen}"
                assert crawl.poll() is None, crawl.stderr.read().decode()[-3000:] if crawl.stderr else ""
                doc = _next_render(page)
                _assert_page_shows(doc, _shown(page))
                pages_seen.append(doc["crawl"]["pages"])
            crawl.send_signal(signal.SIGTERM)
            out, err = crawl.communicate(timeout=60)
            assert crawl.returncode == 0, err.decode()[-3000:]
            summary = json.loads(out.decode().splitlines()[0])
            print(f"crawl ran {time.monotonic() - started:.1f} s: {summary}")
            final = _next_render(page)
            _assert_page_shows(final, _shown(page))
            ARTIFACTS.mkdir(exist_ok=True)
            shot = ARTIFACTS / "status-page.png"
            page.screenshot(path=str(shot), full_page=True)
            print(f"status page screenshot: {shot}")
        finally:
            page.close()
            if crawl.poll() is None:
                crawl.kill()
                crawl.wait(10)

    assert errors == []
    # After the stop the page shows what the crawl itself counted, and real parts of the pipeline.
    assert summary["reason"] == "stopped"
    seen = [n for n in pages_seen if n is not None]
    assert seen == sorted(seen) and final["crawl"]["pages"] == summary["pages"] >= seen[-1]
    assert final["crawl"]["results"] == summary["results"]
    groups = {s["group"]: s for s in final["services"]}
    assert {"crawlstream.fetcher", "crawlstream.deduper", "crawlstream.scheduler", "crawlstream.run-stats"} <= set(
        groups
    )
    assert groups["crawlstream.run-stats"]["consumed"] == summary["results"]
    top = final["top_domains"]
    assert top["exact"] and sum(d["pages"] for d in top["items"]) <= summary["pages"]
    assert top["items"][0]["pages"] == max(d["pages"] for d in top["items"])
    assert final["crawl"]["stored"] and final["store"]["stored_bytes"] > 0


def test_status_page_asks_for_a_token_when_reads_need_one_and_shows_na_for_missing_parts(
    browser: Any, tmp_path: Path
) -> None:
    """An API with a tokens file: the page sends nothing before it has a token, then sends it
    as a Bearer header; on an empty data dir every part is n/a, and nothing errors."""
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({"reader-all": "*", "reader-one": [1]}))
    env = _env(tmp_path / "empty", CRAWLSTREAM_API_TOKENS_FILE=str(tokens))
    with _serve(env) as base:
        with pytest.raises(urllib.error.HTTPError) as anonymous:
            urllib.request.urlopen(base + "/v1/status", timeout=5)
        assert anonymous.value.code == 401
        context = browser.new_context()
        page = context.new_page()
        errors = _console_errors(page)
        requests: list[dict[str, str]] = []
        page.on("request", lambda r: requests.append(r.headers) if r.url.endswith("/v1/status") else None)
        try:
            page.goto(base + "/status")
            page.wait_for_selector("#token-form:not([hidden])")
            page.wait_for_timeout(500)
            assert requests == []  # no request without a token: no 401 in the console
            page.fill("#token", "reader-all")
            with page.expect_response(lambda r: r.url.endswith("/v1/status")):
                page.click("button[type=submit]")
            doc = _next_render(page)
            assert requests[0]["authorization"] == "Bearer reader-all"
            _assert_page_shows(doc, _shown(page))
            assert doc["crawl"]["pages"] is None and doc["store"] is None and doc["index"] is None
            assert page.is_hidden("#token-form")
            assert page.eval_on_selector_all("dd.na", "els => els.length") >= 10  # shown as n/a
            # The token lives in this tab's sessionStorage: a reload polls without asking again.
            page.reload()
            _next_render(page)
            assert page.is_hidden("#token-form")
            assert errors == []
            # A token that does not see every dataset is refused (403): the page asks again.
            page.evaluate("sessionStorage.setItem('crawlstream.status.token', 'reader-one')")
            page.reload()
            page.wait_for_selector("#token-form:not([hidden])")
            assert "every dataset" in page.inner_text("#token-message")
        finally:
            context.close()


def test_status_page_writes_ages_in_words_and_the_stores_last_saved_numbers(browser: Any, tmp_path: Path) -> None:
    """Issue 24: ages read "43 min ago", not "2566 s ago"; an API beside the store's writer shows
    the URLs, raw bytes and ratio last saved (with their age) instead of n/a. The page is served
    from its module strings and fed crafted /v1/status answers (no server: Playwright routes)."""
    from crawlstream.api._status_page import POLL_MS, STATUS_CSS, STATUS_JS, status_html
    from crawlstream.crawl import CrawlStats, save_stats
    from crawlstream.status import StatusCollector
    from crawlstream.store import ContentStore

    data_dir = tmp_path / "data"
    with ContentStore(data_dir / "store") as store:
        for i in range(5):
            store.put(f"http://a{i}.example/", b"<html>" + b"words and words " * 100 + b"</html>")
        StatusCollector(data_dir, bus=None, bus_backend=None, store=store).collect()  # saves its stats
    save_stats(data_dir / "crawl" / "stats.json", CrawlStats(results=7, pages=5))

    def answer(after_s: float) -> dict[str, Any]:
        """What an API that sizes the files answers ``after_s`` seconds after both saves."""
        clock = time.time() + after_s
        return StatusCollector(data_dir, bus=None, bus_backend=None, wall_clock=lambda: clock).collect()

    answers = [answer(2566), answer(7500), answer(93784), answer(0)]
    served = [answers[0]]  # what /v1/status answers now
    html = status_html(anonymous_reads=True).replace(f'data-poll-ms="{POLL_MS}"', 'data-poll-ms="100"')
    files = {"/status": (html, "text/html"), "/status/status.js": (STATUS_JS, "text/javascript"),
             "/status/status.css": (STATUS_CSS, "text/css")}  # fmt: skip

    def route(r: Any) -> None:
        path = urllib.parse.urlsplit(r.request.url).path
        if path == "/v1/status":
            r.fulfill(json=served[0])
        elif path in files:
            r.fulfill(body=files[path][0], content_type=files[path][1])
        else:
            r.fulfill(status=404)

    page = browser.new_page()
    errors = _console_errors(page)
    try:
        page.route("http://status.test/**", route)
        page.goto("http://status.test/status")
        texts = []
        for doc in answers:
            served[0] = doc
            page.wait_for_function(
                "at => document.body.dataset.generatedAt === at", arg=str(doc["generated_at_ms"]), timeout=10_000
            )
            _assert_page_shows(doc, _shown(page))
            texts.append((
                page.inner_text("[data-field='crawl.stats_age_s']"), page.inner_text("[data-field='store.stats_age_s']")
            ))  # fmt: skip
            assert page.inner_text("[data-field='store.urls']") == "5"
            assert page.inner_text("[data-field='store.ratio']").endswith("x")
            assert page.inner_text("#store-note") == "(URLs, raw and ratio as last saved)"
    finally:
        page.close()
    assert texts == [
        ("43 min ago", "43 min ago"), ("2 h 5 min ago", "2 h 5 min ago"), ("1 d 2 h ago", "1 d 2 h ago"),
        ("just now", "just now"),
    ]  # fmt: skip
    assert errors == []
