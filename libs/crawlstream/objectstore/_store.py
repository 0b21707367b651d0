"""``ObjectStore``: the one way the lake, the index and the content archive read and write bytes,
whether they live in a local directory or under an S3 prefix.

Why two libraries behind one class (ADR 029):

* **Reads go through ``pyarrow.fs``** (``S3FileSystem`` or ``LocalFileSystem``): Parquet readers
  take its files directly, and an open ``RandomAccessFile`` serves each ``read_at`` with one
  ranged GET, so a reader that keeps a handle pays the object's HEAD once.
* **Writes to S3 go through boto3**: pyarrow's S3 output stream *completes* its multipart upload
  when closed after an exception (a half object under the final key: reproduced against
  versitygw, ADR 029), and it has no conditional writes. boto3's ``upload_fileobj`` aborts a
  failed multipart upload, and ``put_object(IfNoneMatch=..., IfMatch=...)`` is the commit point
  a manifest flip or a lease needs (S3 has no rename). A writer killed mid-upload leaves an
  incomplete multipart upload, invisible to readers; ``abort_stale_uploads`` removes it.
* **Local directories keep today's code path**: publication by ``crawlstream.durable`` (temp,
  fsync, rename), reads by ``pread``; ``local_path`` lets a reader memory-map a file.

Every S3 call is bounded: a per-request timeout, then retries with exponential back-off until
``s3.deadline_s`` has passed, then ``StorageUnavailable`` (the API answers 503) — never a hang.
A missing object is ``FileNotFoundError`` at once (not retried).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import logging
import os
import shutil
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.fs as pafs

from crawlstream.durable import replacing, try_lock_exclusive, write_atomically
from crawlstream.errors import ChecksumMismatch, StorageUnavailable
from crawlstream.objectstore._location import Location

__all__ = ["ObjectInfo", "ObjectStore", "RetryPolicy", "is_checksum_failure"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

# Objects up to this size go up in one PUT (atomic by itself); larger ones as a multipart upload
# that S3 assembles only when it is completed.
_MULTIPART_THRESHOLD = 64 << 20


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Exponential back-off between attempts, no attempt started after ``deadline_s``."""

    deadline_s: float = 10.0
    first_backoff_s: float = 0.05
    max_backoff_s: float = 1.0

    def run(self, what: str, fn: Callable[[], T], transient: Callable[[BaseException], bool]) -> T:
        started = time.monotonic()
        backoff = self.first_backoff_s
        attempt = 0
        while True:
            attempt += 1
            try:
                return fn()
            except FileNotFoundError:
                raise
            except Exception as exc:
                if not transient(exc):
                    raise
                waited = time.monotonic() - started
                if waited + backoff > self.deadline_s:
                    raise StorageUnavailable(
                        f"{what}: object storage unavailable after {attempt} attempts in {waited:.1f}s: {exc}"
                    ) from exc
                logger.debug("%s: attempt %d failed (%s); retrying in %.2fs", what, attempt, exc, backoff)
                time.sleep(backoff)
                backoff = min(backoff * 2, self.max_backoff_s)


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    rel: str  # relative to the store's location, '/'-separated
    size: int
    mtime: float  # seconds since the epoch


def _pyarrow_transient(exc: BaseException) -> bool:
    # A response failing the object's stored checksum (the AWS SDK checks a whole-object GET) is
    # damage at rest: retrying cannot heal it, and the caller's own checks decide what it means.
    if is_checksum_failure(exc):
        return False
    return isinstance(exc, OSError) and not isinstance(exc, (FileNotFoundError, IsADirectoryError))


def is_checksum_failure(exc: BaseException) -> bool:
    """A read refused because the object no longer matches its stored checksum."""
    return isinstance(exc, OSError) and "checksums mismatch" in str(exc).lower()


def _boto_status(exc: BaseException) -> tuple[str, int]:
    response = getattr(exc, "response", None) or {}
    error = response.get("Error", {})
    return str(error.get("Code", "")), int(response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)


def _boto_transient(exc: BaseException) -> bool:
    from botocore.exceptions import BotoCoreError, ClientError

    if isinstance(exc, ClientError):
        code, status = _boto_status(exc)
        return status >= 500 or status == 429 or code in ("SlowDown", "RequestTimeout", "Throttling")
    return isinstance(exc, (BotoCoreError, OSError))


