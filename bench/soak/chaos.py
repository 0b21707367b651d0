"""The soak's seeded chaos: which fault comes next, when, against what, and when it is undone.

A plan is drawn from one ``random.Random(seed)`` before anything runs, so a seed names a run:
faults come every ``interval_s`` (uniform), kinds drawn from a shuffled bag (every kind once per
round, so a run of N rounds injects each kind N times), targets and durations drawn with them.
Executing a fault is the harness's job (``bench.soak.run``); this module only decides. The
anchors are Jepsen's nemeses and Kafka's Trogdor: many faults, random but repeatable.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field
from typing import Any

# What each kind does (the harness executes them; ``restore_s`` is when it is undone):
KINDS = (
    "member-kill",  # SIGKILL one service member; restarted after restore_s
    "broker-kill",  # SIGKILL one broker; restarted after restore_s (20-90 s)
    "two-brokers",  # one broker, then a second before the first is back: writes stall, none lost
    "redis-kill",  # SIGKILL Redis; restarted on its data after restore_s
    "zombie",  # SIGSTOP a member past its group session; SIGCONT after restore_s
    "api-kill",  # SIGKILL the query API while the client has a request in flight
    "build-kill",  # SIGKILL the index compactor while it writes a version
    "disk-floor",  # free space held below the configured floor for restore_s
)
MEMBER_KINDS = ("member-kill", "zombie")
SESSION_TIMEOUT_S = 6.0  # the deployment's consumer.session.timeout.ms


@dataclass(frozen=True)
class PlannedFault:
    """One fault of the plan: ``at_s`` from the start, against ``target``, undone ``restore_s``
    later; ``second_*`` only for two-brokers (the second broker and its own delay)."""

    at_s: float
    kind: str
    target: str
    restore_s: float
    second_target: str = ""
    second_after_s: float = 0.0
    second_restore_s: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v not in ("", 0.0)}


@dataclass
class ChaosPlan:
    """The faults of a run of ``duration_s``: drawn once, from ``seed``."""

    seed: int
    duration_s: float
    members: list[str]  # labels of the service members that may be killed or stopped
    brokers: list[int]
    interval_s: tuple[float, float] = (30.0, 180.0)
    quiet_tail_s: float = 0.0  # no fault starts in the run's last seconds (the final checks)
    kinds: tuple[str, ...] = KINDS
    faults: list[PlannedFault] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.members or len(self.brokers) < 3:
            raise ValueError("a soak needs service members and three brokers")
        rng = random.Random(self.seed)
        bag: list[str] = []
        t = rng.uniform(*self.interval_s) / 2
        while t < self.duration_s - self.quiet_tail_s:
            if not bag:
                bag = list(self.kinds)
                rng.shuffle(bag)
            self.faults.append(self._draw(rng, t, bag.pop()))
            t += rng.uniform(*self.interval_s)

    def _draw(self, rng: random.Random, at_s: float, kind: str) -> PlannedFault:
        if kind in ("broker-kill", "two-brokers"):
            first, second = rng.sample(self.brokers, 2)
            restore = rng.uniform(20.0, 90.0)
            if kind == "broker-kill":
                return PlannedFault(at_s, kind, f"broker-{first}", restore)
            after = rng.uniform(5.0, min(20.0, restore - 5.0))
            return PlannedFault(
                at_s, kind, f"broker-{first}", restore, f"broker-{second}", after, rng.uniform(15.0, 60.0)
            )
        if kind == "member-kill":
            return PlannedFault(at_s, kind, rng.choice(self.members), rng.uniform(1.0, 20.0))
        if kind == "zombie":
            return PlannedFault(at_s, kind, rng.choice(self.members), SESSION_TIMEOUT_S + rng.uniform(2.0, 15.0))
        if kind == "redis-kill":
            return PlannedFault(at_s, kind, "redis", rng.uniform(2.0, 10.0))
        if kind == "api-kill":
            return PlannedFault(at_s, kind, "query-api", rng.uniform(1.0, 5.0))
        if kind == "build-kill":
            return PlannedFault(at_s, kind, "index-compactor", rng.uniform(1.0, 10.0))
        if kind == "disk-floor":
            return PlannedFault(at_s, kind, "data-disk", 60.0)
        raise ValueError(f"unknown fault kind {kind!r}; expected one of {', '.join(KINDS)}")

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(self.kinds, 0)
        for fault in self.faults:
            out[fault.kind] += 1
        return out
