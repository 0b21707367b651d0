"""The soak's broker faults never take the cluster below its KRaft quorum by accident (issue 28).

Session 19's run killed broker-3; its restart was still starting (it had a pid, it did not
serve yet) when a two-broker fault killed brokers 2 and 1. Alone, broker-3 could not reach its
quorum, and the soak's one-at-a-time worker retried it for 13 minutes while the other two
restarts waited behind it: the cluster stayed down for the rest of the run. (The first fix ran
each restart on a thread that then ended, and the broker died with it: a JVM is launched with
PR_SET_PDEATHSIG.) Checked here on stand-ins for the cluster (the real one takes minutes).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from types import SimpleNamespace

from bench.soak import faults
from bench.soak.invariants import FaultRecord


@dataclass
class _Kafka:
    """Three nodes; ``restart`` takes its time and leaves the node starting."""

    pids: dict[int, int | None] = field(default_factory=lambda: {1: 101, 2: 102, 3: 103})
    killed: list[int] = field(default_factory=list)
    restarted: list[tuple[int, float]] = field(default_factory=list)
    launchers: list[threading.Thread] = field(default_factory=list)
    node_ids: tuple[int, ...] = (1, 2, 3)

    def pid_of(self, node: int) -> int | None:
        return self.pids[node]

    def kill(self, node: int, sig: int) -> None:
        self.killed.append(node)
        self.pids[node] = None

    def restart(self, node: int) -> None:
        self.restarted.append((node, time.monotonic()))
        self.launchers.append(threading.current_thread())
        time.sleep(0.3)  # a start that waits for its quorum
        self.pids[node] = 200 + node


class _Soak(SimpleNamespace):
    def record(self, kind: str, target: str, detail: str = "") -> FaultRecord:
        return FaultRecord(time.monotonic(), kind, target, detail)

    def restored(self, fault: FaultRecord) -> None:
        fault.restored_s = time.monotonic()

    def at(self, when_s: float, what: str, action: Callable[[], None]) -> None:
        self.actions.append(action)


def _soak() -> _Soak:
    return _Soak(where=SimpleNamespace(kafka=_Kafka()), broker_down_by={}, actions=[],
                 broker_restarts=ThreadPoolExecutor(max_workers=3))


def test_a_broker_still_restarting_counts_as_down() -> None:
    soak = _soak()
    faults._broker(soak, "broker-kill", "broker-3", 0.0)
    soak.where.kafka.pids[3] = 999  # its restart has launched it: a pid, not yet serving
    faults._broker(soak, "two-brokers", "broker-2", 0.0)  # one down (3) and this one: allowed
    faults._broker(soak, "two-brokers", "broker-1", 0.0)  # would leave no node serving: refused
    assert soak.where.kafka.killed == [3, 2]


def test_two_brokers_down_restart_together() -> None:
    soak = _soak()
    faults._broker(soak, "two-brokers", "broker-2", 0.0)
    faults._broker(soak, "two-brokers", "broker-1", 0.0)
    for action in soak.actions:
        action()
    deadline = time.monotonic() + 5
    while len(soak.where.kafka.restarted) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    (_, first), (_, second) = soak.where.kafka.restarted
    assert abs(second - first) < 0.2, "the second restart waited for the first to finish"
    while any(f.restored_s is None for f in soak.broker_down_by.values()) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert all(f.restored_s is not None for f in soak.broker_down_by.values())
    # A broker dies with the thread that launched it (PR_SET_PDEATHSIG): that thread lives on.
    time.sleep(0.1)
    assert all(t.is_alive() for t in soak.where.kafka.launchers)
    soak.broker_restarts.shutdown()
