"""Per-partition "seen URL" state for the deduper service: Bloom filters plus snapshot files.

Caller's contract (the deduper service loop and its rebalance callbacks):

* On assign of partition ``p``: ``offset = load_partition(p)``. If ``offset`` is not None,
  seek ``urls.discovered[p]`` to it and *replay* every message below the group's committed
  offset through ``check_and_add`` without forwarding (the filter catches up); forward
  normally from the committed offset on. If it is None, replay from the beginning of the
  partition (the topic is the source of truth; an empty filter forwards everything again).
* Per batch: ``check_and_add(p, items)``; forward the items answered True.
* Periodically and on revoke: 1. flush the producer (the forwarded URLs are durable),
  2. ``flush_partition(p, next_offset)`` (the snapshot covers them), 3. commit ``next_offset``.
  Do not reorder: a snapshot that covers unforwarded URLs would drop them forever. With
  forwards and offsets in one transaction (Kafka, ADR 038): 1. commit the transaction,
  2. ``flush_partition(p, next_offset)`` only if ``next_offset`` is committed: a snapshot past
  an aborted transaction would drop its URLs the same way.
* On revoke after flushing, or on lost: ``drop_partition(p)`` (lost: without flushing).

Snapshots are ``<root>/<partition>.bloom`` (``root`` = ``<data_dir>/dedupe``), written to a
temporary file, fsynced and renamed, so a crash leaves the previous snapshot intact.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from crawlstream.dedupe._bloom import BloomSize, bloom_size, expected_fpr
from crawlstream.dedupe._filter import TIGHTENING, BloomFilter, ScalableBloomFilter, decode_snapshot, encode_snapshot
from crawlstream.durable import write_atomically
from crawlstream.errors import ChecksumMismatch, StorageUnavailable

if TYPE_CHECKING:
    from crawlstream.settings import Settings

__all__ = ["Deduper"]

logger = logging.getLogger(__name__)


class Deduper:
    """Bloom filters of the partitions this instance owns, persisted as snapshot files.

    ``expected_urls_per_partition`` and ``false_positive_rate`` size a *new* filter; a loaded
    snapshot keeps its own geometry (changing the settings takes effect for new partitions
    only, because the bits are meaningless under another size).
    """

    def __init__(self, root: Path, expected_urls_per_partition: int, false_positive_rate: float) -> None:
        self.root = Path(root)
        # The first slice of a new partition's scalable filter (ADR 023: it grows past this).
        self.size: BloomSize = bloom_size(expected_urls_per_partition, false_positive_rate * (1 - TIGHTENING))
        self.expected_urls_per_partition = expected_urls_per_partition
        self.false_positive_rate = false_positive_rate
        self._filters: dict[int, ScalableBloomFilter] = {}

    @classmethod
    def from_settings(cls, settings: Settings) -> Deduper:
        """Size each partition's filter for ``dedupe.expected_urls / bus.partitions`` URLs."""
        per_partition = math.ceil(settings.dedupe.expected_urls / settings.bus.partitions)
        return cls(settings.data_dir / "dedupe", per_partition, settings.dedupe.false_positive_rate)

    # -- ownership ------------------------------------------------------------------------

    def snapshot_path(self, partition: int) -> Path:
        return self.root / f"{int(partition)}.bloom"

    @property
    def owned_partitions(self) -> list[int]:
        return sorted(self._filters)

    def load_partition(self, partition: int) -> int | None:
        """Take ownership of ``partition``; return the bus offset its snapshot covers (or None).

        A corrupt snapshot is renamed ``.invalid`` (kept for inspection) and the partition
        starts empty: None tells the caller to replay the partition from the beginning.
        """
        path = self.snapshot_path(partition)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            self._filters[partition] = self._new_filter()
            logger.info(
                "dedupe partition %d: no snapshot, new filter (%d bits, k=%d)",
                partition,
                self.size.m_bits,
                self.size.k,
            )
            return None
        except OSError as exc:
            raise StorageUnavailable(f"cannot read Bloom snapshot {path} ({exc})") from exc
        try:
            snap = decode_snapshot(data, str(path))
        except ChecksumMismatch as exc:
            quarantine = path.with_suffix(".bloom.invalid")
            os.replace(path, quarantine)  # not a publication: sets the damaged file aside for inspection
            logger.error("dedupe partition %d: %s; moved to %s, replaying from the start", partition, exc, quarantine)
            self._filters[partition] = self._new_filter()
            return None
        bloom = snap.filter if isinstance(snap.filter, ScalableBloomFilter) else self._around_fixed(snap.filter)
        if bloom.slices[0].size != self.size:
            logger.warning(
                "dedupe partition %d: snapshot geometry %s differs from the configured %s; keeping the snapshot's",
                partition,
                bloom.slices[0].size,
                self.size,
            )
        self._filters[partition] = bloom
        logger.info(
            "dedupe partition %d: loaded snapshot (%d members, offset %s)",
            partition,
            snap.filter.count,
            snap.offset,
        )
        return snap.offset

    def flush_partition(self, partition: int, offset: int | None) -> Path:
        """Atomically write the snapshot of ``partition`` covering the bus ``offset`` (next to read)."""
        bloom = self._filter(partition)
        path = self.snapshot_path(partition)
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageUnavailable(f"cannot write Bloom snapshot {path} ({exc})") from exc
        # Temporary file, fsync, rename over the old snapshot, fsync the directory: a crash
        # anywhere keeps a complete snapshot on disk.
        write_atomically(path, encode_snapshot(bloom, offset))
        logger.debug("dedupe partition %d: snapshot at offset %s (%d members)", partition, offset, bloom.count)
        return path

    snapshot = flush_partition

    def drop_partition(self, partition: int) -> None:
        """Forget ``partition``'s in-memory filter (after ``flush_partition`` on revoke; alone on lost)."""
        self._filters.pop(partition, None)

    def _new_filter(self) -> ScalableBloomFilter:
        return ScalableBloomFilter.new(self.expected_urls_per_partition, self.false_positive_rate)

    def _around_fixed(self, bloom: BloomFilter) -> ScalableBloomFilter:
        """A version 1/2 snapshot's fixed filter as the first slice: sized by these settings
        when its geometry is theirs, else its capacity and rate derived from the geometry."""
        if bloom.size == bloom_size(self.expected_urls_per_partition, self.false_positive_rate):
            return ScalableBloomFilter.around(bloom, self.expected_urls_per_partition, self.false_positive_rate)
        capacity = max(1, round(bloom.size.m_bits * math.log(2) / bloom.size.k))
        return ScalableBloomFilter.around(bloom, capacity, expected_fpr(bloom.size, capacity))

    # -- the hot path -----------------------------------------------------------------------

    def check_and_add(self, partition: int, items: Sequence[tuple[int, str]]) -> list[bool]:
        """True for each ``(url_key, url)`` never seen before in ``partition`` (then it is seen)."""
        bloom = self._filter(partition)
        slices = len(bloom.slices)
        result = bloom.check_and_add(items)
        if len(bloom.slices) != slices:
            logger.info(
                "dedupe partition %d grew to %d slices (%d URLs, %d MB) keeping false positives under %.4g; "
                "each slice adds a lookup: raise CRAWLSTREAM_DEDUPE_EXPECTED_URLS for the next crawl",
                partition,
                len(bloom.slices),
                bloom.count,
                bloom.size_bytes >> 20,
                bloom.fpr_bound,
            )
        return result

    def filter(self, partition: int) -> ScalableBloomFilter:
        """The live filter of an owned partition (for metrics and tests)."""
        return self._filter(partition)

    def _filter(self, partition: int) -> ScalableBloomFilter:
        try:
            return self._filters[partition]
        except KeyError:
            raise KeyError(
                f"dedupe partition {partition} is not loaded here (owned: {self.owned_partitions}); "
                "call load_partition() on assignment"
            ) from None
