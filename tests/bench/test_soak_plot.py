"""The soak's PNG (issue 28): drawn from a real sampled timeline (this test's own children)
with faults and lag series, written as a PNG of the expected size; the derived series behind it."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import matplotlib.image

from bench.soak.plot import Fault, pages_per_s, plot, rss_by_service, service_of
from bench.soak.resources import ProcessSample, ResourceSampler, Sample

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _timeline(tmp_path: Path) -> list[Sample]:
    """~1 s of samples of three real processes, two members of one service."""
    children = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"]) for _ in range(3)]
    try:
        labels = {"fetcher-0": children[0].pid, "fetcher-1": children[1].pid, "redis": children[2].pid}
        sampler = ResourceSampler(lambda: labels, {"data": tmp_path})
        started = time.monotonic()
        for i in range(12):
            sampler.sample(time.monotonic() - started, 50 * i)
            time.sleep(0.08)
        return sampler.samples
    finally:
        for child in children:
            child.kill()
            child.wait()


def test_plot_writes_a_png_of_four_panels(tmp_path: Path) -> None:
    timeline = _timeline(tmp_path / "data")
    end = timeline[-1].t_s
    kinds = ["kill", "broker-kill", "partition", "redis-restart"]
    faults = [Fault(end * i / 40, kinds[i % 4], f"fetcher-{i % 2}", "SIGKILL") for i in range(40)]
    lag = {
        "crawlstream.fetch": [(s.t_s, float(s.pages_stored % 70)) for s in timeline],
        "crawlstream.store": [(s.t_s, 10.0) for s in timeline],
    }
    out = plot(timeline, faults, tmp_path / "plots" / "soak.png", lag=lag, title="soak test")
    assert out == tmp_path / "plots" / "soak.png"
    data = out.read_bytes()
    assert data[:8] == PNG_SIGNATURE and len(data) > 30_000
    image = matplotlib.image.imread(out)
    assert image.shape[:2] == (1100, 1400)


def test_plot_without_faults_or_lag(tmp_path: Path) -> None:
    sample = Sample(0.0, 0, {"api": ProcessSample(1, 50_000_000, 10, 2)})
    out = plot([sample], [], tmp_path / "empty.png")
    assert out.read_bytes()[:8] == PNG_SIGNATURE


def test_the_derived_series() -> None:
    assert [service_of(x) for x in ("fetcher-0", "broker-12", "redis", "api")] == ["fetcher", "broker", "redis", "api"]
    both = {"fetcher-0": ProcessSample(1, 100_000_000, 5, 1), "fetcher-1": ProcessSample(2, 50_000_000, 5, 1)}
    timeline = [
        Sample(0.0, 0, both),
        Sample(10.0, 1000, {"fetcher-0": ProcessSample(1, 120_000_000, 5, 1)}),  # fetcher-1 killed
        Sample(20.0, 500, {}),  # the counter went back: a reset, not a negative rate
        Sample(100.0, 8500, {}),
    ]
    assert rss_by_service(timeline) == {"fetcher": [(0.0, 150.0), (10.0, 120.0)]}
    assert rss_by_service(timeline, "max")["fetcher"][0] == (0.0, 100.0)
    # over the trailing 60 s; at 100 s none is that recent, so over the previous sample
    assert pages_per_s(timeline, smooth_s=60.0) == [(10.0, 100.0), (20.0, 25.0), (100.0, 100.0)]
