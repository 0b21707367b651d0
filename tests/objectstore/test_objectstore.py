"""The object store against a local directory and a real S3 server (versitygw on loopback):
the same contract on both, and the S3 faults a caller must survive."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from crawlstream.devtools.locals3 import LocalS3
from crawlstream.errors import ConfigError, StorageUnavailable
from crawlstream.objectstore import ObjectStore, open_objects, parse_location
from crawlstream.settings import load


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    if request.param == "local":
        return open_objects(parse_location(tmp_path / "objects"), load({}).s3)
    server: LocalS3 = request.getfixturevalue("s3_server")
    prefix: str = request.getfixturevalue("s3_prefix")
    return open_objects(parse_location(prefix), load(server.env).s3)


def test_locations_parse_and_refuse_clearly(tmp_path: Path) -> None:
    s3 = parse_location("s3://my-bucket/a/b/")
    assert (s3.is_s3, s3.bucket, s3.prefix, str(s3)) == (True, "my-bucket", "a/b", "s3://my-bucket/a/b")
    assert str(s3.join("urls/x.parquet")) == "s3://my-bucket/a/b/urls/x.parquet"
    local = parse_location(tmp_path / "lake")
    assert not local.is_s3 and local.local_path == tmp_path / "lake"
    for bad, why in [("s3://My_Bucket/x", "bucket name"), ("gs://b/x", "scheme"), ("s3://bkt/a//b", "segment"),
                     ("s3://bkt/../x", "segment"), ("", "empty")]:
        with pytest.raises(ConfigError, match=why):
            parse_location(bad, setting="lake.uri")
    with pytest.raises(ConfigError, match="CRAWLSTREAM_LAKE_URI"):
        load({"CRAWLSTREAM_LAKE_URI": "s3://x/y"})  # a one-letter bucket


def test_write_read_list_delete(store: ObjectStore) -> None:
    assert store.list() == [] and not store.exists("a/b.bin")
    store.write("a/b.bin", b"hello world")
    store.write("a/c/d.bin", b"")
    store.write("e.bin", b"x" * 1000)
    assert store.read("a/b.bin") == b"hello world" and store.read("a/c/d.bin") == b""
    assert [(o.rel, o.size) for o in store.list()] == [("a/b.bin", 11), ("a/c/d.bin", 0), ("e.bin", 1000)]
    assert [o.rel for o in store.list("a")] == ["a/b.bin", "a/c/d.bin"]
    assert store.size("e.bin") == 1000 and store.size("nope") is None
    handle = store.open_input("a/b.bin")
    assert store.read_range(handle, "a/b.bin", 6, 5) == b"world"
    assert store.read_range(handle, "a/b.bin", 0, 0) == b""
    with pytest.raises(FileNotFoundError):
        store.read("nope")
    with pytest.raises(FileNotFoundError):
        store.open_input("nope")
    store.delete("a/b.bin")
    store.delete("a/b.bin")  # already gone: no error
    assert store.delete_prefix("a") == 1
    assert [o.rel for o in store.list()] == ["e.bin"]


def test_writing_publishes_whole_or_nothing(store: ObjectStore) -> None:
    table = pa.table({"n": list(range(1000))})
    with store.writing("t/part.parquet") as path:
        pq.write_table(table, path)
    assert pq.read_table(store.open_input("t/part.parquet")).equals(table)
    with pytest.raises(RuntimeError), store.writing("t/half.parquet") as path:
        path.write_bytes(b"PAR1 half a file")
        raise RuntimeError("the writer failed mid-file")
    assert not store.exists("t/half.parquet")
    assert [o.rel for o in store.list()] == ["t/part.parquet"]


def test_conditional_create_and_compare_and_swap(store: ObjectStore) -> None:
    assert store.read_tagged("manifest.json") is None
    assert store.create("manifest.json", b"v1")
    assert not store.create("manifest.json", b"other")  # someone created it first
    data, tag = store.read_tagged("manifest.json")  # type: ignore[misc]
    assert data == b"v1"
    assert store.replace_if("manifest.json", b"v2", tag)
    assert not store.replace_if("manifest.json", b"v3", tag)  # stale tag: a flip by someone else won
    assert store.read("manifest.json") == b"v2"
    assert not store.replace_if("manifest.json", b"v4", None)  # None: only if absent


def test_only_one_of_many_racing_swaps_wins(store: ObjectStore) -> None:
    store.write("m", b"initial")  # every swap writes other bytes (a tag is a content hash on both backends)
    _, tag = store.read_tagged("m")  # type: ignore[misc]
    wins: list[int] = []
    barrier = threading.Barrier(6)

    def swap(i: int) -> None:
        barrier.wait()
        if store.replace_if("m", str(i).encode(), tag):
            wins.append(i)

    threads = [threading.Thread(target=swap, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wins) == 1 and store.read("m") == str(wins[0]).encode()


def test_a_large_object_goes_up_in_parts_and_reads_back(store: ObjectStore, tmp_path: Path) -> None:
    big = tmp_path / "big.bin"
    block = bytes(range(256)) * 4096  # 1 MiB
    with open(big, "wb") as fh:
        for i in range(70):  # past the 64 MiB single-PUT threshold
            fh.write(block[i:] + block[:i])
    store.upload("big.bin", big)
    assert store.size("big.bin") == big.stat().st_size
    handle = store.open_input("big.bin")
    assert store.read_range(handle, "big.bin", 69 << 20, 100) == (block[69:] + block[:69])[:100]


def test_a_stopped_server_fails_fast_then_recovers(s3_server: LocalS3, s3_prefix: str) -> None:
    s3 = load({**s3_server.env, "CRAWLSTREAM_S3_DEADLINE_S": "1.5"}).s3
    store = open_objects(parse_location(s3_prefix), s3)
    store.write("k", b"v")
    handle = store.open_input("k")
    s3_server.stop(keep_data=True)
    try:
        for call in (lambda: store.read("k"), lambda: store.read_range(handle, "k", 0, 1),
                     lambda: store.write("k2", b"v"), lambda: store.list()):
            started = time.monotonic()
            with pytest.raises(StorageUnavailable, match="unavailable after"):
                call()
            assert time.monotonic() - started < 4.0  # the deadline, not a hang
    finally:
        s3_server.restart()
    assert store.read("k") == b"v" and store.read_range(handle, "k", 0, 1) == b"v"


def test_a_killed_uploader_leaves_no_object_and_its_upload_is_aborted(
    s3_server: LocalS3, s3_prefix: str, tmp_path: Path
) -> None:
    """SIGKILL in the middle of a multipart upload: nothing at the key; the stale upload is found
    and aborted."""
    script = f"""
