"""``crawlstream run --processes 2``: the crawl loop in two worker processes over the shared
embedded log and the private Redis (ADR 025). The same crawl as one process; Ctrl-C, kill -9 and
resume keep their guarantees (the single-process variants are in tests/e2e)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import psutil
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
from e2e_support import MAX_RETRIES, api_answers, crawl_env, crawl_settings, demo_web

from crawlstream.devtools.deployment import web_inputs
from crawlstream.index import IndexBuilder
from crawlstream.urls import registered_domain_or_host

DOMAINS = 10
KILL_DOMAINS = 6  # in the default suite: kept small
_RETRYABLE = ("/status/500", "/status/503", "/status/429", "/slow")


def start(root: Path, data_dir: Path, processes: int, *extra: str, **env_extra: str) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRAWLSTREAM_")}
    env.update(crawl_env(data_dir, CRAWLSTREAM_FETCH_RESOLVE_MAP_FILE=str(root / "resolve.json"), **env_extra))
    cmd = [
        sys.executable,
        "-m",
        "crawlstream",
        "run",
        "--seeds",
        str(root / "seeds.txt"),
        "--processes",
        str(processes),
    ]
    return subprocess.Popen(
        [*cmd, *extra], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    )


def finish(proc: subprocess.Popen[bytes], timeout_s: float = 120) -> dict[str, object]:
    out, err = proc.communicate(timeout=timeout_s)
    assert proc.returncode == 0, err.decode()[-3000:]
    return json.loads(out.decode().strip().splitlines()[-1])  # type: ignore[no-any-return]


def family(proc: subprocess.Popen[bytes]) -> list[psutil.Process]:
    try:
        parent = psutil.Process(proc.pid)
        return [parent, *parent.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def cleanup(proc: subprocess.Popen[bytes] | None, data_dir: Path) -> None:
    """Kill what is left of a run we started (by PID), and the orphaned embedded Redis of a kill."""
    if proc is not None:
        for p in family(proc):
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
        if proc.poll() is None:
            proc.wait(10)
    registry = data_dir / "redis" / "crawlstream.rdb.settings"
    if registry.exists():
        pidfile = Path(json.loads(registry.read_text())["pidfile"])
        pid = int(pidfile.read_text().strip() or 0) if pidfile.exists() else 0
        if pid and psutil.pid_exists(pid) and "redis" in psutil.Process(pid).name():
            os.kill(pid, signal.SIGKILL)


def wait_for(cond: object, proc: subprocess.Popen[bytes], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():  # type: ignore[operator]
        assert proc.poll() is None, "the run ended early: " + (
            proc.stderr.read().decode()[-2000:] if proc.stderr else ""
        )
        assert time.monotonic() < deadline, "no progress"
        time.sleep(0.05)


def page_counts(web: object) -> Counter[str]:
    return Counter(r.url for r in web.requests() if not r.path.startswith("/robots"))  # type: ignore[attr-defined]


@pytest.mark.slow  # two whole crawls, ~45 s under load
def test_two_processes_crawl_what_one_process_crawls(tmp_path: Path) -> None:
    results = {}
    for processes in (1, 2):
        root = tmp_path / f"p{processes}"
        root.mkdir()
        with demo_web(DOMAINS) as web:
            web_inputs(root, web)
            proc = start(root, root / "data", processes, "--exit-when-done")
            try:
                summary = finish(proc)
            finally:
                cleanup(proc, root / "data")
            settings = crawl_settings(root / "data")
            IndexBuilder.from_settings(settings).build()
            answers = api_answers(settings, {registered_domain_or_host(h) for h in web.hosts})
            results[processes] = (summary, page_counts(web), answers, web.reachable_pages())
    (one, one_pages, one_answers, reachable), (two, two_pages, two_answers, _) = results[1], results[2]
    assert one["reason"] == two["reason"] == "drained"
    assert set(two_pages) == set(one_pages) == reachable  # the same pages fetched ...
    assert {u: n for u, n in two_pages.items() if not u.endswith(_RETRYABLE)} == dict.fromkeys(
        (u for u in reachable if not u.endswith(_RETRYABLE)), 1
    )  # ... each once
    for key in ("pages", "results", "by_outcome", "by_status", "truncated"):
        assert one[key] == two[key], key  # ... with the same outcomes, so the same pages stored
    assert two_answers == one_answers  # the same index answers through the API


@pytest.mark.slow  # ~25 s under load
def test_ctrl_c_stops_every_process_and_the_run_resumes_without_refetching(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    with demo_web(DOMAINS) as web:
        web_inputs(tmp_path, web)
        first = start(tmp_path, data_dir, 2)
        try:
            wait_for(lambda: len(page_counts(web)) >= len(web.reachable_pages()) // 3, first)
            members = family(first)
            assert len(members) >= 3  # the parent and two workers (and the private Redis)
            os.killpg(first.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
            summary = finish(first, 60)
            assert summary["reason"] == "stopped"
            assert not [p for p in members if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
            second = start(tmp_path, data_dir, 2, "--exit-when-done")
            resumed = finish(second)
        finally:
            cleanup(first, data_dir)
            cleanup(locals().get("second"), data_dir)
        counts = page_counts(web)
        expected = web.reachable_pages()
    assert resumed["reason"] == "drained" and resumed["pages"] == resumed["pages_this_run"] + summary["pages"]
    assert set(counts) == expected
    assert {n for u, n in counts.items() if not u.endswith(_RETRYABLE)} == {1}  # a clean stop refetches nothing
    assert {n for u, n in counts.items() if u.endswith(_RETRYABLE)} <= {1 + MAX_RETRIES}


@pytest.mark.parametrize("victim", ["all", pytest.param("worker", marks=pytest.mark.slow)])
def test_kill_9_mid_crawl_then_a_restart_completes_the_crawl(tmp_path: Path, victim: str) -> None:
    """``all``: the parent and both workers at once (a crash). ``worker``: one worker only; the
    parent stops the run (exit 1) and the restart completes it."""
    data_dir = tmp_path / "data"
    with demo_web(KILL_DOMAINS) as web:
        web_inputs(tmp_path, web)
        expected = web.reachable_pages()
        first = start(tmp_path, data_dir, 2, "--exit-when-done", CRAWLSTREAM_SCHEDULER_LEASE_S="3",
                      CRAWLSTREAM_DEDUPE_SNAPSHOT_INTERVAL_S="0.5")  # fmt: skip
        try:
            snapshots = [data_dir / "dedupe" / f"{p}.bloom" for p in range(4)]
            wait_for(lambda: len(page_counts(web)) >= len(expected) // 3 and all(p.exists() for p in snapshots), first)
            workers = [p for p in family(first)[1:] if "redis" not in p.name()]
            assert len(workers) == 2
            if victim == "all":
                for p in family(first):
                    if "redis" not in p.name():
                        p.kill()
            else:
                workers[0].kill()
            first.wait(60)
            assert first.returncode != 0
            before = sum(page_counts(web).values())
            assert before > 0
            second = start(tmp_path, data_dir, 2, "--exit-when-done", CRAWLSTREAM_SCHEDULER_LEASE_S="3")
            summary = finish(second)
        finally:
            cleanup(first, data_dir)
            cleanup(locals().get("second"), data_dir)
        counts = page_counts(web)
    assert summary["reason"] == "drained"
    assert set(counts) == expected  # every page at least once, nothing outside the reachable set
    assert sum(1 for n in counts.values() if n == 1) > len(expected) // 2  # resumed, not started over
