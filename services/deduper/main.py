"""``crawlstream service deduper``: one deduper in this process (README.md beside this file says
what it consumes and produces, its state and how it scales).

The wiring (``build(host)``, ``run(settings)``) is ``crawlstream.dedupe.service`` in the library, so
that ``crawlstream run`` builds the same service beside the others in one process.
``python -m crawlstream.services.deduper.main [flags]`` is ``crawlstream service deduper [flags]``.
"""

from __future__ import annotations

import sys

from crawlstream.cli import main

if __name__ == "__main__":
    sys.exit(main(["service", "deduper", *sys.argv[1:]]))
