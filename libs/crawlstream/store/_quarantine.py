"""Damaged regions: never served again (``quarantine.log`` + copies in ``<segment>.invalid``).

A region is a whole record (segment, offset) or single members of a group record. The
decision is logged (CRC-framed, fsynced unless ``fsync="never"``) before anything else may
rely on it; the bytes are copied once per region for an operator to inspect.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from pathlib import Path
from typing import Any

from crawlstream.store._codec import encode_log_record
from crawlstream.store._config import StoreConfig
from crawlstream.store._files import AppendFile
from crawlstream.store._logs import read_log
from crawlstream.store._model import Location
from crawlstream.store._segments import Segments

__all__ = ["Quarantine"]

logger = logging.getLogger(__name__)


class Quarantine:
    def __init__(self, root: Path, segments: Segments, config: StoreConfig) -> None:
        self._segments = segments
        self.records: set[tuple[str, int]] = set()  # whole records
        self.bad_members: dict[tuple[str, int], set[int]] = defaultdict(set)  # members of group records
        for rec in read_log(root / "quarantine.log"):
            if "m" in rec:
                self.bad_members[(rec["seg"], rec["off"])].add(rec["m"])
            else:
                self.records.add((rec["seg"], rec["off"]))
        self._log = AppendFile(root / "quarantine.log", fsync_each=config.fsyncs)

    def add(
        self, segment: str, offset: int, length: int, detail: str, data: bytes, *, member: int | None = None
    ) -> None:
        """Never serve this region again (``member``: only that member of a group record).

        The region's bytes are copied to ``<segment>.invalid`` once (for a group, with its
        first damaged member) and the decision is logged in quarantine.log.
        """
        if (segment, offset) in self.records:
            return
        bad = self.bad_members.get((segment, offset))
        if member is not None and bad is not None and member in bad:
            return
        rec: dict[str, Any] = {"seg": segment, "off": offset, "len": length, "why": detail}
        if member is None:
            self.records.add((segment, offset))
        else:
            self.bad_members[(segment, offset)].add(member)
            rec["m"] = member
        invalid = self._segments.path(segment + ".invalid")
        if not bad:
            invalid.parent.mkdir(parents=True, exist_ok=True)  # an archive object's tier may have no local directory
            with open(invalid, "ab") as fh:
                fh.write(data)
        self._log.append(encode_log_record(rec))
        logger.error(
            "quarantined %d bytes of segment %s at offset %d%s: %s (copy in %s)",
            length,
            segment,
            offset,
            "" if member is None else f" (group member {member})",
            detail,
            invalid,
        )

    def has(self, loc: Location) -> bool:
        """True if the body at ``loc`` must not be served (its record, or its group member, is quarantined)."""
        return (loc.segment, loc.offset) in self.records or loc.member in self.bad_members.get(
            (loc.segment, loc.offset), ()
        )

    def members(self, segment: str, offset: int) -> set[int]:
        """Quarantined members of the group record at (segment, offset)."""
        return set(self.bad_members.get((segment, offset), ()))

    def regions(self) -> list[tuple[str, int]]:
        """Damaged regions (segment, offset): whole records, and groups with damaged members."""
        return sorted(self.records | {key for key, members in self.bad_members.items() if members})

    def segments(self) -> set[str]:
        return {seg for seg, _ in self.regions()}

    def close(self) -> None:
        self._log.close()
