"""Step 5 of a build from the spilled units (ADR 031): the global domain ids and the files.

The units' sorted name lists are disjoint, so the global order is their k-way merge, done a
chunk at a time: take the next batch of every unit's list, cut at the smallest batch-last
name, sort the names up to the cut together (pyarrow), emit them. That streams
``domains.zst`` (a zstd stream with its size pledged up front), the DTDR index entries in
global order, and each unit's local -> global id map (to a spill file). Each postings block is
then encoded from its units' runs with global ids and written after the previous one. Peak
memory: the merge's batches, and the units or blocks in flight.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import zstandard

from crawlstream.index._build_blocks import BlockResult, load_runs
from crawlstream.index._formats import (
    CHECKSUM_CHUNK,
    DTDR_ENTRIES,
    DTDR_HEADER,
    PST_HEADER,
    SMALL_SET,
    Runs,
    checksum_entry,
    encode_block,
    postings_head_size,
    small_sets_section,
    starts_of,
)

__all__ = ["file_checksums_of", "merge_domains", "write_postings"]


class _BigTable:
    """A block's distinct roaring bitmaps, read from its spill one at a time."""

    def __init__(self, d: Path) -> None:
        self.offsets = np.fromfile(d / "big.idx", np.int64)
        self.fh = open(d / "big.bin", "rb")  # noqa: SIM115 - closed by close()

    def get(self, i: int) -> bytes:
        self.fh.seek(int(self.offsets[i]))
        return self.fh.read(int(self.offsets[i + 1] - self.offsets[i]))

    def close(self) -> None:
        self.fh.close()


class _Dtdr:
    """``domain_to_datasets.roar`` written in global domain order: the small sets' section
    (every block's distinct sets, sorted by key: known before the merge), the roaring bitmaps
    as first met, then the index entries (spilled, appended at the end), the header patched."""

    def __init__(self, path: Path, entries: Path, results: Sequence[BlockResult], n_domains: int) -> None:
        parts = [r.small_keys for r in results]
        keys = np.concatenate(parts) if parts else np.zeros((0, 2), np.uint64)
        cards = np.concatenate([r.small_card for r in results]) if parts else np.zeros(0, np.int64)
        order = np.lexsort((keys[:, 1], keys[:, 0]))
        new = np.ones(len(keys), bool)
        new[1:] = (keys[order][1:] != keys[order][:-1]).any(axis=1)
        where = np.empty(len(keys), np.int64)  # every block's set -> its rank among the distinct sets
        where[order] = np.cumsum(new) - 1
        keys, cards = keys[order[new]], cards[order[new]]
        section, sizes = small_sets_section(np.ascontiguousarray(keys).view("<u2").reshape(-1, SMALL_SET), cards)
        starts = DTDR_HEADER.size + starts_of(sizes)
        bounds = np.cumsum([0, *(len(p) for p in parts)])
        # per block: its small codes -> (start, len) in the file
        self.small = {r.unit: (starts[where[bounds[i] : bounds[i + 1]]], sizes[where[bounds[i] : bounds[i + 1]]])
                      for i, r in enumerate(results)}
        self.fh = open(path, "wb")  # noqa: SIM115 - closed by finish()
        self.fh.write(b"\0" * DTDR_HEADER.size)
        self.fh.write(section)
        self.offset = DTDR_HEADER.size + int(sizes.sum())
        self.n = n_domains
        self.big: dict[bytes, int] = {}
        self.entries_path = entries
        self.entries = open(entries, "wb")  # noqa: SIM115

    def add(self, start: np.ndarray, length: np.ndarray, bigs: list[bytes | None]) -> None:
        """Entries of the next domains in global order; ``bigs[i]``: the bitmap of a domain with
        ``start[i] < 0``."""
        for i in np.flatnonzero(start < 0).tolist():
            data = bigs[i]
            assert data is not None
            at = self.big.get(data)
            if at is None:
                at = self.big[data] = self.offset
                self.fh.write(data)
                self.offset += len(data)
            start[i], length[i] = at, len(data)
        e = np.zeros(len(start), DTDR_ENTRIES)
        e["start"], e["len"] = start, length
        self.entries.write(e.tobytes())

    def finish(self) -> None:
        from crawlstream.index._formats import DTDR_MAGIC, FORMAT_VERSION

        self.entries.close()
        with open(self.entries_path, "rb") as src:
            while piece := src.read(1 << 20):
                self.fh.write(piece)
        self.fh.seek(0)
        self.fh.write(DTDR_HEADER.pack(DTDR_MAGIC, FORMAT_VERSION, self.n, self.offset))
        self.fh.close()
        self.entries_path.unlink()


