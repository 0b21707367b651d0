"""A ContentStore over damaged files: every read is the body that was stored, or ChecksumMismatch.

One small store is built once (hot single records, a reference record, a cold group record,
the index database and logs); each example copies it, damages one file, opens the copy and
reads every URL back. Re-sealed damage (crc32 and frame checksum recomputed, as a checksum
collision or a foreign writer would leave it) must still never be served, and no read may
allocate from a length field more than the data can back (measured with tracemalloc).
"""

from __future__ import annotations

import shutil
import struct
import tempfile
import tracemalloc
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import xxhash
from adversarial_support import ADVERSARIAL, mutated
from hypothesis import given, settings
from hypothesis import strategies as st

from crawlstream.errors import ChecksumMismatch
from crawlstream.store import ContentStore, GroupHeader, StoreConfig, scan_records

pytestmark = pytest.mark.timeout(120)

PAGES = [
    (f"https://a{i % 3}.example/p/{i}", (f"<html><title>page {i}</title>" + "lorem ipsum " * (i * 7 % 40)).encode())
    for i in range(10)
]
PAGES.append(("https://a0.example/same-as-0", PAGES[0][1]))  # stored as a reference to page 0's body
HOT_PAGES = [(f"https://hot.example/{i}", f"fresh {i} ".encode() * (5 + i)) for i in range(4)]
ALL_PAGES = dict(PAGES + HOT_PAGES)
MAX_READ_ALLOCATION_BYTES = 16 << 20  # every body here is < 1 KiB; a read never needs more than this

SKIP = struct.Struct("<II")
SINGLE_PAYLOAD = 74 + 4  # fixed header + crc32
# Offsets (from the record start) of the length fields a reader sizes buffers from.
SINGLE_FIELDS = {"raw_size": (38, 8), "frame_size": (46, 8), "meta_len": (78, 4)}
GROUP_FIELDS = {"frame_size": (14, 4), "count": (26, 2)}
MEMBER_FIELDS = {"meta_len": (1, 4), "body_size": (5, 4)}  # + 28 + 17 * member
HOSTILE_VALUES = [0, 1, 0x7F, 0xFFFF, 0x10000, 0x7FFFFFFF, 0xFFFFFFFF, 1 << 40, (1 << 64) - 1]


def _open(root: Path) -> ContentStore:
    config = StoreConfig(fsync="never", dict_min_samples=1 << 30, global_dict_min_samples=1 << 30)
    return ContentStore(root, config=config)


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("store") / "store"
    store = _open(root)
    for i, (url, body) in enumerate(PAGES):
        store.put(url, body, content_type="text/html", title=f"T{i}", status=200, fetched_at_ms=1000 + i)
    store.recompress(older_than_s=0, tier="cold", now_ms=10**13)  # one group record
    for i, (url, body) in enumerate(HOT_PAGES):
        store.put(url, body, fetched_at_ms=2000 + i)
    store.close()
    return root


@contextmanager
def _copy(template: Path) -> Iterator[Path]:
    base = Path(tempfile.mkdtemp(prefix="adversarial-store-"))
    try:
        root = base / "store"
        shutil.copytree(template, root)
        yield root
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _segments(root: Path) -> list[Path]:
    return sorted((root / "segments").glob("*/*.seg"))


def _read_everything(store: ContentStore) -> None:
    """The property: each URL reads back as stored, or ChecksumMismatch (or KeyError once the
    index lost it); nothing else escapes and no read allocates more than a body could need."""
    tracemalloc.start()
    try:
        for url, body in ALL_PAGES.items():
            tracemalloc.reset_peak()
            try:
                got = store.get(url)
            except (ChecksumMismatch, KeyError):
                continue
            finally:
                peak = tracemalloc.get_traced_memory()[1]
                assert peak < MAX_READ_ALLOCATION_BYTES, f"reading {url} allocated {peak} bytes"
            assert got == body, url
    finally:
        tracemalloc.stop()


def test_the_template_store_reads_back_every_page(template: Path) -> None:
    with _copy(template) as root:
        store = _open(root)
        assert {s.parent.name for s in _segments(root)} == {"hot", "cold"}
        assert {url: store.get(url) for url in ALL_PAGES} == ALL_PAGES
        assert store.verify().ok
        store.close()


@settings(ADVERSARIAL, max_examples=120)
@given(st.data(), st.sampled_from(["hot", "cold"]))
def test_reads_from_a_mutated_segment_are_the_stored_body_or_checksum_mismatch(
    template: Path, data: st.DataObject, tier: str
) -> None:
    with _copy(template) as root:
        path = next(p for p in _segments(root) if p.parent.name == tier)
        path.write_bytes(data.draw(mutated(path.read_bytes())))
        store = _open(root)
        _read_everything(store)
        store.verify()
        _read_everything(store)  # and again, now with the damage quarantined
        store.close()


def _reseal(buf: bytearray, offset: int) -> None:
    """Recompute the frame checksum and crc32 of the record at ``offset`` from its (damaged) fields."""
    _, size = SKIP.unpack_from(buf, offset)
    start = offset + SKIP.size
    if size == SINGLE_PAYLOAD:
        frame_size = struct.unpack_from("<Q", buf, start + 38)[0]
        frame = bytes(buf[start + size : start + size + frame_size])
        struct.pack_into("<Q", buf, start + 62, xxhash.xxh3_64_intdigest(frame))
    else:
        frame_size = struct.unpack_from("<I", buf, start + 6)[0]
        frame = bytes(buf[start + size : start + size + frame_size])
        struct.pack_into("<Q", buf, start + 10, xxhash.xxh3_64_intdigest(frame))
    if start + size <= len(buf):
        struct.pack_into("<I", buf, start + size - 4, zlib.crc32(buf[start : start + size - 4]))


