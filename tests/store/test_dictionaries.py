"""Dictionary sizing and start-up preloading, on real files."""

from __future__ import annotations

from pathlib import Path

from crawlstream.store import ContentStore, StoreConfig


def _page(i: int) -> bytes:
    return (
        b"<html><head><title>page %d</title><link rel=stylesheet href=/s.css></head><body><nav>home | books | music"
        b"</nav>"
        % i
        + b"".join(
            b"<div class=item><a href=/p/%d>item %d</a><span>$%d.99</span></div>" % (j, j * i, j) for j in range(80)
        )
        + b"</body></html>"
    )


def _fill(root: Path, **kw: int) -> int:
    total = 0
    with ContentStore(root, config=StoreConfig(dict_min_samples=8, **kw)) as store:  # type: ignore[arg-type]
        for i in range(40):
            body = _page(i)
            total += len(body)
            store.put(f"https://shop.example.com/p/{i}", body, fetched_at_ms=0)
        assert store.recompress(0, now_ms=1).dictionaries_trained == 1
    return total


def test_domain_dictionary_is_sized_by_sample_bytes_over_the_divisor(tmp_path: Path) -> None:
    total = _fill(tmp_path, dict_sample_divisor=4, dict_size_bytes=1 << 20)
    with ContentStore(tmp_path) as store:
        (info,) = store.dicts.infos()
        assert info.domain == "example.com"
        assert total // 8 < info.size_bytes <= total // 4


def test_domain_dictionary_is_bounded_by_dict_size_bytes(tmp_path: Path) -> None:
    _fill(tmp_path, dict_sample_divisor=1, dict_size_bytes=8192)
    with ContentStore(tmp_path) as store:
        (info,) = store.dicts.infos()
        assert info.size_bytes <= 8192


def test_preloaded_dictionaries_are_ready_before_the_first_read(tmp_path: Path) -> None:
    _fill(tmp_path)
    with ContentStore(tmp_path) as store:
        (dict_file,) = (tmp_path / "dicts").glob("*.zdict.zst")
        dict_file.rename(dict_file.with_suffix(".moved"))  # a lazy load would now fail
        assert store.get("https://shop.example.com/p/3") == _page(3)
        assert store.entry("https://shop.example.com/p/3").location.dict_id != 0  # type: ignore[union-attr]


def test_compressors_of_one_dictionary_at_several_levels_all_write_decodable_frames(tmp_path: Path) -> None:
    """Each level gets its own precomputed dictionary: precompute_compress() on a shared one freed
    the CDict another level's compressor still used (frames with a garbage dictionary id)."""
    import zstandard as zstd

    from crawlstream.store._dicts import DictionaryStore

    samples = [_page(i) for i in range(200)]
    trained = zstd.train_dictionary(16 * 1024, samples, dict_id=32768)
    dicts = DictionaryStore(tmp_path / "dicts", fsync=False)
    dict_id = dicts.add("example.com", trained.as_bytes(), samples=len(samples), created_ms=0)
    for round_ in range(3):
        for level in (3, 22, 19):
            body = b"".join(samples[round_ * 10 : round_ * 10 + 10])
            frame = dicts.compressor(level, dict_id).compress(body)
            assert zstd.get_frame_parameters(frame).dict_id == dict_id
            assert dicts.decompressor(dict_id).decompress(frame) == body


def test_the_global_dictionary_learns_from_every_domain_not_only_the_first_three_quarters(tmp_path: Path) -> None:
    """Samples reach the trainer sorted by domain; zstd's default split trained on the first 75% of
    them only, so the domains sorted last were missing from the global dictionary (ADR 021)."""
    import random

    import zstandard as zstd

    def marker(d: int) -> bytes:
        return random.Random(d).randbytes(600).hex().encode()  # this domain's own text, in each of its pages

    with ContentStore(tmp_path, config=StoreConfig(dict_sample_divisor=2, cold_level=3, archive_level=3)) as store:
        for d in range(40):
            for p in range(2):
                body = b"<html><body>" + marker(d) + b"<p>page %d</p>" % p + _page(p)
                store.put(f"https://site{d:02d}.example{d:02d}.org/{p}", body, fetched_at_ms=0)
        assert store.recompress(0, tier="archive", now_ms=1).dictionaries_trained == 1
        (info,) = store.dicts.infos()
        assert info.domain == "*"
    (dict_file,) = (tmp_path / "dicts").glob("*.zdict.zst")
    raw = zstd.ZstdDecompressor().decompress(dict_file.read_bytes())
    learned = [d for d in range(40) if marker(d)[100:140] in raw]
    assert len([d for d in learned if d < 30]) >= 25
    assert len([d for d in learned if d >= 30]) >= 8  # none with the default split
