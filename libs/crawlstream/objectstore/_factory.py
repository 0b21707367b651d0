"""The one factory of object stores: a location plus the ``s3.*`` settings -> an ``ObjectStore``.

One ``S3FileSystem`` and one boto3 client per distinct S3 configuration per process (their
connection pools are shared by every store on that endpoint); ``finalize`` shuts pyarrow's
S3 subsystem down at exit (it must run before the interpreter tears its threads down).
"""

from __future__ import annotations

import atexit
import contextlib
import threading
from typing import TYPE_CHECKING, Any

import pyarrow.fs as pafs

from crawlstream.objectstore._location import Location, parse_location
from crawlstream.objectstore._store import ObjectStore, RetryPolicy

if TYPE_CHECKING:
    from crawlstream.settings import S3Settings, Settings

__all__ = ["archive_location", "finalize", "index_location", "lake_location", "open_objects"]

_lock = threading.Lock()
_clients: dict[tuple[Any, ...], tuple[pafs.FileSystem, Any]] = {}
_LOCAL = pafs.LocalFileSystem()
_finalizer_registered = False


def lake_location(settings: Settings) -> Location:
    """Where the lake lives: ``lake.uri``, else the data dir."""
    return parse_location(settings.lake.uri or settings.data_dir, setting="lake.uri")


def index_location(settings: Settings) -> Location:
    """Where the index lives: ``index.uri``, else the lake's location."""
    if settings.index.uri:
        return parse_location(settings.index.uri, setting="index.uri")
    return lake_location(settings)


def archive_location(settings: Settings) -> Location | None:
    """Where the store's archive segments live, or None: inside the store."""
    if not settings.store.archive_uri:
        return None
    return parse_location(settings.store.archive_uri, setting="store.archive_uri")


def _s3_key(s3: S3Settings) -> tuple[Any, ...]:
    return (s3.endpoint, s3.region, s3.path_style, s3.access_key_id, s3.secret_access_key, s3.session_token,
            s3.connect_timeout_s, s3.request_timeout_s)


def _connect(s3: S3Settings) -> tuple[pafs.FileSystem, Any]:
    import boto3
    from botocore.config import Config

    scheme, endpoint = "https", None
    if s3.endpoint:
        scheme, sep, host = s3.endpoint.partition("://")
        if not sep:
            scheme, host = "https", s3.endpoint
        endpoint = host.rstrip("/")
    # pyarrow ignores AWS_ENDPOINT_URL: the endpoint is always passed explicitly. One attempt per
    # call on both clients: RetryPolicy is the one retry loop, bounded by s3.deadline_s.
    fs = pafs.S3FileSystem(
        access_key=s3.access_key_id, secret_key=s3.secret_access_key, session_token=s3.session_token,
        region=s3.region, endpoint_override=endpoint, scheme=scheme,
        connect_timeout=s3.connect_timeout_s, request_timeout=s3.request_timeout_s,
        retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=1),
        force_virtual_addressing=not s3.path_style,
    )
    client = boto3.session.Session().client(
        "s3",
        endpoint_url=f"{scheme}://{endpoint}" if endpoint else None,
        region_name=s3.region,
        aws_access_key_id=s3.access_key_id,
        aws_secret_access_key=s3.secret_access_key,
        aws_session_token=s3.session_token,
        config=Config(
            s3={"addressing_style": "path" if s3.path_style else "virtual"},
            connect_timeout=s3.connect_timeout_s,
            read_timeout=s3.request_timeout_s,
            retries={"total_max_attempts": 1},
            max_pool_connections=32,
            # checksums only when an operation requires them (S3-compatible servers vary)
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        ),
    )
    return fs, client


def open_objects(location: Location, s3: S3Settings) -> ObjectStore:
    """The object store of ``location`` (a local directory or an S3 prefix)."""
    global _finalizer_registered
    if not location.is_s3:
        return ObjectStore(location, _LOCAL)
    key = _s3_key(s3)
    with _lock:
        found = _clients.get(key)
        if found is None:
            found = _clients[key] = _connect(s3)
            if not _finalizer_registered:
                atexit.register(finalize)
                _finalizer_registered = True
    fs, client = found
    return ObjectStore(location, fs, client=client, retry=RetryPolicy(deadline_s=s3.deadline_s))


def finalize() -> None:
    """Release every S3 connection of this process (pyarrow's ``finalize_s3``); idempotent."""
    with _lock:
        _clients.clear()
    with contextlib.suppress(Exception):  # already finalized, or S3 was never initialised
        pafs.finalize_s3()
