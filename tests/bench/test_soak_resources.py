"""The soak's resource sampler and flatness verdict (issue 28) on real processes and real files:
a child that leaks memory and descriptors beside flat ones, a member killed mid-run (a zombie,
then reaped), members restarted under the same label, and data directories written as pages
are "stored". One sampled run of ~2.5 s is shared by the tests of this module."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from bench.soak.resources import (
    ProcessSample,
    ResourceSampler,
    Sample,
    dir_bytes,
    flatness,
    load_samples,
    process_detail,
)

DURATION_S = 2.5
INTERVAL_S = 0.08
# argv: MB held from the start, KB (and one descriptor) leaked every 20 ms, idle threads
CHILD = """
import os, sys, threading, time
alloc_mb, leak_kb, threads = float(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
held = [b"x" * int(alloc_mb * 2**20)]
fds = [os.open(os.devnull, os.O_RDONLY) for _ in range(5)]
for _ in range(threads):
    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
print("ready", flush=True)
if not leak_kb:
    time.sleep(60)
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    held.append(b"x" * (leak_kb * 1024))
    fds.append(os.open(os.devnull, os.O_RDONLY))
    time.sleep(0.02)
"""


@dataclass
class Run:
    sampler: ResourceSampler
    out: Path
    data: Path
    pids: dict[str, list[int]] = field(default_factory=dict)  # every pid a label had, in order
    events: dict[str, float] = field(default_factory=dict)  # t_s of the kill and the restarts


def _start(children: list[subprocess.Popen[str]], alloc_mb: float = 0, leak_kb: int = 0, threads: int = 0) -> int:
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(alloc_mb), str(leak_kb), str(threads)], stdout=subprocess.PIPE, text=True
    )
    children.append(child)
    assert child.stdout is not None and child.stdout.readline() == "ready\n"
    return child.pid


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    tmp = tmp_path_factory.mktemp("soak")
    store, wal, bloom = tmp / "data" / "store", tmp / "data" / "wal", tmp / "data" / "bloom"
    tiered = tmp / "data" / "tiered"
    store.mkdir(parents=True)
    wal.mkdir()
    bloom.mkdir()
    tiered.mkdir()
    (tiered / "hot").write_bytes(b"h" * 64 * 4096)  # a fixed part, then 1 KiB a page: per page falls
    (bloom / "filter.bin").write_bytes(b"b" * 64 * 4096)  # fixed size: its bytes per page only fall
    children: list[subprocess.Popen[str]] = []
    current = {
        "leaker-0": _start(children, leak_kb=1024),
        "flat-0": _start(children, alloc_mb=20, threads=3),
        "victim": _start(children),
        "worker-0": _start(children),  # restarted at 0.6 s, bigger: only its own samples count
        "worker-1": _start(children),  # restarted at 2.0 s: too young to judge
    }
    # the processes that replace them, started now: a restart is then a kill and a new pid,
    # at the time the test says even when a loaded machine starts Python slowly
    spare = {"worker-0": _start(children, alloc_mb=40), "worker-1": _start(children)}
    dirs = {"store": store, "wal": wal, "bloom": bloom, "tiered": tiered}
    sampler = ResourceSampler(lambda: current, dirs, tmp / "samples.jsonl", detail=tmp / "detail.jsonl", detail_every=5)
    result = Run(sampler, tmp / "samples.jsonl", tmp / "data", {k: [v] for k, v in current.items()})
    victim = children[2]
    try:
        started = time.monotonic()
        i = 0
        while (t := time.monotonic() - started) < DURATION_S:
            if t >= 0.6 and "worker-0" not in result.events:
                os.kill(current["worker-0"], signal.SIGKILL)
                current["worker-0"] = spare["worker-0"]
                result.pids["worker-0"].append(current["worker-0"])
                result.events["worker-0"] = t
            if t >= 1.0 and "victim" not in result.events:
                victim.send_signal(signal.SIGKILL)  # not waited for: a zombie until 1.5 s
                result.events["victim"] = t
            if t >= 1.5 and victim.returncode is None:
                victim.wait()
            if t >= 2.0 and "worker-1" not in result.events:
                os.kill(current["worker-1"], signal.SIGKILL)
                current["worker-1"] = spare["worker-1"]
                result.pids["worker-1"].append(current["worker-1"])
                result.events["worker-1"] = t
            # 100 pages stored per sample: 4 KiB each in store (flat per page), the WAL's
            # appends grow with time (its bytes per page climb)
            (store / f"seg-{i:04d}").write_bytes(b"p" * 100 * 4096)
            (tiered / f"cold-{i:04d}").write_bytes(b"c" * 100 * 1024)
            with (wal / "wal.log").open("ab") as f:
                f.write(b"w" * (i + 1) * 8192)
            i += 1
            sampler.sample(round(time.monotonic() - started, 4), 100 * i)
            time.sleep(INTERVAL_S)
        yield result
    finally:
        for child in children:
            child.kill()
            child.wait()


def _series(samples: list[Sample], label: str) -> list[tuple[float, int]]:
    return [(s.t_s, s.processes[label].pid) for s in samples if label in s.processes]


def test_the_sampler_records_rss_descriptors_and_threads_of_each_process(run: Run) -> None:
    samples = run.sampler.samples
    assert len(samples) >= 15, len(samples)
    first = samples[0].processes
    assert set(first) == {"leaker-0", "flat-0", "victim", "worker-0", "worker-1"}
    flat = first["flat-0"]
    assert flat.pid == run.pids["flat-0"][0]
    assert flat.rss_bytes > 20 * 2**20  # the 20 MB it holds
    assert flat.fds >= 8  # stdin/out/err and its five
    assert flat.threads >= 4  # main and three idle
    leak_fds = [s.processes["leaker-0"].fds for s in samples]
    leak_rss = [s.processes["leaker-0"].rss_bytes for s in samples]
    assert leak_fds[-1] > leak_fds[0] + 20 and leak_rss[-1] > leak_rss[0] + 20 * 2**20


def test_a_killed_process_is_skipped_as_a_zombie_and_once_reaped(run: Run) -> None:
    killed_at = run.events["victim"]
    samples = run.sampler.samples
    before = [s for s in samples if s.t_s < killed_at]
    after = [s for s in samples if s.t_s > killed_at + 0.05]
    assert before and all("victim" in s.processes for s in before)
    assert len(after) >= 5 and all("victim" not in s.processes and "victim" in s.missing for s in after)
    assert any(s.t_s > 1.6 for s in after)  # also after it was reaped (NoSuchProcess)


def test_a_restarted_label_follows_its_new_pid(run: Run) -> None:
    old, new = run.pids["worker-0"]
    series = _series(run.sampler.samples, "worker-0")
    pids = [pid for _, pid in series]
    assert pids[0] == old and pids[-1] == new and set(pids) == {old, new}
    assert pids == sorted(pids, key=lambda p: p == new)  # the old one, then only the new one
    assert run.sampler.samples[-1].processes["worker-0"].rss_bytes > 40 * 2**20


def test_the_samples_are_json_lines_a_killed_run_keeps(run: Run) -> None:
    lines = run.out.read_text(encoding="utf-8").splitlines()
    assert len(lines) == len(run.sampler.samples)
    assert json.loads(lines[0])["processes"]["flat-0"]["pid"] == run.pids["flat-0"][0]
    cut = run.out.with_name("cut.jsonl")
    cut.write_text("\n".join(lines) + "\n" + lines[-1][: len(lines[-1]) // 2], encoding="utf-8")
    assert load_samples(cut) == run.sampler.samples
    details = [json.loads(line) for line in run.out.with_name("detail.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(details) == (len(lines) + 4) // 5  # every fifth sample, the first included
    leaker = [d["processes"]["leaker-0"]["fds"] for d in details if d["processes"]["leaker-0"]["fds"]]
    assert sum(leaker[-1].values()) > sum(leaker[0].values())  # the descriptors it leaks, by kind


def test_flatness_flags_the_leak_and_passes_the_flat_and_restarted(run: Run) -> None:
    verdict = flatness(run.sampler.samples)
    json.dumps(verdict)  # goes into the bench's JSON as it is
    assert verdict["ok"] is False
    procs = verdict["processes"]

    leak = procs["leaker-0"]
    assert leak["status"] == "growth" and leak["ok"] is False
    assert leak["rss_bytes"] is not None and leak["rss_bytes"]["ratio"] is not None
    assert leak["rss_bytes"]["ratio"] > 1.3 and leak["rss_bytes"]["ok"] is False
    assert leak["fds"] is not None and leak["fds"]["ok"] is False

    flat = procs["flat-0"]
    assert flat["status"] == "flat" and flat["ok"] is True and flat["restarts"] == 0
    assert flat["rss_bytes"] is not None and flat["rss_bytes"]["ratio"] is not None
    assert abs(flat["rss_bytes"]["ratio"] - 1) < 0.05

    # worker-0's new process holds 40 MB more than the old one: judged alone, it is flat
    w0 = procs["worker-0"]
    assert (w0["status"], w0["ok"], w0["restarts"], w0["pid"]) == ("flat", True, 1, run.pids["worker-0"][1])
    assert w0["from_s"] is not None and w0["from_s"] > run.events["worker-0"]
    w1 = procs["worker-1"]
    assert (w1["status"], w1["ok"], w1["restarts"]) == ("restarted", True, 1)
    assert (procs["victim"]["status"], procs["victim"]["ok"]) == ("absent", True)

    disks = verdict["data_dirs"]
    assert disks["store"]["status"] == "flat" and disks["store"]["ok"] is True
    per_page = disks["store"]["bytes_per_page"]
    assert per_page is not None and per_page["start"] is not None and 4096 <= per_page["start"] < 4096 * 1.1
    assert disks["wal"]["status"] == "drift" and disks["wal"]["ok"] is False
    bloom = disks["bloom"]
    assert (bloom["status"], bloom["ok"]) == ("bounded", True)  # not with the pages, and not growing
    assert bloom["bytes_per_page"] is not None and bloom["bytes_per_page"]["ratio"] is not None
    assert bloom["bytes_per_page"]["ratio"] < 0.9 and bloom["bytes"] is not None and bloom["bytes"]["ok"] is True
    tiered = disks["tiered"]  # grows, slower than the pages: a fixed part spread over more of them
    assert (tiered["status"], tiered["ok"]) == ("falls", True)
    assert tiered["bytes"] is not None and tiered["bytes"]["ok"] is False


def test_flatness_without_the_leaker_and_the_wal_is_ok(run: Run) -> None:
    kept = [
        Sample(
            s.t_s,
            s.pages_stored,
            {k: v for k, v in s.processes.items() if k != "leaker-0"},
            {"store": s.disk_bytes["store"]},
            s.missing,
        )
        for s in run.sampler.samples
    ]
    verdict = flatness(kept)
    assert verdict["ok"] is True, verdict


def test_dir_bytes_counts_allocated_blocks_like_du(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "small").write_bytes(b"x" * 10)  # a whole block on disk
    (tmp_path / "big").write_bytes(b"y" * 300_000)
    os.link(tmp_path / "big", tmp_path / "a" / "big-link")  # once
    with (tmp_path / "sparse.index").open("wb") as f:  # like Kafka's preallocated indexes
        f.truncate(10 * 2**20)
    (tmp_path / "loop").symlink_to(tmp_path)  # not followed
    du = subprocess.run(["du", "-sB1", str(tmp_path)], capture_output=True, text=True, check=True).stdout
    assert dir_bytes(tmp_path) == int(du.split()[0])
    assert 300_000 <= dir_bytes(tmp_path) < 2**20  # neither the sparse 10 MiB nor the link twice
    assert dir_bytes(tmp_path / "nothing-here") == 0


def test_dir_bytes_survives_files_vanishing_mid_walk(tmp_path: Path) -> None:
    stop = threading.Event()

    def churn() -> None:
        n = 0
        while not stop.is_set():
            d = tmp_path / f"d{n % 5}"
            d.mkdir(exist_ok=True)
            for j in range(20):
                (d / f"f{j}").write_bytes(b"z" * 5000)
            for j in range(20):
                (d / f"f{j}").unlink()
            d.rmdir()
            n += 1

    worker = threading.Thread(target=churn)
    worker.start()
    try:
        deadline = time.monotonic() + 0.7
        walks = 0
        while time.monotonic() < deadline:
            assert dir_bytes(tmp_path) >= 0
            walks += 1
    finally:
        stop.set()
        worker.join()
    assert walks > 5


def test_process_detail_counts_threads_by_name_and_descriptors_by_kind() -> None:
    """What the soak writes every minute to resources-detail.jsonl (which threads, which kind of
    descriptor grew)."""
    before = process_detail(os.getpid())
    a, b = socket.socketpair()
    r, w = os.pipe()
    stop = threading.Event()
    worker = threading.Thread(target=stop.wait)
    worker.start()
    try:
        after = process_detail(os.getpid())
        assert after["fds"].get("socket", 0) == before["fds"].get("socket", 0) + 2
        assert after["fds"].get("pipe", 0) == before["fds"].get("pipe", 0) + 2
        assert sum(after["threads"].values()) == sum(before["threads"].values()) + 1
    finally:
        stop.set()
        worker.join()
        a.close(), b.close(), os.close(r), os.close(w)
    assert process_detail(2**22 + 12345) == {"threads": {}, "fds": {}}  # no such process


def test_a_member_restarted_mid_run_gets_the_same_warm_up_as_the_first() -> None:
    """Session 23: a link extractor killed at minute 28 of 120 filled its caches until minute ~50,
    as its peer had in the first 20 minutes. Judged from 20% of its own life (minute 46) it
    "grew" 1.18x; given the run's 24 minutes of warm-up it is as flat as its peer."""
    mb = 2**20

    def rss(t: float, born: float) -> int:  # doubles over its first 24 minutes, then flat
        return int((100 + 100 * min(1.0, (t - born) / (24 * 60))) * mb)

    samples = []
    for minute in range(121):
        t = float(minute * 60)
        restarted = minute >= 28
        born = 28 * 60.0 if restarted else 0.0
        samples.append(Sample(t, 1000 * (minute + 1), {
            "peer": ProcessSample(1, rss(t, 0.0), 40, 10),
            "member": ProcessSample(3 if restarted else 2, rss(t, born), 40, 10),
        }))
    member = flatness(samples)["processes"]["member"]
    assert (member["status"], member["ok"], member["restarts"]) == ("flat", True, 1)
    assert member["from_s"] == 28 * 60 + 24 * 60  # its start + 20% of the run
    assert flatness(samples)["processes"]["peer"]["status"] == "flat"
