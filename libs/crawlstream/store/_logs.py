"""Reading the store's CRC-framed logs (ops.log, quarantine.log; a format-3 store's index.log once) at start-up."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from crawlstream.store._codec import decode_log_records

__all__ = ["read_log"]

logger = logging.getLogger(__name__)


def read_log(path: Path) -> list[dict[str, Any]]:
    """The valid records of a log; a torn tail (crash during an append) is truncated, bad CRCs skipped."""
    if not path.exists():
        return []
    data = path.read_bytes()
    records, valid_end, skipped = decode_log_records(data)
    if skipped:
        logger.error("%s: %d log records failed their crc32 and were skipped", path, skipped)
    if valid_end < len(data):
        logger.warning("%s: torn tail of %d bytes truncated (crash during append)", path, len(data) - valid_end)
        with open(path, "r+b") as fh:
            fh.truncate(valid_end)
    return records
