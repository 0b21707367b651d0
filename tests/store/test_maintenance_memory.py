"""The maintenance memory budget (``store.maintenance_memory_bytes``, ADR 021): what it bounds."""

from __future__ import annotations

from pathlib import Path

import zstandard as zstd

from crawlstream.store import ContentStore, StoreConfig
from crawlstream.store._dicts import DictionaryStore, capped_params
from crawlstream.store._training import sample_cap_bytes


def _page(i: int) -> bytes:
    return b"<html><body><nav>home | books | music</nav>" + b"".join(
        b"<div class=item><a href=/p/%d>item %d</a><span>$%d.99</span></div>" % (j, j * i, j) for j in range(150)
    )


def test_capped_compressor_tables_fit_the_cap_and_write_frames_the_shared_decompressor_reads(tmp_path: Path) -> None:
    samples = [_page(i) for i in range(300)]
    trained = zstd.train_dictionary(64 * 1024, samples, dict_id=32768)
    params = capped_params(22, len(trained.as_bytes()), 1 << 20)
    assert params is not None and (4 << params.hash_log) + (4 << params.chain_log) <= 1 << 20
    dicts = DictionaryStore(tmp_path / "dicts", fsync=False)
    dict_id = dicts.add("example.com", trained.as_bytes(), samples=len(samples), created_ms=0)
    codecs = dicts.private_codecs(table_bytes=1 << 20)
    body = b"".join(samples[:20])
    frame = codecs.compressor(22, dict_id).compress(body)
    header = zstd.get_frame_parameters(frame)
    assert header.dict_id == dict_id and header.content_size == len(body) and not header.has_checksum
    assert dicts.decompressor(dict_id).decompress(frame) == body


def test_a_small_memory_budget_bounds_batches_and_training_samples_but_not_the_dictionary_size(
    tmp_path: Path,
) -> None:
    """Budget 1 MiB: batches of at most 256 KiB of bodies, dictionary samples of at most 256 KiB;
    the dictionary is still sized from the whole domain."""
    pages = [(f"https://shop.example.com/p/{i}", _page(i)) for i in range(120)]
    total = sum(len(b) for _, b in pages)
    assert total > 2 * sample_cap_bytes(1 << 20)
    config = StoreConfig(
        warm_level=3, cold_level=3, archive_level=3, dict_min_samples=8, dict_size_bytes=1 << 20,
        maintenance_memory_bytes=1 << 20,
    )
    with ContentStore(tmp_path, config=config) as store:
        for url, body in pages:
            store.put(url, body, fetched_at_ms=0)
        steps = []
        store.maintain(ages_zero=True, progress=steps.append)
        assert len(steps) >= 4 and all(r.raw_bytes <= 256 * 1024 for r in steps)
        (info,) = store.dicts.infos()
        assert info.domain == "example.com"
        assert info.samples * len(_page(0)) <= sample_cap_bytes(1 << 20) < total
        # sized from the domain (1/8 of its bytes; zstd keeps at most what the samples hold), not from
        # the samples: 1/8 of them would be at most 32 KiB
        assert sample_cap_bytes(1 << 20) // 8 < info.size_bytes <= total // 8
        assert all(store.get(url) == body for url, body in pages)
        assert {e.location.tier for e in store.search()} == {"archive"}
