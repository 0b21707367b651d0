"""The soak of issue 28 in three minutes (``bench.soak``): the distributed deployment on a
3-broker cluster under a seeded handful of faults, then every invariant on the whole history.
The hours-long run is ``make soak``; this one proves the harness and the invariants in
``make test``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.soak.chaos import KINDS
from bench.soak.run import SoakConfig, run_soak

pytestmark = pytest.mark.kafka


@pytest.mark.timeout(900)
def test_a_three_minute_soak_under_chaos_loses_duplicates_and_violates_nothing(tmp_path: Path) -> None:
    cfg = SoakConfig(
        minutes=3,
        seed=3,
        root=tmp_path / "soak",
        domains=40,
        pages_per_domain=60,
        interval_s=(12.0, 24.0),
        check_every_s=60.0,
        disk_margin_mb=2048,
    )
    summary = run_soak(cfg)
    shown = json.dumps(summary, indent=1, default=str)[:6000]
    injected = summary["faults"]["injected"]
    assert summary["faults"]["total"] >= 5, shown
    assert sum(1 for kind in KINDS if injected.get(kind)) >= 5, shown
    assert summary["pages"]["stored"] > 200, shown
    assert summary["pages"]["lost"] == 0, shown
    assert summary["listing"]["duplicated"] == 0, shown
    assert summary["listing"]["expected_not_listed"] == 0, shown
    assert summary["listing"]["listed_not_expected"] == 0, shown
    assert summary["index_equals_full_rebuild"], shown
    assert summary["politeness"]["violations"] == 0, shown
    assert summary["politeness"]["gaps_checked"] > 100, shown
    assert summary["repeats"]["unexplained"] == 0, shown
    assert summary["client"]["walks"] > 0 and summary["client"]["bad_walks"] == 0, shown
    wind_down = summary["wind_down"]
    assert all(wind_down[step] for step in ("faults_undone", "requests_fetched", "drained", "staging_published")), shown
    assert (cfg.root / summary["plot"]).stat().st_size > 10_000
    assert (cfg.root / "faults.jsonl").read_text().count('"event": "start"') == summary["faults"]["total"]
    assert summary["ok"], shown
