"""The soak's resource curves and their flatness verdict (issue 28).

A leak shows only over hours, so the soak samples every process and data directory of the
deployment as it runs (:class:`ResourceSampler`) and judges the curves at the end
(:func:`flatness`). Each sample is also appended as one JSON line to a file as soon as it is
taken: a run that is killed keeps its curve, and :func:`load_samples` reads it back.

Times (``t_s``) are seconds on the soak's own clock (from its start), the same clock as the
faults and the consumer lag that :mod:`bench.soak.plot` draws over them.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any, TypedDict

import psutil


@dataclass(frozen=True, slots=True)
class ProcessSample:
    """One process at one instant. ``pid`` is kept because a label outlives its processes: a
    member killed by a fault comes back under the same label with a new pid."""

    pid: int
    rss_bytes: int
    fds: int
    threads: int


@dataclass(frozen=True, slots=True)
class Sample:
    """Everything measured at ``t_s``: by process label, by data directory name, and the labels
    asked for but not measurable (dead, a zombie not yet reaped, not ours)."""

    t_s: float
    pages_stored: int
    processes: dict[str, ProcessSample] = field(default_factory=dict)
    disk_bytes: dict[str, int] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, row: Mapping[str, Any]) -> Sample:
        return cls(
            t_s=float(row["t_s"]),
            pages_stored=int(row["pages_stored"]),
            processes={label: ProcessSample(**p) for label, p in row.get("processes", {}).items()},
            disk_bytes={name: int(n) for name, n in row.get("disk_bytes", {}).items()},
            missing=list(row.get("missing", [])),
        )


def dir_bytes(root: Path) -> int:
    """Bytes ``root`` takes on disk: ``st_blocks * 512`` of every file and directory under it,
    each inode once, symlinks not followed (what ``du -sB1`` says).

    Allocated blocks, not ``st_size``: the question is what the run costs the disk, and sizes
    mislead both ways: Kafka preallocates each active segment's index files as sparse files of
    ``segment.index.bytes`` (10 MiB, a few KiB really written), which ``st_size`` counts in
    full, while a directory of many small files takes a block per file that sizes ignore.

    Anything that vanishes or cannot be read mid-walk (a segment deleted by retention, a
    compacted file renamed) is skipped: the walk races the running services by design."""
    total = 0
    seen: set[tuple[int, int]] = set()
    stack = [os.fspath(root)]
    while stack:
        path = stack.pop()
        try:
            st = os.stat(path, follow_symlinks=False)
            with os.scandir(path) as entries:
                children = list(entries)
        except OSError:  # gone, not a directory any more, or not readable
            continue
        total += _blocks(st, seen)
        for entry in children:
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                    continue
                total += _blocks(entry.stat(follow_symlinks=False), seen)
            except OSError:
                continue
    return total


def _blocks(st: os.stat_result, seen: set[tuple[int, int]]) -> int:
    if st.st_nlink > 1:  # a hard link: count its inode once
        key = (st.st_dev, st.st_ino)
        if key in seen:
            return 0
        seen.add(key)
    blocks = getattr(st, "st_blocks", None)  # not on Windows: fall back to the size
    return blocks * 512 if blocks is not None else st.st_size


class ResourceSampler:
    """Samples, at each :meth:`sample` call, RSS, open descriptors and threads of every process
    ``processes()`` returns (``{label: pid}``, asked anew each time since restarts change pids)
    and the bytes on disk of each data directory. Keeps the samples in :attr:`samples` and
    appends each to ``out`` as one JSON line."""

    def __init__(
        self,
        processes: Callable[[], Mapping[str, int]],
        data_dirs: Mapping[str, Path] | None = None,
        out: Path | None = None,
        detail: Path | None = None,
        detail_every: int = 12,
    ) -> None:
        """``detail``: every ``detail_every``-th sample, each process's threads by name and
        descriptors by kind go there as one JSON line (what grew, when a count does)."""
        self._processes = processes
        self._data_dirs = dict(data_dirs or {})
        self._out = out
        self._detail = detail
        self._detail_every = max(1, detail_every)
        self._handles: dict[str, psutil.Process] = {}  # by label; replaced when its pid changes
        self.samples: list[Sample] = []

    def sample(self, t_s: float, pages_stored: int) -> Sample:
        measured: dict[str, ProcessSample] = {}
        missing: list[str] = []
        current = dict(self._processes())
        for label, pid in sorted(current.items()):
            got = self._measure(label, pid)
            if got is None:
                missing.append(label)
            else:
                measured[label] = got
        for label in self._handles.keys() - current.keys():
            del self._handles[label]
        disk = {name: dir_bytes(path) for name, path in sorted(self._data_dirs.items())}
        row = Sample(t_s, pages_stored, measured, disk, missing)
        self.samples.append(row)
        if self._out is not None:
            with self._out.open("a", encoding="utf-8") as f:
                f.write(json.dumps(row.to_json(), separators=(",", ":")) + "\n")
        if self._detail is not None and (len(self.samples) - 1) % self._detail_every == 0:
            detail = {"t_s": t_s, "processes": {label: process_detail(pid) for label, pid in sorted(current.items())}}
            with self._detail.open("a", encoding="utf-8") as f:
                f.write(json.dumps(detail, separators=(",", ":")) + "\n")
        return row

    def _measure(self, label: str, pid: int) -> ProcessSample | None:
        """None for a process that is gone, a zombie (killed, not yet reaped: its RSS reads 0,
        which is no measurement) or not ours to read."""
        try:
            handle = self._handles.get(label)
            if handle is None or handle.pid != pid:
                handle = self._handles[label] = psutil.Process(pid)
            with handle.oneshot():
                if handle.status() == psutil.STATUS_ZOMBIE:
                    return None
                return ProcessSample(pid, handle.memory_info().rss, handle.num_fds(), handle.num_threads())
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            self._handles.pop(label, None)
            return None


def process_detail(pid: int) -> dict[str, dict[str, int]]:
    """A process's threads by name (``/proc/<pid>/task/*/comm``: librdkafka names its own, e.g.
    ``rdk:broker1``) and descriptors by kind (socket, pipe, anon_inode:[eventfd], file...); empty
    for a process gone meanwhile."""
    proc = Path("/proc") / str(pid)
    threads: Counter[str] = Counter()
    fds: Counter[str] = Counter()
    with contextlib.suppress(OSError):
        for task in proc.joinpath("task").iterdir():
            with contextlib.suppress(OSError):
                threads[task.joinpath("comm").read_text().strip()] += 1
        for fd in proc.joinpath("fd").iterdir():
            with contextlib.suppress(OSError):
                target = os.readlink(fd)
                fds[target.split(":[", 1)[0] if target.startswith(("socket:", "pipe:")) else
                    target if target.startswith("anon_inode:") else "file"] += 1
    return {"threads": dict(threads), "fds": dict(fds)}


def load_samples(path: Path) -> list[Sample]:
    """The samples a :class:`ResourceSampler` appended to ``path``; a last line cut short by a
    killed run is dropped."""
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(Sample.from_json(json.loads(line)))
        except (ValueError, KeyError, TypeError):
            continue
    return out


# ---------------------------------------------------------------------------------- flatness


class SeriesVerdict(TypedDict):
    """One curve: its value at the warmup mark and at the end (window medians), end / start."""

    start: float | None
    end: float | None
    ratio: float | None
    ok: bool


class ProcessVerdict(TypedDict):
    """``status``: "flat", "growth", "restarted" (the last process is too young to judge) or
    "absent" (not running at the end: killed and not back, which is the invariants' business)."""

    status: str
    ok: bool
    pid: int
    restarts: int
    from_s: float | None  # where the compared span starts: the mark, or the last process's own
    rss_bytes: SeriesVerdict | None
    fds: SeriesVerdict | None


class DiskVerdict(TypedDict):
    """``status``: "flat" (bytes per page stayed put: it grows with the pages), "bounded" (bytes
    per page moved, but the bytes themselves did not grow: fixed-size state such as a Bloom
    filter, or state rewritten in place), "falls" (the bytes grew, slower than the pages: a part
    that does not scale with them, such as a store's hot tier or Redis's per-domain state, spread
    over more pages), "drift" (bytes per page rose: growth out of proportion) or "no pages"."""

    status: str
    ok: bool
    pages_at_mark: int | None
    pages_at_end: int | None
    bytes_per_page: SeriesVerdict | None
    bytes: SeriesVerdict | None


class FlatnessVerdict(TypedDict):
    ok: bool
    rule: str
    mark_s: float
    end_s: float
    window_s: float
    processes: dict[str, ProcessVerdict]
    data_dirs: dict[str, DiskVerdict]


Point = tuple[float, float]


def flatness(
    samples: Sequence[Sample],
    warmup_fraction: float = 0.2,
    limit: float = 0.10,
    *,
    window_fraction: float = 0.05,
    min_life_fraction: float = 0.5,
    fds_slack: int = 2,
) -> FlatnessVerdict:
    """Issue 28's rule: between the end of the first ``warmup_fraction`` of the run (the mark)
    and the end, RSS and descriptors grow less than ``limit`` and, per data directory, disk
    bytes per stored page stay within ``limit`` (either way). A directory whose bytes do not
    scale with the pages (a fixed-size Bloom filter, Redis's rewritten AOF) passes instead when
    its bytes grow less than ``limit``: "against pages stored" is no measure of it, and its
    bytes per page only fall (ADR 034, session 22). So does one whose bytes per page fall past
    ``limit`` while its bytes grow: a part that does not scale with pages (a store's hot tier,
    the frontier's backlog, Redis's per-domain state) spread over more of them, which is not a
    leak (ADR 034, session 23; the issue's words are "within 10%"). Growth out of proportion,
    bytes per page rising past ``limit``, fails.

    Made robust to noise and restarts, per process label:

    * a value "at" an instant is the median of the samples in a window of ``window_fraction``
      of the run (centred on the mark; the last one at the end), the nearest sample when the
      window holds none: a GC pause or a burst of connections is one sample, not a trend;
    * only the label's last process is compared (samples of the pids before it are left out):
      a restarted member's fresh process starts low and would hide a leak, or fake one. When
      that process started after the mark, it is judged on its own life if it lived at least
      ``min_life_fraction`` of the run, given the same warm-up as the first processes (its mark
      is its start + ``warmup_fraction`` of the run: a member restarted at minute 28 of a
      2-hour run filled its caches until minute ~50, session 23), else reported as "restarted"
      and not judged: an hour-old process is still filling its caches;
    * descriptors may grow by ``fds_slack`` whatever the ratio: on a base of ~15 descriptors one
      more socket in a pool is +7%, which is load, not a leak (0 applies the bare ratio).

    Threads are sampled for the plot and the record, not judged. Returns plain dicts and
    numbers, so the verdict goes into the bench's JSON as it is."""
    if not samples:
        raise ValueError("flatness of no samples")
    t0, t1 = samples[0].t_s, samples[-1].t_s
    span = t1 - t0
    window = window_fraction * span
    mark = t0 + warmup_fraction * span
    rule = (
        f"from {warmup_fraction:.0%} of the run to the end: RSS and fds grow < {limit:.0%}"
        f" (fds +{fds_slack} allowed); per data directory, bytes per stored page within ±{limit:.0%}"
        f" (flat), else its bytes grow < {limit:.0%} (bounded: state that does not scale with pages), else"
        f" bytes per page fall (falls: slower than the pages); a rise past {limit:.0%} is drift;"
        f" values are medians of {window_fraction:.0%}-of-the-run windows, last pid per label only"
    )
    by_label: dict[str, list[tuple[float, ProcessSample]]] = {}
    for s in samples:
        for label, p in s.processes.items():
            by_label.setdefault(label, []).append((s.t_s, p))
    processes = {
        label: _process_verdict(
            series, t0, t1, warmup_fraction, window_fraction, limit, min_life_fraction, fds_slack
        )
        for label, series in sorted(by_label.items())
    }
    names = sorted({name for s in samples for name in s.disk_bytes})
    data_dirs = {name: _disk_verdict(samples, name, mark, window, t1, limit) for name in names}
    ok = all(v["ok"] for v in processes.values()) and all(v["ok"] for v in data_dirs.values())
    return FlatnessVerdict(
        ok=ok, rule=rule, mark_s=mark, end_s=t1, window_s=window, processes=processes, data_dirs=data_dirs
    )


def _process_verdict(
    series: list[tuple[float, ProcessSample]],
    t0: float,
    t1: float,
    warmup_fraction: float,
    window_fraction: float,
    limit: float,
    min_life_fraction: float,
    fds_slack: int,
) -> ProcessVerdict:
    span = t1 - t0
    pid = series[-1][1].pid
    restarts = sum(1 for (_, a), (_, b) in pairwise(series) if a.pid != b.pid)
    if series[-1][0] < t1 - window_fraction * span:  # not running in the final window
        return ProcessVerdict(
            status="absent", ok=True, pid=pid, restarts=restarts, from_s=None, rss_bytes=None, fds=None
        )
    own = series[_last_run_start(series) :]
    born = own[0][0]
    mark = t0 + warmup_fraction * span
    judged = True
    if born > mark:  # restarted after the mark: the same warm-up as the first processes had
        judged = t1 - born >= min_life_fraction * span
        # one too young to judge is reported over its own life (a mark past the end means nothing)
        mark = born + warmup_fraction * (span if judged else t1 - born)
    window = window_fraction * span
    rss = _growth([(t, p.rss_bytes) for t, p in own], mark, window, t1, limit, 0)
    fds = _growth([(t, p.fds) for t, p in own], mark, window, t1, limit, fds_slack)
    ok = rss["ok"] and fds["ok"]
    status = ("flat" if ok else "growth") if judged else "restarted"
    return ProcessVerdict(
        status=status, ok=ok or not judged, pid=pid, restarts=restarts, from_s=mark, rss_bytes=rss, fds=fds
    )


def _last_run_start(series: list[tuple[float, ProcessSample]]) -> int:
    """Index of the first of the trailing samples that share the last pid."""
    pid = series[-1][1].pid
    i = len(series) - 1
    while i > 0 and series[i - 1][1].pid == pid:
        i -= 1
    return i


def _ends(points: list[Point], mark: float, window: float, end: float) -> tuple[float, float]:
    """The values at the mark (a window centred on it) and at the end (the last window)."""
    start = _at(points, mark - window / 2, mark + window / 2, mark)
    last = _at(points, end - window, end, end)
    assert start is not None and last is not None  # points is never empty here
    return start, last


def _growth(points: list[Point], mark: float, window: float, end: float, limit: float, slack: float) -> SeriesVerdict:
    start, last = _ends(points, mark, window, end)
    ratio = last / start if start else None
    ok = last - start < limit * start or last - start <= slack
    return SeriesVerdict(start=start, end=last, ratio=_round(ratio), ok=ok)


def _disk_verdict(
    samples: Sequence[Sample], name: str, mark: float, window: float, end: float, limit: float
) -> DiskVerdict:
    stored = [s for s in samples if s.pages_stored > 0 and name in s.disk_bytes]
    if not stored:
        return DiskVerdict(status="no pages", ok=False, pages_at_mark=None, pages_at_end=None, bytes_per_page=None,
                           bytes=None)
    start, last = _ends([(s.t_s, s.disk_bytes[name] / s.pages_stored) for s in stored], mark, window, end)
    ratio = last / start if start else None
    flat = ratio is not None and abs(ratio - 1) <= limit
    # Not in proportion to the pages: then the bytes themselves must not grow (the process rule).
    size = _growth([(s.t_s, float(s.disk_bytes[name])) for s in stored], mark, window, end, limit, 0)
    falls = ratio is not None and ratio < 1 - limit  # grew, but slower than the pages
    status = "flat" if flat else "bounded" if size["ok"] else "falls" if falls else "drift"
    at_mark, at_end = _ends([(s.t_s, float(s.pages_stored)) for s in stored], mark, window, end)
    return DiskVerdict(
        status=status,
        ok=status != "drift",
        pages_at_mark=int(at_mark),
        pages_at_end=int(at_end),
        bytes_per_page=SeriesVerdict(start=_round(start), end=_round(last), ratio=_round(ratio), ok=flat),
        bytes=size,
    )


def _at(points: Iterable[Point], lo: float, hi: float, centre: float) -> float | None:
    """The median of the values in [lo, hi], else the value of the point nearest ``centre``."""
    pts = list(points)
    inside = [v for t, v in pts if lo <= t <= hi]
    if inside:
        return float(statistics.median(inside))
    if not pts:
        return None
    return float(min(pts, key=lambda p: abs(p[0] - centre))[1])


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 4)
