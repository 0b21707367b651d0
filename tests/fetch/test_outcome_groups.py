"""Every grouping of fetch outcomes is defined once, next to the outcome enum
(``crawlstream.fetch._outcome``), and its users ask it instead of spelling their own set."""

from __future__ import annotations

import ast
from pathlib import Path

from crawlstream.crawl import CrawlStats
from crawlstream.events import FetchResult
from crawlstream.fetch import ERROR_OUTCOMES, OUTCOMES, REVISITABLE_OUTCOMES
from crawlstream.politeness.service import to_outcome

LIBS = Path(__file__).resolve().parents[2] / "libs" / "crawlstream"
HOME = LIBS / "fetch" / "_outcome.py"


def _outcome_sets(path: Path) -> list[str]:
    """Set and tuple/list literals (also inside frozenset(...)) of two or more outcome names."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Set | ast.Tuple | ast.List):
            names = {e.value for e in node.elts if isinstance(e, ast.Constant) and e.value in OUTCOMES}
            if len(names) >= 2:
                found.append(f"{path.relative_to(LIBS)}:{node.lineno} {sorted(names)}")
    return found


def test_no_module_but_the_outcome_enum_spells_a_group_of_outcomes() -> None:
    spelled = [hit for path in sorted(LIBS.rglob("*.py")) if path != HOME for hit in _outcome_sets(path)]
    assert not spelled, f"use crawlstream.fetch's groups instead: {spelled}"


def test_the_groups_hold_only_known_outcomes() -> None:
    assert set(OUTCOMES) >= ERROR_OUTCOMES and set(OUTCOMES) >= REVISITABLE_OUTCOMES
    assert not ERROR_OUTCOMES & REVISITABLE_OUTCOMES


def _result(outcome: str, status: int) -> FetchResult:
    return FetchResult(
        url="http://example.com/",
        url_key=1,
        domain="example.com",
        depth=0,
        status=status,
        outcome=outcome,
        fetched_at_ms=0,
        elapsed_ms=1,
        attempt=0,
    )


def test_the_crawl_stats_and_the_scheduler_read_the_same_groups() -> None:
    stats = CrawlStats()
    for i, outcome in enumerate(OUTCOMES):
        stats.add(_result(outcome, 0 if outcome in ERROR_OUTCOMES else 200), 0, i)
    assert stats.errors == len(ERROR_OUTCOMES)
    for outcome in OUTCOMES:
        validators = to_outcome(_result(outcome, 200)).validators
        assert (validators is not None) == (outcome in REVISITABLE_OUTCOMES), outcome
