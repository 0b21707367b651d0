"""``python -m crawlstream`` is the ``crawlstream`` command."""

import sys

from crawlstream.cli import main

sys.exit(main())
