"""Redis key names of the operator controls, shared by the scheduler's Lua scripts, the
fetcher's exclusion check and the ``crawlstream exclude`` / ``domain`` commands (ADR 016).

Global, not per partition: a command does not need to know how many partitions the crawl
has, and every scheduler reads them inside its claim script (no extra round trip).

    cs:ctl:excluded     SET   registered domains excluded by the operator
    cs:ctl:d:{domain}   HASH  delay (ms), infl (max in flight), pages (page budget) overrides
    cs:ctl:overridden   SET   domains that have a cs:ctl:d: hash (for listing)
    cs:ctl:version      INT   bumped by every change (the fetcher re-reads the set when it moves)
    cs:ctl:crawl        HASH  limit, used: the run's page budget (``crawlstream run --max-pages``)
"""

from __future__ import annotations

EXCLUDED_KEY = "cs:ctl:excluded"
OVERRIDE_PREFIX = "cs:ctl:d:"
OVERRIDDEN_KEY = "cs:ctl:overridden"
VERSION_KEY = "cs:ctl:version"
CRAWL_BUDGET_KEY = "cs:ctl:crawl"