import os, sys
from pathlib import Path
from crawlstream.objectstore import open_objects, parse_location
from crawlstream.settings import load
store = open_objects(parse_location({s3_prefix!r}), load(os.environ).s3)
big = Path({str(tmp_path / "big.bin")!r})
big.write_bytes(os.urandom(1 << 20) * 200)
class Slow:
    def __init__(self, fh): self.fh, self.n = fh, 0
    def read(self, n=-1):
        self.n += 1
        if self.n == 3:
            print("uploading", flush=True)
        if self.n > 3:
            import time; time.sleep(0.2)
        return self.fh.read(n)
    def __getattr__(self, k): return getattr(self.fh, k)
    def __enter__(self): return self
    def __exit__(self, *a): self.fh.close()
store._upload("big.bin", lambda: Slow(open(big, "rb")), big.stat().st_size)
"""
    proc = subprocess.Popen([sys.executable, "-c", script], env={**__import__("os").environ, **s3_server.env},
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "uploading"
        time.sleep(0.5)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    store = open_objects(parse_location(s3_prefix), load(s3_server.env).s3)
    assert not store.exists("big.bin") and store.list() == []
    assert store.abort_stale_uploads(older_than_s=3600) == 0  # too young to be stale
    assert store.abort_stale_uploads(older_than_s=0) == 1
    assert store.abort_stale_uploads(older_than_s=0) == 0


def test_local_s3_command_prints_the_environment_and_stops_on_sigterm(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "crawlstream", "local-s3", "--data-dir", str(tmp_path / "d"), "--bucket", "lakes"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stdout is not None
        env = dict(proc.stdout.readline().strip().split("=", 1) for _ in range(6))
        assert env["CRAWLSTREAM_S3_ENDPOINT"].startswith("http://127.0.0.1:")
        assert env["CRAWLSTREAM_LAKE_URI"] == "s3://lakes/lake"
        store = open_objects(parse_location(env["CRAWLSTREAM_LAKE_URI"]), load(env).s3)
        store.write("hello", b"world")
        assert (tmp_path / "d" / "s3" / "objects" / "lakes" / "lake" / "hello").read_bytes() == b"world"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
