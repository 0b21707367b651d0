"""Seconds each test file took in the last full run, so `make test` can start the longest first.

`--dist loadfile` hands whole files to the workers in collection order; a four-minute file
handed out last is the run's tail while the other workers sit idle. `tests/durations.json` is
checked in (CI runs from a fresh clone); `make test` writes its JUnit report to
`test-artifacts/make-test.xml` and `make test-durations` folds it back into the JSON.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

from crawlstream.durable import write_atomically

REPO = Path(__file__).resolve().parents[1]
DURATIONS = REPO / "tests" / "durations.json"


def _test_file(classname: str) -> str | None:
    """`tests.e2e.test_x.TestY` -> `tests/e2e/test_x.py`: the longest dotted prefix that is a
    file (a JUnit classname carries the class, if any, after the module)."""
    parts = classname.split(".")
    for end in range(len(parts), 0, -1):
        candidate = "/".join(parts[:end]) + ".py"
        if (REPO / candidate).is_file():
            return candidate
    return None


def from_junit(report: Path) -> dict[str, float]:
    """Each file's seconds (setup, call and teardown of every test: JUnit's default `total`)."""
    totals: dict[str, float] = defaultdict(float)
    for case in ET.parse(report).getroot().iter("testcase"):
        path = _test_file(case.get("classname", ""))
        if path is not None:
            totals[path] += float(case.get("time", "0") or 0)
    return dict(totals)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python tests/durations.py <junit.xml>", file=sys.stderr)
        return 2
    report = Path(argv[0])
    if not report.is_file():
        print(f"{report}: no JUnit report (run `make test` first)", file=sys.stderr)
        return 2
    totals = from_junit(report)
    ordered = dict(sorted(((k, round(v, 1)) for k, v in totals.items()), key=lambda kv: -kv[1]))
    write_atomically(DURATIONS, (json.dumps(ordered, indent=0) + "\n").encode())
    print(f"{DURATIONS.relative_to(REPO)}: {len(ordered)} files, {sum(ordered.values()):.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
