"""Which scheduler owns a partition: owner tokens, and fencing of a stale owner.

``load_partition`` writes a fresh token to the partition's ``owner`` key. An instance that
later reads another token there (its Kafka session expired and another member took the
partition before it noticed) is *fenced* for that partition: its claims, enqueues and
completions of it are refused until it loads the partition again, so it stops dispatching the
new owner's domains and appending to its files. The claim script checks the token itself;
enqueue and completion read it in the same round trip as their other reads.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections import Counter
from typing import Any

import redis

from crawlstream.politeness._keys import PartitionKeys, as_text

logger = logging.getLogger(__name__)


class Ownership:
    """The owner tokens of the partitions loaded here, and the partitions fenced since."""

    def __init__(self, stats: Counter[str]) -> None:
        self._stats = stats
        self._tokens: dict[int, str] = {}  # owner token per partition loaded here
        self.fenced: set[int] = set()  # partitions another instance loaded since this one did

    def take(self, client: redis.Redis, partition: int) -> None:
        """Write a fresh token for ``partition``: whoever held it before is fenced from now on."""
        token = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
        client.set(PartitionKeys(partition).owner, token)  # first: a stale owner is fenced from here on
        self._tokens[partition] = token
        self.fenced.discard(partition)

    def release(self, partition: int) -> None:
        """Forget ``partition`` (revoked or lost): its token stays in Redis for the next owner."""
        self._tokens.pop(partition, None)
        self.fenced.discard(partition)

    def token(self, partition: int) -> str:
        """The token to check in the claim script ('' = never loaded here: not checked)."""
        return self._tokens.get(partition, "")

    def fenced_by(self, partition: int, owner: Any) -> bool:
        """True (and the partition fenced here) when ``owner``, the partition's owner token as
        just read, is another instance's: one loaded the partition after this one did."""
        token = self._tokens.get(partition)
        if token is None or owner is None or as_text(owner) == token:
            return False
        self.fence(partition)
        return True

    def fence(self, partition: int) -> None:
        if partition in self.fenced:
            return
        self.fenced.add(partition)
        self._stats["fenced"] += 1
        logger.warning(
            "scheduler partition %d was loaded by another scheduler since this one loaded it (this one's "
            "group session expired?): no more claims, enqueues or completions of it here until it is "
            "assigned to this one again",
            partition,
        )
