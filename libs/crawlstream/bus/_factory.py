"""Choosing the bus backend from settings: the one place a process decides Kafka or embedded."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from crawlstream.bus._base import Bus

if TYPE_CHECKING:
    from crawlstream.settings import Settings

__all__ = ["open_bus"]

logger = logging.getLogger(__name__)


def open_bus(
    settings: Settings, *, member: tuple[int, int] | None = None, first: bool = False, lock_wait_s: float = 0.0
) -> Bus:
    """Kafka when ``KAFKA_BOOTSTRAP_SERVERS`` is set, else the embedded log in ``<data_dir>/bus``.

    ``member``/``first``/``lock_wait_s``: the embedded log shared by the processes of one run
    (``crawlstream run --processes N``; see ``EmbeddedBus``). The caller owns the result and must
    ``close()`` it (after its producers and consumers).
    """
    if settings.kafka_bootstrap_servers:
        # Imported here: an embedded-log process never pays for confluent-kafka's import.
        from crawlstream.bus._kafka import KafkaBus

        logger.info("bus: Kafka at %s", settings.kafka_bootstrap_servers)
        return KafkaBus.from_settings(settings)
    # Imported here so a Kafka deployment never touches the embedded log's module.
    from crawlstream.bus._embedded import EmbeddedBus

    path = settings.data_dir / "bus"
    logger.info("bus: embedded log in %s", path)
    return EmbeddedBus(
        path,
        default_partitions=settings.bus.partitions,
        fsync=settings.bus.fsync,
        segment_bytes=settings.bus.segment_bytes,
        member=member,
        first=first,
        lock_wait_s=lock_wait_s,
    )
