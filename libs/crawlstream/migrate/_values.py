"""Column values of the seed crawler's tables as crawlstream wants them, and the run's report.

Pure: no I/O, no clock (callers pass ``now_ms``). A source column may hold anything its SQL
type allows (and a hand-made table anything at all), so every conversion either returns the
value or raises ``ValueError`` naming what was found; the migrator counts those by field.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

__all__ = ["MAX_DEPTH_STORED", "TableReport", "epoch_ms", "flag", "frontier_depth", "http_status", "robots_bytes"]

MAX_DEPTH_STORED = 65535
"""The frontier record's depth field is 16 bits; deeper rows are clamped (and counted)."""
_MAX_EPOCH_S = 253402300799  # 9999-12-31T23:59:59Z
_TRUE = frozenset({"t", "true", "1", "y", "yes", "on"})
_FALSE = frozenset({"f", "false", "0", "n", "no", "off", ""})


def epoch_ms(value: Any) -> int | None:
    """A timestamp column as epoch milliseconds; None for NULL.

    The seed stores Unix seconds (``int(time.time())``); ``timestamp``/``timestamptz``/``date``
    columns work too (a zone-less timestamp is UTC), as do numeric strings and ISO-8601 text.
    ``ValueError`` for anything else, NaN/infinite values, or a time outside 1970..9999.
    """
    if value is None:
        return None
    if type(value) is int and 0 <= value <= _MAX_EPOCH_S:  # the seed's column: one test, not ten
        return value * 1000
    if isinstance(value, bool):
        raise ValueError(f"expected a timestamp, found the boolean {value}")
    if isinstance(value, datetime):
        moment = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
        seconds: float | Decimal = moment.timestamp()
    elif isinstance(value, date):
        seconds = datetime(value.year, value.month, value.day, tzinfo=UTC).timestamp()
    elif isinstance(value, int | float | Decimal):
        seconds = value
    elif isinstance(value, str):
        text = value.strip()
        try:
            seconds = Decimal(text)
        except ArithmeticError:
            try:
                return epoch_ms(datetime.fromisoformat(text))
            except ValueError:
                raise ValueError(f"expected Unix seconds or ISO-8601, found {text[:40]!r}") from None
    else:
        raise ValueError(f"expected a timestamp, found {type(value).__name__}")
    finite = seconds.is_finite() if isinstance(seconds, Decimal) else math.isfinite(seconds)
    if not finite:
        raise ValueError(f"expected a finite timestamp, found {seconds}")
    if not 0 <= seconds <= _MAX_EPOCH_S:
        raise ValueError(f"timestamp {seconds} s is outside 1970..9999")
    return int(Decimal(seconds) * 1000) if not isinstance(seconds, int) else seconds * 1000


def http_status(value: Any) -> int | None:
    """An HTTP status code (0..999; 0 = the request failed) or None for NULL; ``ValueError`` else."""
    if value is None:
        return None
    if type(value) is int and 0 <= value <= 999:  # the seed's integer column, without the Decimal round trip
        return value
    if isinstance(value, bool) or not isinstance(value, int | Decimal | float | str):
        raise ValueError(f"expected an HTTP status, found {type(value).__name__}")
    try:
        number = Decimal(str(value).strip())
    except ArithmeticError:
        raise ValueError(f"expected an HTTP status, found {str(value)[:20]!r}") from None
    if not number.is_finite() or number != number.to_integral_value() or not 0 <= number <= 999:
        raise ValueError(f"expected an HTTP status in 0..999, found {str(value)[:20]}")
    return int(number)


def frontier_depth(value: Any) -> tuple[int, bool]:
    """(depth, whether the value had to be fixed): NULL is 0, negatives 0, beyond 16 bits clamped."""
    if value is None:
        return 0, False
    if type(value) is int and 0 <= value <= MAX_DEPTH_STORED:  # the seed's integer column
        return value, False
    try:
        number = int(Decimal(str(value).strip()))
    except (ArithmeticError, ValueError):
        return 0, True
    if number < 0:
        return 0, True
    if number > MAX_DEPTH_STORED:
        return MAX_DEPTH_STORED, True
    return number, False


def flag(value: Any) -> bool:
    """A boolean-ish column (boolean, 0/1, 't'/'f', 'yes'/'no'); NULL is False. ``ValueError`` else."""
    if value is None:
        return False
    if isinstance(value, bool):
        return value
    if isinstance(value, int | Decimal):
        return value != 0
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise ValueError(f"expected a boolean, found {str(value)[:20]!r}")


def robots_bytes(value: Any, max_bytes: int) -> tuple[bytes, bool]:
    """A robots.txt column (text or bytea) as bytes cut at ``max_bytes`` (RFC 9309 §2.5 parses
    500 KiB), and whether it was cut."""
    data = value.encode("utf-8", "surrogatepass") if isinstance(value, str) else bytes(value)
    return (data[:max_bytes], True) if len(data) > max_bytes else (data, False)


@dataclass
class TableReport:
    """What became of one source table's rows.

    Every row lands in exactly one ``outcomes`` bucket (``invalid`` rows also under
    ``invalid_by_reason``); ``details`` counts side effects and repairs that several rows of
    any outcome can share (content files imported or missing, timestamps dropped...).
    """

    rows: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    invalid_by_reason: Counter[str] = field(default_factory=Counter)
    details: Counter[str] = field(default_factory=Counter)
    done: bool = False
    seconds: float = 0.0  # spent on this table (reading, converting, writing; not its final checkpoint)

    def invalid(self, reason: str) -> None:
        self.outcomes["invalid"] += 1
        self.invalid_by_reason[reason] += 1

    def to_json(self) -> dict[str, Any]:
        return {
            "rows": self.rows,
            "outcomes": dict(sorted(self.outcomes.items())),
            "invalid_by_reason": dict(sorted(self.invalid_by_reason.items())),
            "details": dict(sorted(self.details.items())),
            "done": self.done,
            "seconds": round(self.seconds, 3),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TableReport:
        return cls(
            rows=int(data.get("rows", 0)),
            outcomes=Counter(data.get("outcomes", {})),
            invalid_by_reason=Counter(data.get("invalid_by_reason", {})),
            details=Counter(data.get("details", {})),
            done=bool(data.get("done", False)),
            seconds=float(data.get("seconds", 0.0)),
        )
