"""The migration's ``urls.records`` sends: precompiled Avro values produced straight to the bus.

``EventProducer.send`` of a ``UrlRecord`` cost ~15 us per migrated row (ADR 017); a migrated row
only varies in four fields, so ``RecordPublisher`` is the precompiled writer that bulk
seeding uses for its raw forms (``crawlstream.crawl._seeds.UrlRecordPublisher``, ADR 023).
"""

from __future__ import annotations

from crawlstream.crawl._seeds import UrlRecordPublisher as RecordPublisher

__all__ = ["RecordPublisher"]
