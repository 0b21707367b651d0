"""Wire values of depth-0 seed ``DiscoveredUrl`` events, precompiled (``SeedEncoder``, ADR 023)."""

from __future__ import annotations

import logging

from crawlstream.events import DiscoveredUrl, EventCodec, avro_long, avro_string
from crawlstream.topics import URLS_DISCOVERED

__all__ = ["SeedEncoder"]

logger = logging.getLogger(__name__)

_SURROGATES = "surrogatepass"


class SeedEncoder:
    """Wire values of depth-0 seed ``DiscoveredUrl`` events, without building an event per URL.

    Every field but ``url``, ``domain`` and ``url_key`` (the first three in the schema) and
    ``raw_url`` (the last) is the same for all seeds of a run, so their Avro bytes are encoded
    once by the codec (the template) and each value is ``header + url + domain + url_key +
    template tail``, the tail ending in ``raw_url``: null, or the seed line as written when it
    is not canonical (ADR 024). The constructor checks the result against the codec on probe
    events and falls back to the codec for every value if they ever differ (another field
    order, a registry schema).
    """

    def __init__(
        self,
        codec: EventCodec,
        now_ms: int,
        dataset_id: int | None,
        topic: str = URLS_DISCOVERED,
        priority: int | None = None,
    ) -> None:
        self._codec = codec
        self._topic = topic
        self._now_ms = now_ms
        self._dataset_id = dataset_id
        self.priority = priority  # DiscoveredUrl.priority of every seed (None = normal)
        empty = codec.encode(self._event("", "", 0, None), topic)
        with_raw = codec.encode(self._event("", "", 0, ""), topic)
        # header (5 bytes), then "" (0x00), "" (0x00), 0 (0x00), then the constant fields and
        # raw_url: null (0x00) or union branch 1 (0x02) and a string ("": 0x00).
        self._header, self._tail = empty[:5], empty[8:]
        self._raw_tail = with_raw[8:-1]
        self.precompiled = True
        probes = [
            self._event("http://xn--bcher-kva.example/\u00e9?q=1", "xn--bcher-kva.example",
                        (93 << 56) | 0xABCDEF0123456, None),
            self._event("http://a.example/", "a.example", 5, "HTTP://A.example"),
        ]
        self.precompiled = (
            empty[5:8] == b"\x00\x00\x00"
            and with_raw.endswith(b"\x02\x00")
            and all(self.encode(e.url, e.domain, e.url_key, e.raw_url) == codec.encode(e, topic) for e in probes)
        )
        if not self.precompiled:
            logger.warning("seed values are encoded by the codec: the DiscoveredUrl schema's field order changed")

    def _event(self, url: str, domain: str, key: int, raw_url: str | None) -> DiscoveredUrl:
        return DiscoveredUrl(
            url=url, domain=domain, url_key=key, depth=0, discovered_at_ms=self._now_ms, source="seed",
            dataset_id=self._dataset_id, priority=self.priority, raw_url=raw_url,
        )

    def with_priority(self, priority: int | None) -> SeedEncoder:
        """An encoder of the same seeds with ``DiscoveredUrl.priority`` ``priority`` (a line's ``URL N``)."""
        return SeedEncoder(self._codec, self._now_ms, self._dataset_id, self._topic, priority)

    def domain_part(self, domain: str) -> bytes:
        """The Avro bytes of ``domain`` (a seed list repeats domains: callers cache this)."""
        return avro_string(domain.encode("utf-8"))

    def encode_parts(self, url_utf8: bytes, domain_part: bytes, key: int, raw_url: str | None = None) -> bytes:
        """``encode`` from the URL's UTF-8 bytes and a ``domain_part`` (``DomainParts.avro`` of
        ``crawlstream.events.AvroPublisher``); only when ``precompiled``."""
        return b"".join(
            (
                self._header,
                avro_string(url_utf8),
                domain_part,
                avro_long(key),
                self._tail if raw_url is None else self._raw_tail + avro_string(raw_url.encode("utf-8", _SURROGATES)),
            )
        )

    def encode(self, url: str, domain: str, key: int, raw_url: str | None = None) -> bytes:
        """The wire value of the seed event of canonical ``url`` in ``domain`` with ``key``
        (``raw_url``: the line as written, when it is not ``url``)."""
        if self.precompiled:
            return self.encode_parts(url.encode("utf-8", _SURROGATES), self.domain_part(domain), key, raw_url)
        return self._codec.encode(self._event(url, domain, key, raw_url), self._topic)
