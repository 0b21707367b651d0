"""The error hierarchy: one root, families split by what the caller should do.

* ``TransientError``: a dependency (bus, Redis, storage) is unavailable. Retry, or let the
  process exit non-zero so it restarts and the uncommitted message replays.
* ``BadDataError``: this input can never succeed (undecodable event, invalid URL or domain,
  checksum mismatch). Route it to ``<topic>.dlq`` / quarantine, count it, move on.
* ``ConfigError``: the process is misconfigured. Fail at start-up, naming the setting.
* ``ClientWedged``: a client library's call did not return within its deadline. Only a new
  process recovers it: the service exits for its supervisor to start a fresh one.

Libraries translate third-party exceptions into these at their edge and keep the cause
(``raise BusUnavailable(...) from exc``). Messages say what was expected, what was found,
and what to do.
"""

from __future__ import annotations

__all__ = [
    "BadDataError",
    "BusUnavailable",
    "ChecksumMismatch",
    "ClientWedged",
    "ConfigError",
    "CrawlstreamError",
    "DiskBelowFloor",
    "EventDecodeError",
    "InvalidDomain",
    "InvalidUrl",
    "RedisUnavailable",
    "ShardNotOwned",
    "StorageUnavailable",
    "StoreLocked",
    "TransientError",
]


class CrawlstreamError(Exception):
    """Root of every error this package raises on purpose."""


class TransientError(CrawlstreamError):
    """A dependency is unavailable; the same call may succeed later."""


class BusUnavailable(TransientError):
    """The event bus (Kafka or the embedded log) refused or timed out."""


class RedisUnavailable(TransientError):
    """Redis refused or timed out."""


class StorageUnavailable(TransientError):
    """A file system or object store operation failed for reasons outside the data."""


class DiskBelowFloor(StorageUnavailable):
    """The data disk has less free space than its floor (``CRAWLSTREAM_DATA_DIR_MIN_FREE_MB``):
    a write that could fail half-way on a full disk is refused before it starts (ADR 033)."""


class ClientWedged(CrawlstreamError):
    """A client library's blocking call (a Kafka commit) did not return within its deadline,
    though the cluster's own failures are retried and bounded in time: the client is stuck. It
    can be neither used nor closed, only dropped with its process."""


class ShardNotOwned(CrawlstreamError):
    """A write for a content-store shard this process does not own (another member's partition,
    or one it gave up on a rebalance): refused, never written beside the owner."""


class StoreLocked(StorageUnavailable):
    """Another live process writes this content store (or shard): a second writer is refused;
    the lock dies with its holder, so the same call succeeds once that process is gone."""


class BadDataError(CrawlstreamError):
    """This input is wrong and will stay wrong: skip it with a counter, DLQ or quarantine."""


class InvalidUrl(BadDataError, ValueError):
    """A URL that cannot be canonicalized (bad scheme, empty host, bad IDNA, too long...).

    ``reason`` is a short machine-friendly tag (e.g. ``"scheme"``, ``"host"``) used to count
    rejections by cause; ``str(exc)`` is the readable explanation.
    """

    def __init__(self, message: str, *, url: str = "", reason: str = "invalid") -> None:
        super().__init__(message)
        self.url = url
        self.reason = reason


class InvalidDomain(BadDataError, ValueError):
    """A domain name that is not a valid registered domain (and must not become a path)."""


class EventDecodeError(BadDataError):
    """An event on a topic could not be decoded or validated (wire format, schema id, Avro)."""


class ChecksumMismatch(BadDataError):
    """Stored bytes do not match their recorded checksum: the region is corrupt."""


class ConfigError(CrawlstreamError):
    """A setting is invalid; raised at start-up with the variable or flag named."""
