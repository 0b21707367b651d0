"""query-api wiring: serve ``crawlstream.api`` from the index under the data dir.

Stateless: no bus, no Redis. Each replica pins the current index version per request and
follows ``manifest.json`` flips on its own; aiohttp's ``run_app`` owns SIGINT/SIGTERM
(graceful: in-flight requests finish, pins are released).
"""

from __future__ import annotations

from crawlstream.api import serve
from crawlstream.settings import Settings


def run(settings: Settings) -> int:
    return serve(settings)
