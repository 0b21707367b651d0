"""Shared pieces of the adversarial suite: one settings profile and byte-mutation strategies.

Every test here is derandomized (the same examples on every run, so CI is repeatable),
has no per-example deadline (2 shared cores make timings noisy; the folder's conftest puts
a hard timeout on each test instead) and keeps no example database.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

ADVERSARIAL = settings(
    derandomize=True,
    deadline=None,
    database=None,
    print_blob=False,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.filter_too_much,
        HealthCheck.function_scoped_fixture,
    ],
)
"""The parent of every test's settings here: ``@settings(ADVERSARIAL, max_examples=N)``."""

# Values that break length and count fields: zero, one, sign bits, all ones, and the
# boundaries of 8/16/32/64-bit fields, little- and big-endian.
_INTERESTING_INTS = [0, 1, 0x7F, 0x80, 0xFF, 0x7FFF, 0x8000, 0xFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF]
_INTERESTING_FIELDS = sorted(
    {
        v.to_bytes(width, order)
        for v in _INTERESTING_INTS
        for width in (1, 2, 4, 8)
        if v < 1 << (8 * width)
        for order in ("little", "big")
    }
    | {b"\xff" * 8, b"\x7f" + b"\xff" * 7, b"\xff" * 7 + b"\x7f", b"\x80" * 9 + b"\x01"}
)


def _apply(blob: bytearray, op: tuple[str, int, int, bytes]) -> None:
    kind, position, size, payload = op
    if not blob and kind != "insert":
        return
    at = position % (len(blob) + 1) if kind == "insert" else position % len(blob)
    if kind == "flip":
        blob[at] ^= 1 << (size % 8)
    elif kind == "set":
        blob[at] = size & 0xFF
    elif kind == "field":
        blob[at : at + len(payload)] = payload
    elif kind == "insert":
        blob[at:at] = payload
    elif kind == "delete":
        del blob[at : at + 1 + size % 16]
    elif kind == "duplicate":
        blob[at:at] = blob[at : at + 1 + size % 64]


_OPS = st.tuples(
    st.sampled_from(["flip", "flip", "set", "field", "field", "insert", "delete", "duplicate"]),
    st.integers(min_value=0, max_value=1 << 20),
    st.integers(min_value=0, max_value=255),
    st.sampled_from(_INTERESTING_FIELDS) | st.binary(min_size=1, max_size=8),
)


@st.composite
def mutated(draw: st.DrawFn, blob: bytes, *, max_ops: int = 4) -> bytes:
    """``blob`` after 1..max_ops mutations: bit flips, byte sets, interesting length values
    written over a field, inserted, deleted and duplicated bytes."""
    out = bytearray(blob)
    for op in draw(st.lists(_OPS, min_size=1, max_size=max_ops)):
        _apply(out, op)
    return bytes(out)


@st.composite
def truncated(draw: st.DrawFn, blob: bytes) -> bytes:
    """A proper prefix of ``blob`` (a write cut short)."""
    return blob[: draw(st.integers(min_value=0, max_value=max(0, len(blob) - 1)))]
