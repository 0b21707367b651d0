"""What the e2e files share: the embedded reference crawl the distributed crawls are judged
against, made once per test process (``test_kafka_crawl.py`` and ``test_kafka_faults.py`` both
use it; it is read-only)."""

from __future__ import annotations

import pytest
from kafka_support import Reference, make_reference


@pytest.fixture(scope="session")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Reference:
    """``crawlstream run`` on the embedded log, same web and settings, same index build and API walk."""
    return make_reference(tmp_path_factory)
