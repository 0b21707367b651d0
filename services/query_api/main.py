"""``crawlstream service query-api``: one query-api in this process (README.md beside this file says
what it consumes and produces, its state and how it scales).

The wiring (``build(host)``, ``run(settings)``) is ``crawlstream.api.service`` in the library, so
that ``crawlstream run`` builds the same service beside the others in one process.
``python -m crawlstream.services.query_api.main [flags]`` is ``crawlstream service query-api [flags]``.
"""

from __future__ import annotations

import sys

from crawlstream.cli import main

if __name__ == "__main__":
    sys.exit(main(["service", "query-api", *sys.argv[1:]]))