def _records(path: Path) -> list[tuple[int, int, bool]]:
    return [
        (item.offset, item.length, isinstance(item.header, GroupHeader))
        for item in scan_records(path.read_bytes())
        if item.header is not None
    ]


@settings(ADVERSARIAL, max_examples=150)
@given(st.data(), st.sampled_from(["hot", "cold"]))
def test_resealed_length_fields_are_never_trusted_for_an_allocation(
    template: Path, data: st.DataObject, tier: str
) -> None:
    """A crc32 collision in a member table once made a read allocate the claimed sizes
    (65535 members of 4 GiB: MemoryError). Every length field, set to hostile values."""
    with _copy(template) as root:
        path = next(p for p in _segments(root) if p.parent.name == tier)
        offset, _, is_group = data.draw(st.sampled_from(_records(path)))
        buf = bytearray(path.read_bytes())
        if is_group:
            members = struct.unpack_from("<H", buf, offset + 26)[0]
            fields = [*GROUP_FIELDS.values()] + [
                (28 + 17 * m + at, width) for m in range(members) for at, width in MEMBER_FIELDS.values()
            ]
        else:
            fields = list(SINGLE_FIELDS.values())
        for at, width in data.draw(st.lists(st.sampled_from(fields), min_size=1, max_size=3)):
            value = data.draw(st.sampled_from(HOSTILE_VALUES)) % (1 << (8 * width))
            buf[offset + at : offset + at + width] = value.to_bytes(width, "little")
        _reseal(buf, offset)
        path.write_bytes(bytes(buf))
        store = _open(root)
        _read_everything(store)
        store.close()


@settings(ADVERSARIAL, max_examples=150)
@given(st.data(), st.sampled_from(["hot", "cold"]))
def test_resealed_damage_anywhere_in_a_record_is_never_served(template: Path, data: st.DataObject, tier: str) -> None:
    """Past the header crc32 and the frame checksum, the index's content hash (and a group
    member's own checksum) still stand between damaged bytes and a caller."""
    with _copy(template) as root:
        path = next(p for p in _segments(root) if p.parent.name == tier)
        offset, length, _ = data.draw(st.sampled_from(_records(path)))
        buf = bytearray(path.read_bytes())
        region = data.draw(mutated(bytes(buf[offset : offset + length])))
        buf[offset : offset + length] = region
        if len(region) >= SKIP.size + 8:
            _reseal(buf, offset)
        path.write_bytes(bytes(buf))
        store = _open(root)
        _read_everything(store)
        store.verify()
        _read_everything(store)
        store.close()


@settings(ADVERSARIAL, max_examples=120)
@given(st.data(), st.sampled_from(["index.sqlite", "ops.log", "quarantine.log", "FORMAT"]))
def test_a_store_with_a_damaged_index_or_log_opens_and_serves_only_stored_bodies(
    template: Path, data: st.DataObject, pattern: str
) -> None:
    with _copy(template) as root:
        for path in root.glob(pattern):
            path.write_bytes(data.draw(mutated(path.read_bytes())))
        try:
            store = _open(root)
        except ChecksumMismatch:
            return
        except Exception as exc:  # the FORMAT marker is the one file whose damage refuses to open
            assert pattern == "FORMAT" and type(exc).__name__ == "UnsupportedFormat", exc
            return
        _read_everything(store)
        store.close()


def test_a_missing_dictionary_is_reported_by_verify_not_raised(tmp_path: Path) -> None:
    """Regression: a group record whose dictionary file is gone made verify() (and start-up
    recovery, and rebuild_index) raise ChecksumMismatch instead of quarantining the group."""
    config = StoreConfig(
        fsync="never", dict_min_samples=8, global_dict_min_samples=8, dict_size_bytes=4096, global_dict_size_bytes=4096
    )
    store = ContentStore(tmp_path / "store", config=config)
    pages = {
        f"https://d.example/p/{i}": (
            f"<html><title>{i}</title>" + "".join(f"<p>item {j * i}</p>" for j in range(30))
        ).encode()
        for i in range(40)
    }
    for i, (url, body) in enumerate(pages.items()):
        store.put(url, body, fetched_at_ms=1000 + i)
    assert store.recompress(older_than_s=0, tier="cold", now_ms=10**13).dictionaries_trained == 1
    store.close()
    for path in (tmp_path / "store" / "dicts").glob("*.zdict.zst"):
        path.unlink()
    store = _open(tmp_path / "store")
    report = store.verify()
    assert [(p.kind, p.detail) for p in report.problems] == [("corrupt", "whole group unreadable (see quarantine.log)")]
    with pytest.raises(ChecksumMismatch):
        store.get("https://d.example/p/3")
    assert store.rebuild_index() == 0
    store.close()


@pytest.mark.parametrize("tier", ["hot", "cold"])
def test_a_resealed_record_naming_another_format_version_is_damage_not_an_error(template: Path, tier: str) -> None:
    """Found by the full-suite run: a record the index points at whose (re-sealed) header says
    format version 0 raised UnsupportedFormat out of ``get``; the layout as a whole is guarded
    by FORMAT, so there it is damage: quarantined, ChecksumMismatch."""
    with _copy(template) as root:
        path = next(p for p in _segments(root) if p.parent.name == tier)
        buf = bytearray(path.read_bytes())
        for offset, _, _ in _records(path):
            buf[offset + SKIP.size] = 0  # the version byte, first of both header layouts
            _reseal(buf, offset)
        path.write_bytes(bytes(buf))
        store = _open(root)
        _read_everything(store)
        assert not store.verify().ok
        _read_everything(store)
        store.close()
