"""The soak's picture (issue 28): throughput, consumer lag and memory over the run, with every
injected fault drawn across all of them, so a dip or a climb is read against its cause.

Four stacked panels share the time axis (minutes on the soak's clock, as ``t_s`` everywhere):
pages/s, consumer lag per group, RSS per service name (members summed: what the service costs
the machine; a killed member shows as a dip), and the faults as vertical lines coloured by kind,
one legend entry per kind. matplotlib is imported only when drawing, with the Agg canvas and
no pyplot: no display, no global backend state, and :class:`Fault` stays cheap to import.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from bench.soak.resources import Sample

if TYPE_CHECKING:
    from matplotlib.axes import Axes

Series = Sequence[tuple[float, float]]  # (t_s, value)
_MEMBER = re.compile(r"-\d+$")


@dataclass(frozen=True, slots=True)
class Fault:
    """One injected fault: when, what kind ("kill", "broker-kill", "partition", ...), on what
    (a process label, a broker, a link) and a free-form detail for the record."""

    t_s: float
    kind: str
    target: str
    detail: str = ""


def service_of(label: str) -> str:
    """The service name of a process label: ``fetcher-0`` -> ``fetcher``, ``redis`` -> ``redis``."""
    return _MEMBER.sub("", label)


def pages_per_s(timeline: Sequence[Sample], smooth_s: float = 60.0) -> list[tuple[float, float]]:
    """Pages stored per second at each sample, over the trailing ``smooth_s`` (at least the
    previous sample): a rate between two samples seconds apart is mostly batch noise. A counter
    that goes back (a reset) reads as 0, not as a negative rate."""
    out = []
    j = 0
    for i in range(1, len(timeline)):
        t = timeline[i].t_s
        while j < i - 1 and timeline[j].t_s < t - smooth_s:
            j += 1
        dt = t - timeline[j].t_s
        if dt > 0:
            out.append((t, max(0.0, (timeline[i].pages_stored - timeline[j].pages_stored) / dt)))
    return out


def rss_by_service(
    timeline: Sequence[Sample], how: Literal["sum", "max"] = "sum"
) -> dict[str, list[tuple[float, float]]]:
    """RSS in MB per service name at each sample, its members' summed (or the largest one's)."""
    out: dict[str, list[tuple[float, float]]] = {}
    for s in timeline:
        per: dict[str, list[int]] = {}
        for label, p in s.processes.items():
            per.setdefault(service_of(label), []).append(p.rss_bytes)
        for service, values in per.items():
            total = sum(values) if how == "sum" else max(values)
            out.setdefault(service, []).append((s.t_s, total / 1e6))
    return dict(sorted(out.items()))


def plot(
    timeline: Sequence[Sample],
    faults: Sequence[Fault],
    path: Path,
    *,
    lag: Mapping[str, Series] | None = None,
    pages: Series | None = None,
    rss: Literal["sum", "max"] = "sum",
    title: str | None = None,
) -> Path:
    """Write the soak's PNG to ``path``: ``timeline`` from a :class:`ResourceSampler`, ``lag``
    as ``{group: [(t_s, lag)]}``, ``pages`` a pages/s series that replaces the one derived from
    ``pages_stored``. Sized for a 2-hour run with ~100 faults (1400 x 1100 px)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    fig = Figure(figsize=(14, 11), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    ax_pages, ax_lag, ax_rss, ax_faults = fig.subplots(
        4, 1, sharex=True, gridspec_kw={"height_ratios": [3, 3, 3, 1]}
    )
    if title:
        fig.suptitle(title)

    rate = list(pages) if pages is not None else pages_per_s(timeline)
    ax_pages.plot(*_minutes(rate), color="black", lw=1)
    ax_pages.set_ylabel("pages/s")

    for group, points in sorted((lag or {}).items()):
        ax_lag.plot(*_minutes(points), lw=1, label=group)
    ax_lag.set_ylabel("consumer lag (messages)")
    if lag:
        _legend_outside(ax_lag)
    else:
        ax_lag.text(0.5, 0.5, "no lag series", ha="center", va="center", transform=ax_lag.transAxes, color="grey")

    for service, points in rss_by_service(timeline, rss).items():
        ax_rss.plot(*_minutes(points), lw=1, label=service)
    ax_rss.set_ylabel(f"RSS MB ({rss} of members)")
    if any(s.processes for s in timeline):
        _legend_outside(ax_rss)

    kinds = sorted({f.kind for f in faults})
    colours = {kind: f"C{i % 10}" for i, kind in enumerate(kinds)}
    for ax in (ax_pages, ax_lag, ax_rss):
        for f in faults:
            ax.axvline(f.t_s / 60, color=colours[f.kind], lw=0.7, alpha=0.45)
        ax.grid(True, alpha=0.3)
    # the bottom strip: one row per kind, a tick per fault, so dense kinds stay countable
    for row, kind in enumerate(kinds):
        xs = [f.t_s / 60 for f in faults if f.kind == kind]
        ax_faults.plot(xs, [row] * len(xs), "|", color=colours[kind], ms=12, mew=1.5)
    ax_faults.set_yticks(range(len(kinds)), kinds, fontsize="small")
    ax_faults.set_ylim(-0.7, max(len(kinds), 1) - 0.3)
    ax_faults.set_ylabel("faults")
    ax_faults.grid(True, axis="x", alpha=0.3)
    ax_faults.set_xlabel("minutes since the soak started")
    if kinds:
        counts = {kind: sum(1 for f in faults if f.kind == kind) for kind in kinds}
        handles = [Line2D([], [], color=colours[k], lw=2, label=f"{k} ({counts[k]})") for k in kinds]
        _legend_outside(ax_pages, handles=handles, title="faults")

    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    return path


def _minutes(points: Series) -> tuple[list[float], list[float]]:
    return [t / 60 for t, _ in points], [v for _, v in points]


def _legend_outside(ax: Axes, **kwargs: Any) -> None:
    ax.legend(loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize="small", frameon=False, **kwargs)
