"""``python -m bench soak --minutes M --seed S``: the distributed deployment under seeded chaos for
M minutes, then every invariant checked on the whole history (issue 28).

The deployment (``crawlstream.devtools.deployment``): a 3-broker KRaft cluster (replication 3,
``min.insync.replicas`` 2), a Redis server, the synthetic web (large enough that the crawl does
not finish), every service its own process with two members in each group, the index compactor
building on its interval and the query API served to a client that pages through answers the
whole time. A supervisor restarts any member that exits, as Kubernetes would (with back-off).
The chaos plan (``chaos.ChaosPlan``) is drawn from the seed; each fault and its undoing go to
``faults.jsonl``. At the end: every fault undone, the fetchers stopped, the rest drained and
stopped, then the checks of ``invariants`` and the resource curves' flatness; ``summary.json``
and ``soak.png`` in the run directory, the summary on stdout; exit 1 when an invariant fails.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import heapq
import json
import logging
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.soak.chaos import ChaosPlan, PlannedFault
from bench.soak.client import ApiClient
from bench.soak.final import final_checks
from bench.soak.invariants import FaultRecord, lag_recovery, page_requests, politeness
from crawlstream.bus import KafkaBus
from crawlstream.crawl import LagProbe
from crawlstream.devtools.demoweb import DemoWeb
from crawlstream.devtools.deployment import (
    Deployment,
    ServiceProcess,
    deploy,
    group_of,
    groups_assigned,
    wait_until,
)
from crawlstream.devtools.localproc import free_port
from crawlstream.topics import CONTENT_STORED

logger = logging.getLogger("bench.soak")

# Two members in every group that scales; the compactor and the API once each.
MEMBERS = {
    "deduper": 2,
    "scheduler": 2,
    "fetcher": 2,
    "link-extractor": 2,
    "bucket-compressor": 2,
    "parquet-sink": 2,
    "index-compactor": 1,
    "query-api": 1,
}
MIN_DELAY_S = 0.2
MAX_RETRIES = 2
SAMPLE_S = 5.0
# Under CRAWLSTREAM_DATA_DIR: the content store, the lake (urls), the index, the scheduler's
# frontier files, the deduper's Bloom snapshots, the Parquet sink's staging.
SERVICE_DATA_DIRS = ("store", "urls", "index", "frontier", "dedupe", "parquet-sink")
FLAT_MIN_MINUTES = 30.0
# 200 pages each: the web outlasts the run. Session 15's first 2-hour run (6 per minute, 720
# domains) stored all 154k pages in 40 minutes, ~64 pages/s beside other work; session 18's
# (40 per minute, 960k pages) stored ~180 pages/s once the lease clock kept the scheduler
# current (ADR 035) and would have run out at ~90 minutes: 80 per minute, 1.92M pages.
DOMAINS_PER_MINUTE = 80
RESTART_BACKOFF_S = (2.0, 30.0)  # first and largest delay before a crashed member is restarted
LIVENESS_S = 360.0  # deploy/k8s: heartbeat younger than 300 s, probed every 30 s, 2 failures


@dataclass
class SoakConfig:
    minutes: float
    seed: int
    root: Path
    domains: int
    pages_per_domain: int = 200
    interval_s: tuple[float, float] = (30.0, 180.0)
    check_every_s: float = 300.0
    disk_margin_mb: int = 8192  # the floor sits this far below the free space at the start

    @property
    def duration_s(self) -> float:
        return self.minutes * 60.0


def crawl_vars(cfg: SoakConfig, api_port: int, floor_mb: int) -> dict[str, str]:
    """The services' settings: polite but quick delays, the 3-broker durability, short timers
    so the compactor, the sink and the dedupe snapshots all work during the run."""
    return {
        "CRAWLSTREAM_DATA_DIR": str(cfg.root / "data"),
        "CRAWLSTREAM_BUS_REPLICATION_FACTOR": "3",
        "CRAWLSTREAM_BUS_MIN_INSYNC_REPLICAS": "2",
        "CRAWLSTREAM_DEDUPE_EXPECTED_URLS": str(max(100_000, 4 * cfg.domains * cfg.pages_per_domain)),
        "CRAWLSTREAM_DEDUPE_SNAPSHOT_INTERVAL_S": "10",
        "CRAWLSTREAM_SCHEDULER_MIN_DELAY_S": str(MIN_DELAY_S),
        "CRAWLSTREAM_SCHEDULER_MAX_RETRIES": str(MAX_RETRIES),
        "CRAWLSTREAM_SCHEDULER_MAX_BACKOFF_S": "1",
        # A lease runs out by how far the scheduler read the results (ADR 035), but a request
        # waiting for the fetchers longer than the lease is still timed out and retried: 180 s
        # is above the fetchers' lag after a fault here (~80 s at most in session 16's run) and
        # below the wind-down's bound (SETTLE_S), a third of the default 600 s.
        "CRAWLSTREAM_SCHEDULER_LEASE_S": "180",
        # 4 s, not 2: session 19's check run lost 8 pages whose three attempts each timed out at
        # 2 s on a machine the run shared with a test suite (a ~30-process deployment on 2 cores);
        # the web's slow pages (8 s) still outlast it.
        "CRAWLSTREAM_FETCH_TIMEOUT_S": "4",
        "CRAWLSTREAM_FETCH_READ_TIMEOUT_S": "4",
        "CRAWLSTREAM_FETCH_ALLOW_PRIVATE_NETWORKS": "true",
        "CRAWLSTREAM_FETCH_ROBOTS_ERROR_BACKOFF_S": "1",
        "CRAWLSTREAM_LAKE_SINK_FLUSH_INTERVAL_S": "20",
        "CRAWLSTREAM_INDEX_BUILD_INTERVAL_S": "30",
        "CRAWLSTREAM_INDEX_GC_GRACE_S": "60",
        "CRAWLSTREAM_API_PORT": str(api_port),
        "CRAWLSTREAM_METRICS_PORT": "0",
        "CRAWLSTREAM_DATA_DIR_MIN_FREE_MB": str(floor_mb),
    }


@dataclass
class Member:
    """A supervised member: its label stays while its process is replaced."""

    label: str
    name: str
    process: ServiceProcess
    restarts: int = 0
    crashes: list[float] = field(default_factory=list)  # monotonic times of exits we did not cause
    liveness_kills: int = 0  # killed by the liveness probe (a loop that stopped turning)
    held: str = ""  # a fault holds it down (killed or stopped): the supervisor leaves it alone
    due_s: float = 0.0  # when the supervisor may restart it


class Soak:
    """One soak run: the deployment, its members, the chaos, the samples."""

    def __init__(self, cfg: SoakConfig, where: Deployment) -> None:
        self.cfg = cfg
        self.where = where
        self.members: dict[str, Member] = {}
        self.faults: list[FaultRecord] = []
        self.lag: list[tuple[float, int | None]] = []
        self.lag_by_group: list[tuple[float, dict[str, int]]] = []
        self.stored: list[tuple[float, int]] = []
        self.checks: list[dict[str, Any]] = []
        self.ballast = cfg.root / "ballast"
        self._actions: list[tuple[float, int, str, Callable[[], None]]] = []
        self._seq = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._fault_log = (cfg.root / "faults.jsonl").open("a", encoding="utf-8")
        self.t0 = time.monotonic()
        self.floor_mb = 0  # the services' free-space floor (the disk-floor fault goes below it)
        self.client: ApiClient | None = None
        self.sampler_threads: list[threading.Thread] = []
        self.unclean_exits: list[str] = []  # members SIGTERM did not stop (the wind-down's)
        self.broker_down_by: dict[int, FaultRecord] = {}  # the fault that last killed each broker
        # Broker restarts wait until the node answers, so they run off the main loop, one thread
        # per broker (two down must start together to reach their quorum), on threads that live
        # as long as the soak: a child dies with the *thread* that started it (the
        # PR_SET_PDEATHSIG of ``die_with_parent``), so a short-lived thread would take its broker
        # with it when it ends.
        self.broker_restarts = ThreadPoolExecutor(max_workers=3, thread_name_prefix="broker-restart")

    # -- members ------------------------------------------------------------------------

    def start_members(self) -> None:
        (self.cfg.root / "heartbeats").mkdir(exist_ok=True)
        for name, count in MEMBERS.items():
            for i in range(count):
                label = f"{name}-{i}"
                self.members[label] = Member(label, name, self._spawn(name, label))

    def _spawn(self, name: str, label: str, n: int = 0) -> ServiceProcess:
        log = self.cfg.root / "logs" / (f"{label}.log" if n == 0 else f"{label}-restart-{n}.log")
        log.parent.mkdir(exist_ok=True)
        # A restarted container's probe does not judge it by its predecessor's heartbeat: the
        # kubelet needs two failed probes 30 s apart, by when the process removed the stale file
        # (Heartbeat.start). Probed every 0.2 s here, the file goes before the process starts.
        self._heartbeat(label).unlink(missing_ok=True)
        env = {**self.where.env, "CRAWLSTREAM_HEARTBEAT_FILE": str(self._heartbeat(label))}
        return ServiceProcess.start(name, env, log)

    def _heartbeat(self, label: str) -> Path:
        return self.cfg.root / "heartbeats" / label

    def probe_liveness(self) -> None:
        """deploy/k8s's liveness probe: a member whose loop has not beaten its heartbeat file for
        LIVENESS_S is SIGKILLed (the supervisor restarts it); counted per member."""
        now = time.time()
        for member in self.members.values():
            if member.held or not member.process.running:
                continue
            try:
                age = now - self._heartbeat(member.label).stat().st_mtime
            except FileNotFoundError:
                continue  # not beating yet (starting), or a service that keeps no heartbeat
            if age > LIVENESS_S:
                logger.warning("%s: heartbeat %.0f s old; the liveness probe kills it", member.label, age)
                member.liveness_kills += 1
                member.process.kill(signal.SIGKILL)

    def restart(self, label: str) -> None:
        member = self.members[label]
        if member.process.running:
            return
        member.restarts += 1
        member.process = self._spawn(member.name, label, member.restarts)
        member.held = ""

    def supervise(self) -> None:
        """Restart members that exited on their own, with Kubernetes-like back-off."""
        now = time.monotonic()
        for member in self.members.values():
            if member.held or member.process.running or self._stop.is_set():
                continue
            if not member.due_s:
                member.crashes.append(now)
                recent = sum(1 for t in member.crashes if now - t < 300)
                member.due_s = now + min(RESTART_BACKOFF_S[1], RESTART_BACKOFF_S[0] * 2 ** (recent - 1))
                logger.warning("%s exited (code %s); restarting in %.0f s", member.label,
                               member.process.process.returncode, member.due_s - now)
            elif now >= member.due_s:
                member.due_s = 0.0
                self.restart(member.label)

    def pids(self) -> dict[str, int]:
        """Every process the soak watches, by label: members, brokers, Redis."""
        out = {label: m.process.pid for label, m in self.members.items() if m.process.running}
        for node in self.where.kafka.node_ids:
            pid = self.where.kafka.pid_of(node)
            if pid is not None:
                out[f"broker-{node}"] = pid
        if self.where.redis_server.pid is not None:
            out["redis"] = self.where.redis_server.pid
        return out

    # -- faults -------------------------------------------------------------------------

    def at(self, when_s: float, what: str, action: Callable[[], None]) -> None:
        with self._lock:
            self._seq += 1
            heapq.heappush(self._actions, (when_s, self._seq, what, action))

    def run_due(self, *, everything: bool = False) -> None:
        while self._actions and (everything or self._actions[0][0] <= time.monotonic()):
            with self._lock:
                _, _, what, action = heapq.heappop(self._actions)
            try:
                action()
            except Exception:
                logger.exception("soak action %r failed", what)

    def record(self, kind: str, target: str, detail: str = "") -> FaultRecord:
        fault = FaultRecord(time.monotonic(), kind, target, detail)
        self.faults.append(fault)
        self._log_fault("start", fault)
        return fault

    def restored(self, fault: FaultRecord) -> None:
        fault.restored_s = time.monotonic()
        self._log_fault("restored", fault)

    def _log_fault(self, event: str, fault: FaultRecord) -> None:
        row = {"event": event, "t": round(time.monotonic() - self.t0, 2), **asdict(fault)}
        row["t_s"] = round(fault.t_s - self.t0, 2)
        if fault.restored_s is not None:
            row["restored_s"] = round(fault.restored_s - self.t0, 2)
        self._fault_log.write(json.dumps(row) + "\n")
        self._fault_log.flush()
        logger.info("fault %s: %s %s %s", event, fault.kind, fault.target, fault.detail)

    def inject(self, planned: PlannedFault) -> None:
        from bench.soak.faults import INJECT

        INJECT[planned.kind](self, planned)

    # -- sampling -----------------------------------------------------------------------

    def sample_bus(self, probe: LagProbe, bus: KafkaBus) -> None:
        now = time.monotonic()
        try:
            lag = probe.read()
            ends = bus.end_offsets(CONTENT_STORED)
        except Exception as exc:  # an outage reads as "unknown"
            logger.debug("lag sample: %s", exc)
            self.lag.append((now, None))
            return
        if min(ends, default=0) < 0:  # a partition without a leader has no end offset
            self.lag.append((now, None))
            return
        stored = sum(ends)
        self.lag.append((now, lag.lag))
        self.lag_by_group.append((now, dict(lag.lag_by_group)))
        self.stored.append((now, stored))

    def check_now(self) -> None:
        """The periodic check: politeness of everything served so far, members alive."""
        pages = page_requests(self.where.web.requests())
        polite = politeness(self.where.web, pages, MIN_DELAY_S)
        down = [m.label for m in self.members.values() if not m.process.running]
        self.checks.append({"t_s": round(time.monotonic() - self.t0, 1), "pages": len(pages),
                            "politeness_violations": polite["violations"], "down": down})
        logger.info("check at %.0f s: %d pages, %d politeness violations, down: %s",
                    time.monotonic() - self.t0, len(pages), polite["violations"], down or "none")

    def close(self) -> None:
        self._fault_log.close()


def _free_mb(path: Path) -> int:
    return shutil.disk_usage(path).free // (1 << 20)


def run_soak(cfg: SoakConfig) -> dict[str, Any]:
    """The whole soak; returns the summary (also written to ``summary.json``)."""
    from bench.soak.plot import Fault, plot
    from bench.soak.resources import ResourceSampler, flatness

    cfg.root.mkdir(parents=True, exist_ok=True)
    floor_mb = max(1, _free_mb(cfg.root) - cfg.disk_margin_mb)
    web = DemoWeb(cfg.domains, pages_per_domain=cfg.pages_per_domain, seed=cfg.seed, crawl_delay_s=1.0,
                  slow_s=8.0, huge_bytes=1 << 20, bomb_bytes=8 << 20, sitemap_bomb_bytes=4 << 20)
    api_port = free_port()
    # The brokers' heaps resident from launch: a JVM's RSS climbs while its heap fills towards
    # -Xmx, which the flatness rule would read as growth (ADR 034, "Session 21").
    with deploy(cfg.root, web, crawl_vars(cfg, api_port, floor_mb), brokers=3, resident_heap=True) as where:
        soak = Soak(cfg, where)
        soak.floor_mb = floor_mb
        bus = KafkaBus.from_settings(where.settings)
        groups = dict(group_of(n) for n in MEMBERS if n not in ("index-compactor", "query-api"))
        probe = LagProbe({g: bus.consumer(g) for g in groups}, groups, bus.end_offsets)
        # Issue 28 judges bytes on disk "per data directory": each service's own, not their sum (a
        # store flat per page and a lake of small files in a sawtooth hid each other in "data").
        dirs = {name: cfg.root / "data" / name for name in SERVICE_DATA_DIRS}
        sampler = ResourceSampler(soak.pids, {**dirs, "kafka": cfg.root / "kafka", "redis": cfg.root / "redis"},
                                  cfg.root / "resources.jsonl", detail=cfg.root / "resources-detail.jsonl")
        client = ApiClient(api_port, list(web.model.domains), random.Random(cfg.seed))
        soak.client = client
        try:
            soak.start_members()
            consumers = [m.process for m in soak.members.values() if m.name not in ("index-compactor", "query-api")]
            wait_until(lambda: groups_assigned(consumers), "each group owns its partitions", 180, consumers)
            seeded = subprocess.run([sys.executable, "-m", "crawlstream", "seed", "--seeds", str(where.seeds)],
                                    env=where.env, capture_output=True, timeout=120, check=False)
            if seeded.returncode != 0:
                raise RuntimeError(f"crawlstream seed failed: {seeded.stderr.decode()[-2000:]}")
            soak.t0 = time.monotonic()
            plan = ChaosPlan(cfg.seed, cfg.duration_s, [m for m in soak.members if not m.startswith("query-api")],
                             where.kafka.node_ids, cfg.interval_s, quiet_tail_s=min(120.0, cfg.duration_s / 6))
            for planned in plan.faults:
                soak.at(soak.t0 + planned.at_s, planned.kind, functools.partial(soak.inject, planned))
            client.start()
            _main_loop(soak, sampler, probe, bus)
            summary = final_checks(soak, plan, client, MEMBERS, MAX_RETRIES, MIN_DELAY_S)
        finally:
            client.stop()
            soak._stop.set()
            for member in soak.members.values():
                member.process.stop()
            for thread in soak.sampler_threads:
                thread.join(timeout=60)
            probe.close()
            bus.close()
            soak.close()
            with contextlib.suppress(FileNotFoundError):
                soak.ballast.unlink()
    t0 = soak.t0
    summary["resources"] = flatness(sampler.samples)
    summary["lag_recovery"] = lag_recovery(soak.faults, soak.lag)
    plot_path = plot(
        sampler.samples,
        [Fault(f.t_s - t0, f.kind, f.target, f.detail) for f in soak.faults],
        cfg.root / "soak.png",
        lag={g: [(t - t0, lag[g]) for t, lag in soak.lag_by_group if g in lag] for g in groups},
        title=f"crawlstream soak: {cfg.minutes:g} min, seed {cfg.seed}, {len(soak.faults)} faults",
    )
    summary["plot"] = plot_path.name  # beside this summary: a run dir can be moved or copied whole
    # Flatness needs a run long enough to leave its warm-up behind (the crawl ramps up over
    # minutes): judged from FLAT_MIN_MINUTES on, reported always.
    summary["resources_judged"] = cfg.minutes >= FLAT_MIN_MINUTES
    summary["crawl_kept_going"] = _kept_going(soak.stored, soak.t0, cfg.duration_s)
    summary["ok"] = bool(summary["ok"] and (summary["resources"]["ok"] or not summary["resources_judged"])
                         and (summary["crawl_kept_going"] or not summary["resources_judged"]))
    (cfg.root / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    return summary


def _kept_going(stored: list[tuple[float, int]], t0: float, duration_s: float) -> bool:
    """Pages were still being stored in the run's last fifth: a web the crawl finished early would
    leave faults hitting an idle system and resource curves flat for the wrong reason."""
    late = [n for t, n in stored if t - t0 >= 0.8 * duration_s]
    before = [n for t, n in stored if t - t0 < 0.8 * duration_s]
    return bool(late and before and max(late) > max(before))


def _main_loop(soak: Soak, sampler: Any, probe: LagProbe, bus: KafkaBus) -> None:
    """Run the plan until the end: due faults and restores, the supervisor, the periodic check;
    samples on their own thread, so a fault that blocks (a broker restart) leaves no gap."""

    def sample_bus() -> None:  # a call may block through an outage: its own thread
        while not soak._stop.wait(SAMPLE_S):
            soak.sample_bus(probe, bus)

    def sample_resources() -> None:
        while not soak._stop.wait(SAMPLE_S):
            now = time.monotonic()
            try:
                sampler.sample(now - soak.t0, soak.stored[-1][1] if soak.stored else 0)
            except Exception:
                logger.exception("resource sample failed")
            _progress(soak, now)

    soak.sampler_threads = [threading.Thread(target=f, name=f.__name__, daemon=True)
                            for f in (sample_bus, sample_resources)]
    for thread in soak.sampler_threads:
        thread.start()
    end = soak.t0 + soak.cfg.duration_s
    next_check = soak.t0 + soak.cfg.check_every_s
    while time.monotonic() < end:
        soak.run_due()
        soak.supervise()
        soak.probe_liveness()
        if time.monotonic() >= next_check:
            soak.check_now()
            next_check += soak.cfg.check_every_s
        time.sleep(0.2)


def _progress(soak: Soak, now: float) -> None:
    done = (now - soak.t0) / soak.cfg.duration_s
    stored = soak.stored[-1][1] if soak.stored else 0
    lag = next((v for _, v in reversed(soak.lag) if v is not None), None)
    sys.stderr.write(f"\rsoak {done:6.1%}  pages stored {stored:,}  lag {lag}  faults {len(soak.faults)}   ")
    sys.stderr.flush()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=120.0, help="how long the chaos runs (default 120)")
    parser.add_argument("--seed", type=int, default=1, help="seeds the chaos plan and the web (default 1)")
    parser.add_argument("--dir", type=Path, default=None, help="run directory (default: a new temp dir)")
    parser.add_argument("--domains", type=int, default=0, help="domains of the synthetic web (default: by minutes)")
    parser.add_argument("--interval", default="30-180", help="seconds between faults, MIN-MAX (default 30-180)")
    args = parser.parse_args(argv)
    if args.minutes <= 0:
        parser.error("--minutes must be > 0")
    lo, _, hi = args.interval.partition("-")
    try:
        interval = (float(lo), float(hi or lo))
    except ValueError:
        parser.error(f"--interval: expected MIN-MAX seconds, found {args.interval!r}")
    root = (args.dir or Path(tempfile.mkdtemp(prefix="soak-"))).absolute()  # every server is given it
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        filename=str(root / "soak.log") if root.exists() or root.mkdir(parents=True) is None else None)
    domains = args.domains or max(60, int(DOMAINS_PER_MINUTE * args.minutes))
    cfg = SoakConfig(args.minutes, args.seed, root, domains, interval_s=interval)
    summary = run_soak(cfg)
    sys.stderr.write("\n")
    sys.stdout.write(json.dumps(summary, indent=2, default=str) + "\n")
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
