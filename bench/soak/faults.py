"""How the soak injects each kind of fault of ``chaos.KINDS`` and undoes it later.

Each injector acts at once (SIGKILL, SIGSTOP, a ballast file), records the fault, and schedules
its undoing on the soak's action queue, so faults overlap: the next one may come while a broker
killed by the last is still down. Only processes the soak started are signalled, by PID.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING

from bench.soak.chaos import PlannedFault

if TYPE_CHECKING:
    from bench.soak.run import Soak

logger = logging.getLogger("bench.soak")
BUILD_WAIT_S = 90.0  # how long a build-kill waits for a build in progress before it strikes anyway


def _kill_member(soak: Soak, p: PlannedFault) -> None:
    member = soak.members[p.target]
    if not member.process.running:
        return
    member.held = "killed"
    member.process.kill(signal.SIGKILL)
    fault = soak.record(p.kind, p.target, f"pid {member.process.pid}, restart in {p.restore_s:.0f} s")

    def back() -> None:
        soak.restart(p.target)
        soak.restored(fault)

    soak.at(time.monotonic() + p.restore_s, f"restart {p.target}", back)


def _zombie(soak: Soak, p: PlannedFault) -> None:
    member = soak.members[p.target]
    if not member.process.running:
        return
    member.held = "stopped"
    member.process.kill(signal.SIGSTOP)
    fault = soak.record(p.kind, p.target, f"pid {member.process.pid}, SIGSTOP for {p.restore_s:.0f} s")

    def wake() -> None:
        with contextlib.suppress(ProcessLookupError):
            member.process.kill(signal.SIGCONT)
        member.held = ""
        soak.restored(fault)

    soak.at(time.monotonic() + p.restore_s, f"wake {p.target}", wake)


def _broker(soak: Soak, kind: str, target: str, restore_s: float, detail: str = "") -> None:
    node = int(target.removeprefix("broker-"))
    kafka = soak.where.kafka
    # A node still restarting counts as down: it has a pid long before it serves. Session 19's
    # run killed two brokers while the third was starting; alone it could not reach its KRaft
    # quorum, and the whole cluster stayed down for the rest of the run.
    down = [n for n in kafka.node_ids if kafka.pid_of(n) is None or _restarting(soak, n)]
    if node in down or len(down) >= 2:
        return  # already down, or the cluster would be: an outage is another test's fault
    kafka.kill(node, signal.SIGKILL)
    fault = soak.record(kind, target, detail or f"restart in {restore_s:.0f} s")
    soak.broker_down_by[node] = fault

    def back() -> None:  # in the background: a restart waits until the node answers (seconds)
        def restart() -> None:
            # Retried while the node is not up, unless a later fault killed it again as it
            # started: that fault's own restart brings it back, after its own delay.
            for _ in range(10):
                if soak.broker_down_by.get(node) is not fault:
                    break
                try:
                    kafka.restart(node)
                except Exception as exc:
                    logger.warning("restart of %s: %s", target, exc)
                if kafka.pid_of(node) is not None:
                    break
                time.sleep(5)
            if kafka.pid_of(node) is None:
                logger.error("%s did not come back after 10 restarts", target)
            soak.restored(fault)

        # Not the soak's one-at-a-time worker: two brokers down need to start together, since
        # neither reaches the KRaft quorum alone (session 19: a node retried alone for 13 minutes
        # while the other's restart waited behind it). Not a thread that ends either: a broker
        # dies with the thread that launched it (PR_SET_PDEATHSIG, ``devtools.localproc``).
        soak.broker_restarts.submit(restart).add_done_callback(_log_failure)

    soak.at(time.monotonic() + restore_s, f"restart {target}", back)


def _log_failure(done: Future[None]) -> None:
    if (exc := done.exception()) is not None:
        logger.error("broker restart failed", exc_info=exc)


def _restarting(soak: Soak, node: int) -> bool:
    fault = soak.broker_down_by.get(node)
    return fault is not None and fault.restored_s is None


def _broker_kill(soak: Soak, p: PlannedFault) -> None:
    _broker(soak, p.kind, p.target, p.restore_s)


def _two_brokers(soak: Soak, p: PlannedFault) -> None:
    _broker(soak, p.kind, p.target, p.restore_s, f"first of two, restart in {p.restore_s:.0f} s")
    second = lambda: _broker(  # noqa: E731 - a deferred call with its arguments bound
        soak, p.kind, p.second_target, p.second_restore_s, f"second of two, restart in {p.second_restore_s:.0f} s"
    )
    soak.at(time.monotonic() + p.second_after_s, f"kill {p.second_target}", second)


def _redis_kill(soak: Soak, p: PlannedFault) -> None:
    server = soak.where.redis_server
    if server.pid is None:
        return
    pid = server.pid
    server.kill(signal.SIGKILL)
    fault = soak.record(p.kind, "redis", f"pid {pid}, restart in {p.restore_s:.0f} s")

    def back() -> None:
        server.start()
        soak.restored(fault)

    soak.at(time.monotonic() + p.restore_s, "restart redis", back)


def _api_kill(soak: Soak, p: PlannedFault) -> None:
    """SIGKILL the API with a request of the client in flight (polls up to 10 s for one)."""
    in_flight = soak.client.in_flight if soak.client else (lambda: False)
    _when(soak, p, in_flight, 10.0, "query-api-0", ("mid-request", "no request in flight"))


def _build_kill(soak: Soak, p: PlannedFault) -> None:
    """SIGKILL the compactor while a version is being written (its spill dir exists)."""
    index_dir = soak.where.settings.data_dir / "index"
    _when(soak, p, lambda: any(index_dir.glob(".spill-*")), BUILD_WAIT_S, "index-compactor-0",
          ("mid-version", "between builds"))


def _when(
    soak: Soak, p: PlannedFault, ready: Callable[[], bool], wait_s: float, label: str, notes: tuple[str, str]
) -> None:
    """Kill ``label`` as soon as ``ready()`` (polled on the soak's queue, so nothing else waits),
    or when ``wait_s`` has passed; the fault's detail says which."""
    deadline = time.monotonic() + wait_s

    def poll() -> None:
        hit = ready()
        if not hit and time.monotonic() < deadline:
            soak.at(time.monotonic() + 0.02, f"{p.kind}: wait", poll)
            return
        _kill_member(soak, PlannedFault(p.at_s, p.kind, label, p.restore_s))
        if soak.faults and soak.faults[-1].kind == p.kind:
            soak.faults[-1].detail += f"; {notes[0] if hit else notes[1]}"

    poll()


def _disk_floor(soak: Soak, p: PlannedFault) -> None:
    """A ballast file (fallocate: no data written) takes free space below the services' floor."""
    floor = soak.floor_mb << 20
    free = shutil.disk_usage(soak.cfg.root).free
    size = max(0, free - floor) + (256 << 20)
    fd = os.open(soak.ballast, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.posix_fallocate(fd, 0, size)
    finally:
        os.close(fd)
    after = shutil.disk_usage(soak.cfg.root).free
    fault = soak.record(p.kind, "data-disk", f"ballast {size >> 20} MB: free {after >> 20} MB, floor {floor >> 20} MB")

    def lift() -> None:
        with contextlib.suppress(FileNotFoundError):
            soak.ballast.unlink()
        soak.restored(fault)

    soak.at(time.monotonic() + p.restore_s, "remove the ballast", lift)


INJECT: dict[str, Callable[[Soak, PlannedFault], None]] = {
    "member-kill": _kill_member,
    "zombie": _zombie,
    "broker-kill": _broker_kill,
    "two-brokers": _two_brokers,
    "redis-kill": _redis_kill,
    "api-kill": _api_kill,
    "build-kill": _build_kill,
    "disk-floor": _disk_floor,
}
