"""Group records (cold/archive tiers): several pages in one zstd frame, each still read alone."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import pytest
from store_support import group_headers

from crawlstream.devtools.demoweb._render import _padding
from crawlstream.errors import ChecksumMismatch
from crawlstream.store import (
    KIND_GROUP,
    KIND_GROUP_BZIP2,
    ContentStore,
    GroupHeader,
    StoreConfig,
    decode_record_header,
    open_store,
)

NO_DICTS = StoreConfig(dict_min_samples=10_000, global_dict_min_samples=10_000)


def _noise(i: int, size: int = 30_000) -> bytes:
    """Incompressible bodies: zstd stores them as raw blocks, so one flipped byte damages one member."""
    return random.Random(i).randbytes(size)


def _grouped_store(root: Path, n: int = 8) -> tuple[list[str], list[bytes]]:
    urls = [f"https://example.com/p/{i}" for i in range(n)]
    bodies = [_noise(i) for i in range(n)]
    with ContentStore(root, config=NO_DICTS) as store:
        for url, body in zip(urls, bodies, strict=True):
            store.put(url, body, content_type="application/octet-stream", title=url[-1], fetched_at_ms=5)
        store.recompress(older_than_s=0, tier="cold", now_ms=10)
    return urls, bodies


def test_recompressed_pages_share_one_group_frame_and_read_alone(tmp_path: Path) -> None:
    urls, bodies = _grouped_store(tmp_path)
    with ContentStore(tmp_path, config=NO_DICTS) as store:
        locs = [store.entry(u).location for u in urls]  # type: ignore[union-attr]
        assert len({(loc.segment, loc.offset, loc.length) for loc in locs}) == 1
        assert [loc.member for loc in locs] == list(range(len(urls)))  # sorted by URL inside the frame
        seg = (tmp_path / "segments" / locs[0].segment).read_bytes()
        header = decode_record_header(seg, locs[0].offset)
        assert isinstance(header, GroupHeader) and len(header.members) == len(urls)
        for url, body in zip(urls, bodies, strict=True):
            assert store.get(url) == body
            entry = store.entry(url)
            assert entry is not None and (entry.title, entry.seq > 0, entry.fetched_at_ms) == (url[-1], True, 5)


def test_group_bytes_caps_the_raw_size_of_a_frame(tmp_path: Path) -> None:
    with ContentStore(tmp_path, config=replace(NO_DICTS, group_bytes=70_000)) as store:
        for i in range(8):
            store.put(f"https://example.com/p/{i}", _noise(i), fetched_at_ms=0)
        store.recompress(older_than_s=0, now_ms=1)
        locs = [e.location for e in store.search()]
        frames = {(loc.segment, loc.offset) for loc in locs}
        assert len(frames) == 4 and max(loc.member for loc in locs) == 1  # 2 x 30 KB per 70 KB frame


def _html(i: int) -> bytes:
    rows = b"".join(b"<li><a href=/item/%d>item %d</a> %d</li>" % (j, j * i, j % 50) for j in range(120 * (1 + i % 4)))
    return b"<html><head><title>page %d</title></head><body><ul>%s</ul></body></html>" % (i, rows)


def test_global_dictionary_groups_are_capped_by_global_group_bytes_and_sorted_by_body_size(tmp_path: Path) -> None:
    pages = {f"https://site{i}.example.org/p": _html(i) for i in range(40)}
    config = StoreConfig(dict_min_samples=10_000, global_dict_min_samples=8, global_group_bytes=60_000)
    with ContentStore(tmp_path, config=config) as store:
        for url, body in pages.items():
            store.put(url, body, fetched_at_ms=0)
        assert store.recompress(older_than_s=0, now_ms=1).dictionaries_trained == 1
        by_group: dict[tuple[str, int], list[tuple[int, str]]] = {}
        for e in store.search():
            assert store.dicts.is_global(e.location.dict_id)
            by_group.setdefault((e.location.segment, e.location.offset), []).append((e.location.member, e.url))
        assert len(by_group) > 4
        for members in by_group.values():
            sizes = [len(pages[url]) for _, url in sorted(members)]
            assert sum(sizes) <= 60_000 and sizes == sorted(sizes)  # the largest member last
        assert all(store.get(url) == body for url, body in pages.items())


def test_identical_bodies_in_a_group_are_stored_once_and_survive_rebuild(tmp_path: Path) -> None:
    body = b"<html>" + b"same page " * 3000 + b"</html>"
    with ContentStore(tmp_path, config=NO_DICTS) as store:
        for i in range(4):
            store.put(f"https://example.com/{i}", body, fetched_at_ms=0)
        store.put("https://example.com/other", body + b"x", fetched_at_ms=0)
        store.recompress(older_than_s=0, now_ms=1)
        assert store.stats().bodies == 2
        assert store.rebuild_index() == 5
    with ContentStore(tmp_path, config=NO_DICTS) as store:
        assert all(store.get(f"https://example.com/{i}") == body for i in range(4))
        assert store.get("https://example.com/other") == body + b"x"
        assert len({e.location for e in store.search()}) == 2
        assert store.verify().ok


def test_one_damaged_member_is_quarantined_and_the_rest_of_its_frame_stays_readable(tmp_path: Path) -> None:
    urls, bodies = _grouped_store(tmp_path)
    with ContentStore(tmp_path, config=NO_DICTS) as store:
        loc = store.entry(urls[5]).location  # type: ignore[union-attr]
    seg = tmp_path / "segments" / loc.segment
    data = bytearray(seg.read_bytes())
    header = decode_record_header(data, loc.offset)
    assert isinstance(header, GroupHeader)
    victim = header.members[5]
    # raw blocks: content byte k of the frame sits a few header bytes after frame offset k
    flip = loc.offset + header.header_size + victim.start + victim.meta_len + 15_000
    data[flip] ^= 0x55
    seg.write_bytes(bytes(data))
    with ContentStore(tmp_path, config=NO_DICTS) as store:
        with pytest.raises(ChecksumMismatch):
            store.get(urls[5])
        for i, url in enumerate(urls):
            if i != 5:
                assert store.get(url) == bodies[i], url  # frame checksum fails, member checksums hold
        assert store.quarantined() == [(loc.segment, loc.offset)]
        report = store.verify()
        assert [(p.offset, p.kind) for p in report.problems] == [(loc.offset, "corrupt")]
        assert "[5]" in report.problems[0].detail
    invalid = seg.with_name(seg.name + ".invalid")
    assert invalid.read_bytes() == bytes(data[loc.offset : loc.offset + loc.length])
    with ContentStore(tmp_path, config=NO_DICTS) as store:
        with pytest.raises(ChecksumMismatch):  # the member quarantine survives a restart
            store.get(urls[5])
        assert store.rebuild_index() == len(urls) - 1  # the intact members are re-indexed
        assert all(store.get(u) == b for i, (u, b) in enumerate(zip(urls, bodies, strict=True)) if i != 5)


def test_damaged_group_header_quarantines_the_region_and_keeps_other_records(tmp_path: Path) -> None:
    urls, _ = _grouped_store(tmp_path, n=3)
    with ContentStore(tmp_path, config=NO_DICTS) as store:
        store.put("https://example.com/hot", b"still hot", fetched_at_ms=20)
        loc = store.entry(urls[0]).location  # type: ignore[union-attr]
    seg = tmp_path / "segments" / loc.segment
    data = bytearray(seg.read_bytes())
    data[loc.offset + 12] ^= 0x01  # inside the member table: the header crc fails
    seg.write_bytes(bytes(data))
    with ContentStore(tmp_path, config=NO_DICTS) as store:
        for url in urls:
            with pytest.raises(ChecksumMismatch):
                store.get(url)
        assert store.get("https://example.com/hot") == b"still hot"
        assert store.quarantined() == [(loc.segment, loc.offset)]


def test_torn_group_at_a_segment_tail_is_truncated_and_a_complete_unindexed_one_is_reindexed(
    tmp_path: Path,
) -> None:
    """The two states a kill -9 during recompression into groups can leave (step 2 of recompress)."""
    urls, bodies = _grouped_store(tmp_path, n=4)
    with ContentStore(tmp_path, config=NO_DICTS) as store:
        loc = store.entry(urls[0]).location  # type: ignore[union-attr]
    seg = tmp_path / "segments" / loc.segment
    data = seg.read_bytes()
    record = data[loc.offset : loc.offset + loc.length]
    seg.write_bytes(data + record[: len(record) // 2])  # cut short mid-frame
    with ContentStore(tmp_path, config=NO_DICTS) as store:
        assert seg.stat().st_size == len(data) and store.recovered_records == 0
        assert all(store.get(u) == b for u, b in zip(urls, bodies, strict=True))
    seg.write_bytes(data + record)  # complete, but its index entries were never written
    with ContentStore(tmp_path, config=NO_DICTS) as store:
        assert store.recovered_records == len(urls)
        assert {store.entry(u).location.offset for u in urls} == {len(data)}  # type: ignore[union-attr]
        assert all(store.get(u) == b for u, b in zip(urls, bodies, strict=True))
        assert store.verify().ok


def _prose(seed: int, size: int = 30_000) -> bytes:
    """The synthetic web's padding (random words of its vocabulary): no passage repeats."""
    return f"<html><body>{_padding(random.Random(seed), (size, size), 0)}</body></html>".encode()


