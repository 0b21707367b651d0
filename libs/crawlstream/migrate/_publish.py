"""The migration's ``urls.records`` sends: precompiled Avro values produced straight to the bus.

``EventProducer.send`` of a ``UrlRecord`` cost ~15 us per migrated row (ADR 017); a migrated row
only varies in four fields, so ``RecordPublisher`` is the precompiled writer that bulk
seeding uses for its raw forms (``crawlstream.crawl._seeds.UrlRecordPublisher``, ADR 023), plus
``visited``: a visited row's record from its status code, with everything after the URL and
time (the ``{"status": N}`` map and the domain) cached per (status, domain).
"""

from __future__ import annotations

from collections.abc import Sequence

from crawlstream.crawl._seeds import UrlRecordPublisher
from crawlstream.events import EventCodec, EventProducer, UrlRecord
from crawlstream.topics import URLS_RECORDS

__all__ = ["RecordPublisher"]

_TAILS_MAX = 1 << 16  # domains remembered per status before that status's cache starts over
_VISITED_PROBES = (
    (5, "http://a.example/x?y=1", "a.example", 1_700_000_000_000, 200),
    (2**31 - 1, "http://xn--bcher-kva.example/%C3%A9", "xn--bcher-kva.example", None, None),
    (0, "http://10.0.0.1/", "10.0.0.1", 0, 0),
)


def status_fields(status: int | None) -> dict[str, str]:
    """The ``extras`` map of a visited row's record: ``{"status": "N"}``, or empty without one."""
    return {} if status is None else {"status": str(status)}


class RecordPublisher(UrlRecordPublisher):
    """``UrlRecordPublisher`` (any record: ``publisher(dataset_id, url, domain, ts_ms, extras)``)
    with ``visited(dataset_id, url, domain, ts_ms, status)`` for the bulk of a migration.

    ``visited`` costs one cache lookup, two varints and a join per row (~1 us less than the
    generic call, which builds and looks up the extras map every time). Its bytes are checked
    against the codec on probe rows; if they ever differ, every value goes through the codec.
    """

    def __init__(
        self,
        out: EventProducer,
        codec: EventCodec,
        headers: Sequence[tuple[str, bytes]] = (),
        topic: str = URLS_RECORDS,
    ) -> None:
        super().__init__(out, codec, headers, topic)
        self._produce = out.producer.produce
        self._tails: dict[int | None, dict[str, tuple[bytes, bytes, int]]] = {}
        if self.precompiled:
            self.precompiled = all(
                self._row(ds, url, ts_ms, self._tail(domain, status)[1])
                == codec.encode(UrlRecord(ds, url, ts_ms, status_fields(status), domain), topic)
                for ds, url, domain, ts_ms, status in _VISITED_PROBES
            )

    def _tail(self, domain: str, status: int | None) -> tuple[bytes, bytes, int]:
        """(message key, the value's bytes after the time, partition) of ``domain``'s rows with ``status``."""
        tails = self._tails.get(status)
        if tails is None:
            tails = self._tails[status] = {}
        info = tails.get(domain)
        if info is None:
            if len(tails) >= _TAILS_MAX:
                tails.clear()
            key, domain_part, partition = self._domain(domain)
            info = tails[domain] = (key, self._map(status_fields(status)) + domain_part, partition)
        return info

    def visited(self, dataset_id: int, url: str, domain: str, ts_ms: int | None, status: int | None) -> None:
        """The record of a visited row: ``{"status": "N"}`` as its map (empty when ``status`` is None)."""
        if not self.precompiled:
            self(dataset_id, url, domain, ts_ms, status_fields(status))
            return
        key, tail, partition = self._tail(domain, status)
        self._produce(
            self._topic,
            self._row(dataset_id, url, ts_ms, tail),
            partition=partition,
            key=key,
            headers=self._headers,
        )
