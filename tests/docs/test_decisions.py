"""Every architecture decision record says where it stands (issue 24): a ``Status:`` line right
under its title, in the form the ADRs share: ``Status: accepted (...)``, ``accepted, revised by
ADR NNN``, ``superseded by ADR NNN``, ``proposed``, ``rejected``, ``deprecated``; an ADR it names
as superseding or revising it exists."""

from __future__ import annotations

import re
from pathlib import Path

DECISIONS = Path(__file__).resolve().parents[2] / "docs" / "decisions"
STATUS = re.compile(r"Status: (accepted|superseded by ADR \d{3}|proposed|rejected|deprecated)\b")


def test_every_adr_has_a_status_line_under_its_title() -> None:
    adrs = sorted(DECISIONS.glob("[0-9][0-9][0-9]-*.md"))
    assert len(adrs) >= 26
    missing = []
    for adr in adrs:
        lines = adr.read_text(encoding="utf-8").splitlines()
        number = adr.name[:3]
        if not (lines[0].startswith("# ") and number in lines[0] and lines[1] == "" and STATUS.match(lines[2])):
            missing.append(f"{adr.name}: {lines[2] if len(lines) > 2 else ''!r}")
            continue
        status = lines[2] + " " + lines[3]  # a status may wrap onto a second line
        for other in re.findall(r"(?:superseded|revised) by ADR (\d{3})", status):
            assert any(DECISIONS.glob(f"{other}-*.md")), f"{adr.name} names ADR {other}, which does not exist"
    assert missing == [], "ADRs without 'Status: ...' as their third line:\n" + "\n".join(missing)