def merge_domains(results: Sequence[BlockResult], out: Path, spill: Path, *, level: int, chunk: int) -> None:
    """``out/domains.zst`` and ``out/domain_to_datasets.roar`` by the k-way merge of the blocks'
    sorted names, holding about ``chunk`` names of each block; each block's local -> global ids to
    ``<block dir>/map.bin`` (int64)."""
    n = sum(r.domains for r in results)
    total = sum(r.name_bytes for r in results) + max(0, n - 1)
    live = [r for r in results if r.domains]
    readers = {r.unit: pa.ipc.open_file(pa.OSFile(str(r.dir / "names.arrow"))) for r in live}
    next_batch = {r.unit: 0 for r in live}
    names: dict[int, pa.Array] = {}
    codes: dict[int, np.ndarray] = {}
    dtdr = _Dtdr(out / "domain_to_datasets.roar", spill / "dtdr-entries.bin", results, n)
    big_tables = {r.unit: _BigTable(r.dir) for r in live}
    dirs = {r.unit: r.dir for r in live}
    emitted = 0
    with open(out / "domains.zst", "wb") as fh:
        if n == 0:
            fh.write(zstandard.ZstdCompressor(level=level).compress(b""))
        writer = zstandard.ZstdCompressor(level=level).stream_writer(fh, size=total, closefd=False) if n else None
        while True:
            for b, reader in readers.items():
                # keep a batch's worth of every block: a leftover alone would make the next cut tiny
                while next_batch[b] < reader.num_record_batches and len(names.get(b, ())) < chunk:
                    batch = reader.get_batch(next_batch[b])
                    next_batch[b] += 1
                    if b in names:
                        names[b] = pa.concat_arrays([names[b], batch.column(0)])
                        codes[b] = np.concatenate([codes[b], batch.column(1).to_numpy()])
                    else:
                        names[b], codes[b] = batch.column(0), batch.column(1).to_numpy()
            if not names:
                break
            more = [b for b in names if next_batch[b] < readers[b].num_record_batches]
            cut = min((names[b][-1].as_py() for b in more), default=None)
            takes = {b: len(a) if cut is None else int(pc.sum(pc.less_equal(a, cut)).as_py() or 0)
                     for b, a in names.items()}
            blocks = [b for b in sorted(takes) if takes[b]]
            merged = pa.concat_arrays([names[b][: takes[b]] for b in blocks])
            order = pc.sort_indices(merged).to_numpy(zero_copy_only=False)
            rank = np.empty(len(order), np.int64)
            rank[order] = np.arange(len(order))
            start = np.empty(len(order), np.int64)
            length = np.empty(len(order), np.int64)
            bigs: list[bytes | None] = [None] * len(order)
            pos = 0
            for b in blocks:
                k = takes[b]
                c = codes[b][:k]
                s_tab, l_tab = dtdr.small[b]
                small = c >= 0
                g = rank[pos : pos + k]
                start[g[small]], length[g[small]] = s_tab[c[small]], l_tab[c[small]]
                start[g[~small]] = -1
                for j, code in zip(g[~small].tolist(), c[~small].tolist(), strict=True):
                    bigs[j] = big_tables[b].get(-1 - code)
                with open(dirs[b] / "map.bin", "ab") as mf:
                    mf.write((emitted + g).tobytes())
                pos += k
                names[b], codes[b] = names[b][k:], codes[b][k:]
                if not len(names[b]):
                    del names[b], codes[b]
            listed = pa.ListArray.from_arrays(pa.array([0, len(order)], pa.int32()), merged.take(pa.array(order)))
            text = pc.binary_join(listed, "\n")[0].as_buffer()  # one blob: no Python string per name
            assert writer is not None
            if emitted:
                writer.write(b"\n")
            writer.write(text)
            dtdr.add(start, length, bigs)
            emitted += len(order)
        if writer is not None:
            writer.flush(zstandard.FLUSH_FRAME)
    dtdr.finish()
    for t in big_tables.values():
        t.close()


