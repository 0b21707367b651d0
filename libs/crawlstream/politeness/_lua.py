"""The scheduler's Lua scripts: read from ``lua/*.lua`` once per process, run as EVAL.

How a script is put together, in one place (``_PARTS``): it is the named ``.lua`` files
concatenated, each starting on a new line. ``requeue_function.lua`` defines ``requeue()``,
which the requeue, dispatch and complete scripts all end with, so it is prepended to them.
Full-line ``--`` comments and blank lines are dropped (EVAL sends the body on every call; the
files keep the documentation), then the placeholders are filled in: ``@EXCLUDED@``,
``@OVERRIDE@`` and ``@CRAWL@`` are the operator-control keys (fixed names, not per partition:
``_keys``) and ``@FENCED@`` the claim's answer to a fenced caller.
"""

from __future__ import annotations

import functools
import importlib.resources
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from crawlstream.politeness._keys import CRAWL_BUDGET_KEY, EXCLUDED_KEY, OVERRIDE_PREFIX

FENCED = "!fenced"  # the claim's answer to a fenced caller ('!' is never in a domain)
CLAIM_WIDTH = 9  # values per claimed domain in the claim's answer

_PARTS: dict[str, tuple[str, ...]] = {
    "claim": ("claim",),
    "requeue": ("requeue_function", "requeue"),
    "dispatch": ("requeue_function", "dispatch"),
    "complete": ("requeue_function", "complete"),
    "hold": ("hold",),
}

_PLACEHOLDERS = {
    "@EXCLUDED@": EXCLUDED_KEY,
    "@OVERRIDE@": OVERRIDE_PREFIX,
    "@CRAWL@": CRAWL_BUDGET_KEY,
    "@FENCED@": FENCED,
}


class Script:
    """A Lua script queued on a pipeline as EVAL.

    redis-py's registered scripts make every pipeline ``execute`` send SCRIPT EXISTS first:
    one more round trip per pipeline, on the path from a fetch result to the next request.
    EVAL carries the body (Redis caches the compiled script by its SHA) and cannot fail
    with NOSCRIPT after a Redis restart.
    """

    __slots__ = ("source",)

    def __init__(self, source: str) -> None:
        self.source = source.encode()  # bytes go out as they are; a str is encoded per call

    def __call__(self, *, keys: Sequence[Any], args: Sequence[Any], client: Any) -> Any:
        return client.eval(self.source, len(keys), *keys, *args)


@dataclass(frozen=True)
class Scripts:
    """Every script the scheduler runs (each documented at the top of its ``.lua`` file)."""

    claim: Script
    requeue: Script
    dispatch: Script
    complete: Script
    hold: Script


@functools.cache
def scripts() -> Scripts:
    """The scripts, read from the package on first use and shared by every Scheduler."""
    return Scripts(**{name: Script(compose(parts)) for name, parts in _PARTS.items()})


def compose(parts: Sequence[str]) -> str:
    """The source of a script made of the ``lua/<part>.lua`` files ``parts``, in that order."""
    folder = importlib.resources.files("crawlstream.politeness") / "lua"
    source = "".join("\n" + _code((folder / f"{part}.lua").read_text(encoding="utf-8")) for part in parts)
    for placeholder, value in _PLACEHOLDERS.items():
        source = source.replace(placeholder, value)
    return source


def _code(text: str) -> str:
    """``text`` without its comment and blank lines."""
    lines = (line for line in text.splitlines(keepends=True) if line.strip() and not line.lstrip().startswith("--"))
    return "".join(lines)