def _prose_store(root: Path, **opts: object) -> dict[str, bytes]:
    pages = {f"https://{site}.example/p/{i}": _prose(i + 10 * n) for n, site in enumerate("ab") for i in range(8)}
    with ContentStore(root, config=replace(NO_DICTS, group_bytes=300_000, **opts)) as store:  # type: ignore[arg-type]
        for url, body in pages.items():
            store.put(url, body, content_type="text/html", fetched_at_ms=0)
        store.recompress(older_than_s=0, tier="cold", now_ms=1)
        store.recompress(older_than_s=0, tier="archive", now_ms=2)
    return pages


def test_an_archive_group_of_prose_is_bzip2_when_smaller_and_reads_like_any_other(tmp_path: Path) -> None:
    """ADR 026: bzip2's context sort beats an LZ window on text without repeated passages; only
    the archive tier tries it, and only keeps it when it is smaller."""
    pages = _prose_store(tmp_path / "bz")
    _prose_store(tmp_path / "zstd", archive_bzip2=False)
    sizes = {}
    for name, kind in (("bz", KIND_GROUP_BZIP2), ("zstd", KIND_GROUP)):
        root = tmp_path / name
        with ContentStore(root, config=NO_DICTS) as store:
            headers = group_headers(root, store)
            assert len(headers) == 2 and {(h.kind, h.dict_id) for h in headers.values()} == {(kind, 0)}
            assert all(store.get(url) == body for url, body in pages.items())
            assert store.verify().ok
            assert store.rebuild_index() == len(pages)
            assert all(store.get(url) == body for url, body in pages.items())
            sizes[name] = store.stats().segment_bytes
    assert sizes["bz"] < sizes["zstd"]