def _encode_global(units: Sequence[BlockResult], level: int) -> bytes:
    """One postings block from its units' runs, renumbered with global ids: the units hold disjoint
    domains, so a stable sort by global id keeps each domain's (dataset, file) order."""
    did, ds, fid, rows, mf, mc = ([np.zeros(0, np.int64)] for _ in range(6))
    at = 0
    for r in units:
        runs = load_runs(r.dir)
        gmap = np.fromfile(r.dir / "map.bin", np.int64) if r.domains else np.zeros(0, np.int64)
        did.append(gmap[runs.domain_id] if len(runs) else runs.domain_id)
        ds.append(runs.dataset_id)
        fid.append(runs.file_id)
        rows.append(runs.rows)
        mf.append(runs.multi_first + at)
        mc.append(runs.multi_count)
        at += len(runs)
    d, m = np.concatenate(did), np.concatenate(mf)
    order = np.argsort(d, kind="stable")
    where = np.empty(len(order), np.int64)
    where[order] = np.arange(len(order))
    first = where[m]
    by_first = np.argsort(first, kind="stable")
    return encode_block(Runs(d[order], np.concatenate(ds)[order], np.concatenate(fid)[order],
                             np.concatenate(rows)[order], first[by_first], np.concatenate(mc)[by_first]), level=level)


def write_postings(results: Sequence[BlockResult], path: Path, *, shards: int, level: int, workers: int) -> None:
    """``postings.bin``: each block (its units, ``int(hh, 16) % shards``) encoded with global ids
    (``workers`` at a time, at most ``2 * workers`` ahead of the writer), written in order; the
    offsets patched at the end."""
    from crawlstream.index._formats import PST_MAGIC, PST_VERSION

    blocks: list[list[BlockResult]] = [[] for _ in range(shards)]
    for r in results:
        blocks[r.unit % shards].append(r)
    offsets = [postings_head_size(shards)]
    with open(path, "wb") as fh, ThreadPoolExecutor(max_workers=workers) as pool:
        fh.write(b"\0" * offsets[0])
        pending: list[Future[bytes]] = []
        for units in blocks:
            pending.append(pool.submit(_encode_global, units, level))
            if len(pending) < 2 * workers:
                continue
            data = pending.pop(0).result()
            fh.write(data)
            offsets.append(offsets[-1] + len(data))
        for f in pending:
            data = f.result()
            fh.write(data)
            offsets.append(offsets[-1] + len(data))
        fh.seek(0)
        fh.write(PST_HEADER.pack(PST_MAGIC, PST_VERSION, shards, 0) + struct.pack(f"<{len(offsets)}Q", *offsets))


def file_checksums_of(paths: dict[str, Path], *, blocks: int) -> dict[str, dict[str, Any]]:
    """``_formats.file_checksums`` of files on disk, read ``CHECKSUM_CHUNK`` at a time."""
    sums: dict[str, dict[str, Any]] = {}
    for name, path in paths.items():
        with open(path, "rb") as fh:
            sums[name] = checksum_entry(name, iter(partial(fh.read, CHECKSUM_CHUNK), b""), blocks=blocks)
    return sums