def _is_not_found(exc: BaseException) -> bool:
    code, status = _boto_status(exc)
    return status == 404 or code in ("NoSuchKey", "NotFound", "404")


def _precondition_failed(exc: BaseException) -> bool:
    """412: the object changed (or exists); 409: a concurrent conditional write won the race."""
    code, status = _boto_status(exc)
    return status in (409, 412) or code in ("PreconditionFailed", "ConditionalRequestConflict")


class ObjectStore:
    """Objects under one :class:`Location`; built by ``crawlstream.objectstore.open_objects``.

    Paths (``rel``) are '/'-separated and relative to the location. Thread-safe.
    """

    def __init__(
        self,
        location: Location,
        fs: pafs.FileSystem,
        *,
        client: Any = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.location = location
        self.fs = fs
        self._client = client  # a boto3 S3 client (S3 locations only)
        self.retry = retry or RetryPolicy()
        self.requests: Counter[str] = Counter()  # S3 calls made through this object, by kind
        self._counter_lock = threading.Lock()

    # -- naming ----------------------------------------------------------------------------

    @property
    def is_local(self) -> bool:
        return not self.location.is_s3

    def __str__(self) -> str:
        return str(self.location)

    def uri(self, rel: str) -> str:
        return str(self.location.join(rel))

    def key(self, rel: str) -> str:
        """The S3 key of ``rel``."""
        return self.location.join(rel).prefix

    def fs_path(self, rel: str) -> str:
        """``rel`` as a path of ``self.fs`` (``bucket/key`` on S3, an absolute path locally)."""
        loc = self.location.join(rel)
        return f"{loc.bucket}/{loc.prefix}" if loc.is_s3 else loc.prefix

    def local_path(self, rel: str) -> Path:
        """``rel`` as a local path (local stores only: memory maps, flocks)."""
        return self.location.join(rel).local_path

    def child(self, rel: str) -> ObjectStore:
        """The same store rooted at ``rel`` (shares the connections)."""
        return ObjectStore(self.location.join(rel), self.fs, client=self._client, retry=self.retry)

    def _count(self, kind: str, n: int = 1) -> None:
        with self._counter_lock:
            self.requests[kind] += n

    def _s3(self, what: str, fn: Callable[[], T]) -> T:
        return self.retry.run(what, fn, _boto_transient)

    def _pa(self, what: str, fn: Callable[[], T]) -> T:
        try:
            return self.retry.run(what, fn, _pyarrow_transient)
        except OSError as exc:
            if is_checksum_failure(exc):
                raise ChecksumMismatch(f"{what}: the bytes received do not match the server's checksum: {exc}") from exc
            raise

    # -- reading ---------------------------------------------------------------------------

    def read(self, rel: str) -> bytes:
        """The whole object (``FileNotFoundError`` if there is none)."""
        if self.is_local:
            try:
                return self.local_path(rel).read_bytes()
            except FileNotFoundError:
                raise
            except OSError as exc:
                raise StorageUnavailable(f"cannot read {self.uri(rel)}: {exc}") from exc
        found = self._get_object(rel)
        if found is None:
            raise FileNotFoundError(self.uri(rel))
        return found[0]

    def read_tagged(self, rel: str) -> tuple[bytes, str] | None:
        """The object and its version tag (ETag; a content hash locally), or None if absent.
        The tag is what ``replace_if`` compares: a compare-and-swap on one object."""
        if self.is_local:
            try:
                data = self.read(rel)
            except FileNotFoundError:
                return None
            return data, hashlib.blake2b(data, digest_size=16).hexdigest()
        return self._get_object(rel)

    def _get_object(self, rel: str) -> tuple[bytes, str] | None:
        """One S3 GET of the whole object: (bytes, ETag), or None if there is none."""

        def get() -> tuple[bytes, str] | None:
            self._count("GET")
            try:
                r = self._client.get_object(Bucket=self.location.bucket, Key=self.key(rel))
                return bytes(r["Body"].read()), str(r["ETag"])
            except Exception as exc:
                if _is_not_found(exc):
                    return None
                raise

        return self._s3(f"GET {self.uri(rel)}", get)

    def open_input(self, rel: str) -> pa.NativeFile:
        """A random-access file (pyarrow) for Parquet readers and ranged reads; on S3 opening it
        costs one HEAD and each ``read_at`` one ranged GET, so keep it while it is used."""
        if self.is_local:
            try:
                return pa.OSFile(self.fs_path(rel))
            except FileNotFoundError:
                raise
            except OSError as exc:
                raise StorageUnavailable(f"cannot open {self.uri(rel)}: {exc}") from exc
        self._count("HEAD")
        return self._pa(f"HEAD {self.uri(rel)}", lambda: self.fs.open_input_file(self.fs_path(rel)))

    def read_range(self, handle: pa.NativeFile, rel: str, offset: int, length: int) -> bytes:
        """``length`` bytes at ``offset`` of an open file (one ranged GET on S3; none for 0 bytes:
        S3 answers 416 to a range of an empty object)."""
        if length <= 0:
            return b""
        if not self.is_local:
            self._count("GET")
        return self._pa(f"GET {self.uri(rel)} [{offset}+{length}]",
                        lambda: bytes(handle.read_at(length, offset)))

    def size(self, rel: str) -> int | None:
        """The object's size, or None if there is none."""
        info = self._info(rel)
        return info.size if info is not None else None

    def exists(self, rel: str) -> bool:
        return self._info(rel) is not None

    def _info(self, rel: str) -> ObjectInfo | None:
        if self.is_local:
            try:
                st = self.local_path(rel).stat()
            except FileNotFoundError:
                return None
            return ObjectInfo(rel, st.st_size, st.st_mtime)
        self._count("HEAD")
        info = self._pa(f"HEAD {self.uri(rel)}", lambda: self.fs.get_file_info(self.fs_path(rel)))
        if info.type != pafs.FileType.File:
            return None
        return ObjectInfo(rel, int(info.size or 0), info.mtime.timestamp() if info.mtime else 0.0)

    def list(self, prefix: str = "") -> list[ObjectInfo]:
        """Every object under ``prefix`` (recursive), sorted by path; [] if there is none."""
        base = self.fs_path(prefix)
        root = self.fs_path("")
        if self.is_local and not os.path.isdir(base):
            return []
        selector = pafs.FileSelector(base, recursive=True, allow_not_found=True)
        if not self.is_local:
            self._count("LIST")
        infos = self._pa(f"LIST {self.uri(prefix)}", lambda: self.fs.get_file_info(selector))
        out = []
        for info in infos:
            if info.type != pafs.FileType.File:
                continue
            rel = info.path[len(root):].lstrip("/")
            out.append(ObjectInfo(rel, int(info.size or 0), info.mtime.timestamp() if info.mtime else 0.0))
        out.sort(key=lambda o: o.rel)
        return out

    # -- writing ---------------------------------------------------------------------------

    def write(self, rel: str, data: bytes) -> None:
        """Publish ``data`` at ``rel``: readers see the old object or all of the new one."""
        if self.is_local:
            path = self.local_path(rel)
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(path, data)
            return
        self._upload(rel, lambda: io.BytesIO(data), len(data))

    def upload(self, rel: str, source: Path) -> None:
        """Publish the finished local file ``source`` at ``rel`` (a copy; ``source`` stays)."""
        if self.is_local:
            path = self.local_path(rel)
            path.parent.mkdir(parents=True, exist_ok=True)
            with replacing(path) as staging:  # copied in blocks, not read whole into memory
                shutil.copyfile(source, staging)
            return

        def opener() -> Any:
            return open(source, "rb")

        self._upload(rel, opener, source.stat().st_size)

    def _upload(self, rel: str, opener: Callable[[], Any], size: int) -> None:
        from boto3.s3.transfer import TransferConfig

        config = TransferConfig(multipart_threshold=_MULTIPART_THRESHOLD, multipart_chunksize=16 << 20,
                                use_threads=size > _MULTIPART_THRESHOLD)

        def put() -> None:
            self._count("PUT", max(1, -(-size // (16 << 20))) if size > _MULTIPART_THRESHOLD else 1)
            with opener() as fh:
                # a failed multipart upload is aborted by s3transfer: nothing appears at the key
                self._client.upload_fileobj(fh, self.location.bucket, self.key(rel), Config=config)

        self._s3(f"PUT {self.uri(rel)}", put)

    @contextlib.contextmanager
    def writing(self, rel: str) -> Iterator[Path]:
        """A temporary local path to create ``rel``'s content at (``pq.write_table(t, path)``),
        published on a clean exit and removed on an exception (never a half object at ``rel``)."""
        if self.is_local:
            path = self.local_path(rel)
            path.parent.mkdir(parents=True, exist_ok=True)
            with replacing(path) as staging:
                yield staging
            return
        spool = Path(tempfile.mkdtemp(prefix="crawlstream-upload-"))
        try:
            staging = spool / rel.rsplit("/", 1)[-1]
            yield staging
            self.upload(rel, staging)
        finally:
            shutil.rmtree(spool, ignore_errors=True)

    def create(self, rel: str, data: bytes) -> bool:
        """Publish ``data`` at ``rel`` only if no object is there: True if this call created it."""
        if self.is_local:
            path = self.local_path(rel)
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                write_atomically(path, data, exclusive=True)
            except FileExistsError:
                return False
            return True
        return self._conditional_put(rel, data, IfNoneMatch="*")

    def replace_if(self, rel: str, data: bytes, tag: str | None) -> bool:
        """Compare-and-swap: replace ``rel`` with ``data`` only if its tag is still ``tag`` (from
        ``read_tagged``; None: only if it does not exist). True if this call replaced it."""
        if tag is None:
            return self.create(rel, data)
        if self.is_local:
            path = self.local_path(rel)
            lock = path.with_name(f".{path.name}.cas-lock")
            fd = None
            while fd is None:  # a local compare-and-swap is serialised by a flock held for microseconds
                fd = try_lock_exclusive(lock)
                if fd is None:
                    time.sleep(0.001)
            try:
                current = self.read_tagged(rel)
                if current is None or current[1] != tag:
                    return False
                write_atomically(path, data)
                return True
            finally:
                os.close(fd)
        return self._conditional_put(rel, data, IfMatch=tag)

    def _conditional_put(self, rel: str, data: bytes, **condition: str) -> bool:
        def put() -> bool:
            self._count("PUT")
            try:
                self._client.put_object(Bucket=self.location.bucket, Key=self.key(rel), Body=data, **condition)
            except Exception as exc:
                if _precondition_failed(exc):
                    return False
                raise
            return True

        return self._s3(f"PUT {self.uri(rel)} ({', '.join(condition)})", put)

    def delete(self, rel: str) -> None:
        """Remove ``rel`` (no error if it is already gone)."""
        if self.is_local:
            with contextlib.suppress(FileNotFoundError):
                self.local_path(rel).unlink()
            return

        def delete() -> None:
            self._count("DELETE")
            self._client.delete_object(Bucket=self.location.bucket, Key=self.key(rel))

        self._s3(f"DELETE {self.uri(rel)}", delete)

    def delete_prefix(self, prefix: str) -> int:
        """Remove every object under ``prefix``; returns how many."""
        objects = self.list(prefix)
        for o in objects:
            self.delete(o.rel)
        if self.is_local:
            with contextlib.suppress(OSError):
                shutil.rmtree(self.local_path(prefix))
        return len(objects)

    def abort_stale_uploads(self, older_than_s: float) -> int:
        """Abort multipart uploads under this location begun more than ``older_than_s`` ago
        (a writer killed mid-upload leaves one: invisible, but billed). Local stores: 0."""
        if self.is_local:
            return 0
        cutoff = time.time() - older_than_s

        def listing() -> list[dict[str, Any]]:
            self._count("LIST")
            prefix = self.location.prefix + "/" if self.location.prefix else ""
            r = self._client.list_multipart_uploads(Bucket=self.location.bucket, Prefix=prefix)
            return list(r.get("Uploads") or [])

        aborted = 0
        for upload in self._s3(f"LIST uploads {self}", listing):
            started = upload.get("Initiated")
            if started is not None and started.timestamp() > cutoff:
                continue
            self._count("DELETE")
            key, upload_id = str(upload["Key"]), str(upload["UploadId"])

            def abort(key: str = key, upload_id: str = upload_id) -> None:
                self._client.abort_multipart_upload(Bucket=self.location.bucket, Key=key, UploadId=upload_id)

            self._s3(f"abort upload of {key}", abort)
            aborted += 1
        return aborted
