"""The seed's column values as crawlstream reads them: pure conversions, every bad value a ValueError."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal

import pytest

from crawlstream.migrate import epoch_ms, flag, frontier_depth, http_status, robots_bytes


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        (1_700_000_000, 1_700_000_000_000),
        (1_700_000_000.25, 1_700_000_000_250),
        (Decimal("1700000000.5"), 1_700_000_000_500),
        ("1700000000", 1_700_000_000_000),
        (datetime(2023, 11, 14, 22, 13, 20, tzinfo=UTC), 1_700_000_000_000),
        (datetime(2023, 11, 14, 22, 13, 20), 1_700_000_000_000),  # no zone: UTC
        (datetime(2023, 11, 15, 0, 13, 20, tzinfo=timezone(timedelta(hours=2))), 1_700_000_000_000),
        (date(1970, 1, 2), 86_400_000),
        ("2023-11-14T22:13:20+00:00", 1_700_000_000_000),
        (0, 0),
    ],
)
def test_epoch_ms_reads_seconds_and_timestamps(value: object, expected: int | None) -> None:
    assert epoch_ms(value) == expected


@pytest.mark.parametrize("value", [-1, float("nan"), float("inf"), Decimal("NaN"), 10**13, "soon", True, b"1", []])
def test_epoch_ms_refuses_what_is_no_time(value: object) -> None:
    with pytest.raises(ValueError):
        epoch_ms(value)


@pytest.mark.parametrize(("value", "expected"), [(None, None), (200, 200), (0, 0), ("404", 404), (Decimal(503), 503)])
def test_http_status_keeps_codes(value: object, expected: int | None) -> None:
    assert http_status(value) == expected


@pytest.mark.parametrize("value", [-1, 1000, 999999, 200.5, "ok", True, float("nan")])
def test_http_status_refuses_non_codes(value: object) -> None:
    with pytest.raises(ValueError):
        http_status(value)


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, (0, False)), (3, (3, False)), (-3, (0, True)), (10**6, (65535, True)), ("x", (0, True)), ("7", (7, False))],
)
def test_frontier_depth_fits_the_record(value: object, expected: tuple[int, bool]) -> None:
    assert frontier_depth(value) == expected


@pytest.mark.parametrize(("value", "expected"), [(None, False), (True, True), (0, False), (1, True), ("t", True),
                                                 ("no", False), (" YES ", True)])
def test_flag_reads_booleans(value: object, expected: bool) -> None:
    assert flag(value) is expected


def test_flag_refuses_other_text() -> None:
    with pytest.raises(ValueError):
        flag("maybe")


def test_robots_bytes_cuts_at_the_limit() -> None:
    assert robots_bytes("é" * 3, 4) == ("éé".encode(), True)
    assert robots_bytes(b"User-agent: *", 100) == (b"User-agent: *", False)