def test_a_damaged_bzip2_group_is_quarantined_and_the_other_groups_stay_readable(tmp_path: Path) -> None:
    pages = _prose_store(tmp_path)
    with ContentStore(tmp_path, config=NO_DICTS) as store:
        loc = store.entry("https://a.example/p/3").location  # type: ignore[union-attr]
    seg = tmp_path / "segments" / loc.segment
    data = bytearray(seg.read_bytes())
    header = decode_record_header(data, loc.offset)
    assert isinstance(header, GroupHeader) and header.kind == KIND_GROUP_BZIP2
    data[loc.offset + header.header_size + header.frame_size // 2] ^= 0x55
    seg.write_bytes(bytes(data))
    with ContentStore(tmp_path, config=NO_DICTS) as store:
        lost = {url for url in pages if url.startswith("https://a.")}
        for url, body in pages.items():
            if url in lost:
                with pytest.raises(ChecksumMismatch):  # a bzip2 block is checked as a whole
                    store.get(url)
            else:
                assert store.get(url) == body
        report = store.verify()
        assert [(p.segment, p.offset, p.kind) for p in report.problems] == [(loc.segment, loc.offset, "corrupt")]


def test_bzip2_groups_are_decoded_once_however_many_of_their_pages_are_read_in_turn() -> None:
    """The reader keeps the last bzip2 groups' decoders: page after page of one group (export,
    maintenance) continues the decoding instead of starting over."""
    import bz2

    from crawlstream.store._reader import Bzip2Groups

    contents = [_prose(i, 200_000) for i in range(3)]
    frames = [bz2.compress(c, 9) for c in contents]
    groups = Bzip2Groups(size=2)
    for upto in (10, 5_000, 150_000, len(contents[0])):  # one group, read further each time
        assert groups.prefix(("s", 0, 1), frames[0], upto)[:upto] == contents[0][:upto]
    assert groups.prefix(("s", 9, 2), frames[1], 100)[:100] == contents[1][:100]
    assert groups.prefix(("s", 18, 3), frames[2], 100)[:100] == contents[2][:100]  # the first is dropped
    assert groups.prefix(("s", 0, 1), frames[0], 70_000)[:70_000] == contents[0][:70_000]  # decoded anew
    # the same place with another frame (a segment number reused after its file was removed)
    assert groups.prefix(("s", 0, 4), frames[1], 50)[:50] == contents[1][:50]
    cut = frames[2][: len(frames[2]) // 2]  # (a damaged frame never gets here: its checksum fails first)
    for _ in range(2):  # a frame that fails is not kept
        with pytest.raises(ChecksumMismatch):
            groups.prefix(("s", 27, 5), cut, len(contents[2]))
    with pytest.raises(ChecksumMismatch):  # the members need more than the frame holds
        groups.prefix(("s", 36, 6), frames[1], len(contents[1]) + 1)


@pytest.mark.parametrize(("value", "expected"), [(None, True), ("false", False)])
def test_store_archive_bzip2_comes_from_the_settings(tmp_path: Path, value: str | None, expected: bool) -> None:
    from crawlstream.settings import load

    env = {"CRAWLSTREAM_DATA_DIR": str(tmp_path)}
    if value is not None:
        env["CRAWLSTREAM_STORE_ARCHIVE_BZIP2"] = value
    with open_store(load(env)) as store:
        assert store.config.archive_bzip2 is expected
