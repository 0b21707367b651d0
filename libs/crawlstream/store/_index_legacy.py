"""Migration from the index layout before ADR 036: ``index-<gen>.snap`` + ``index.log`` (store format 3).

A store of format 3 kept its url index in memory, persisted as a compacted snapshot (one zstd
frame of columns) named by the first record of ``index.log``, followed by put records and end
marks (``{"e": [segment, end]}``) since that snapshot. Its first open by this build reads them
once with the old loader (``read_legacy`` + ``fold``: the highest seq wins per URL, a tombstone
drops every put of its URL with a lower seq, tags from ops.log) into a new ``index.sqlite``,
then writes ``FORMAT`` 4 and removes the old files. Crash-safe by order: the database is
built as ``index.sqlite.migrating`` and renamed whole once committed; ``FORMAT`` changes
after the rename, the old files go last, so a kill at any point leaves either the old layout
(migrated again) or a complete database (the rest finished at the next open).

The snapshot writer (``encode_index_snapshot``, ``write_legacy_index``) is kept only so tests
can build a store of the old layout.
"""

from __future__ import annotations

import json
import logging
import struct
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import zstandard as zstd

from crawlstream.durable import replacing, write_atomically
from crawlstream.errors import BadDataError, ChecksumMismatch
from crawlstream.store._codec import UnsupportedFormat, encode_log_record
from crawlstream.store._config import StoreConfig
from crawlstream.store._index import UrlIndex
from crawlstream.store._index_db import INDEX_FILE
from crawlstream.store._logs import read_log
from crawlstream.store._model import Entry, Location
from crawlstream.store._urls import UrlParts

__all__ = [
    "LEGACY_FORMAT",
    "decode_index_snapshot",
    "encode_index_snapshot",
    "entry_record",
    "migrate_legacy_index",
    "write_legacy_index",
]

logger = logging.getLogger(__name__)

LEGACY_FORMAT = 3  # FORMAT's store_format for the snapshot + index.log layout
LEGACY_LOG = "index.log"
_MIGRATING = INDEX_FILE + ".migrating"
_SNAP_MAGIC = b"CSIX3\n"
_U32 = struct.Struct("<I")
_JSON_ERRORS = (ValueError, RecursionError)


def legacy_files(root: Path) -> list[Path]:
    return [root / LEGACY_LOG, *sorted(root.glob("index-*.snap*"))]


def migrate_legacy_index(
    root: Path, config: StoreConfig, key_of: Callable[[str], int], parts: Callable[[str], UrlParts]
) -> None:
    """Move the format-3 index of ``root`` into ``index.sqlite`` (see the module docstring); the caller
    holds the writer lock and writes ``FORMAT`` 4 afterwards, then calls ``remove_legacy_files``."""
    for stray in root.glob(_MIGRATING + "*"):
        stray.unlink()  # a migration killed before its rename: start it again
    if (root / INDEX_FILE).exists():
        return  # renamed whole: only FORMAT and the old files were left to do
    puts, ends, ok = read_legacy(root, key_of)
    ops = read_log(root / "ops.log")
    with replacing(root / INDEX_FILE, tmp=root / _MIGRATING) as building:
        index = UrlIndex(root, config, path=building)
        try:
            if ok:  # an unreadable snapshot migrates nothing: start-up re-indexes every segment, as it rebuilt
                entries, seq = fold(puts, ops, parts)
                index.load(entries)
                index.seq = seq
                for segment, end in ends.items():
                    index.indexed(segment, end)
            index.commit()
        finally:
            index.close()  # the last connection: the WAL is checkpointed into the file and removed
    logger.info(
        "content store %s: index migrated from snapshot + index.log to %s (%d puts)",
        root, INDEX_FILE, len(puts),
    )


def remove_legacy_files(root: Path) -> None:
    for path in legacy_files(root):
        path.unlink(missing_ok=True)


def read_legacy(root: Path, key_of: Callable[[str], int]) -> tuple[list[dict[str, Any]], dict[str, int], bool]:
    """(put records of the snapshot named by index.log, then of the log; indexed end per segment; snapshot ok)."""
    log = read_log(root / LEGACY_LOG)
    puts: list[dict[str, Any]] = []
    ends: dict[str, int] = {}
    ok = True
    if log and "snap" in log[0]:
        path = root / f"index-{int(log[0]['snap'])}.snap"
        log = log[1:]
        try:
            _, puts, snap_ends = decode_index_snapshot(path.read_bytes(), key_of)
            ends.update(snap_ends)
        except (OSError, ChecksumMismatch, UnsupportedFormat) as exc:
            logger.error("index snapshot %s unreadable (%s): re-indexing every segment", path, exc)
            return [], {}, False
    for rec in log:
        if "e" in rec:
            seg, end = str(rec["e"][0]), int(rec["e"][1])
            ends[seg] = max(end, ends.get(seg, 0))
            continue
        puts.append(rec)
        for key in ("l", "r"):
            if key in rec:
                seg, off, length = rec[key][0], rec[key][1], rec[key][2]
                ends[seg] = max(off + length, ends.get(seg, 0))
    return puts, ends, ok


def fold(
    puts: list[dict[str, Any]], ops: list[dict[str, Any]], parts: Callable[[str], UrlParts]
) -> tuple[Iterator[Entry], int]:
    """(the live entries, the highest seq): the highest seq wins per URL (a relocation, same seq later
    in the log, wins too); a tombstone drops every put of that URL with a lower seq, and its tags."""
    latest: dict[str, dict[str, Any]] = {}
    max_seq = 0
    for rec in puts:
        max_seq = max(max_seq, rec["q"])
        cur = latest.get(rec["u"])
        if cur is None or rec["q"] >= cur["q"]:
            latest[rec["u"]] = rec
    last_del: dict[str, int] = {}
    tags: dict[str, set[str]] = defaultdict(set)
    for op in sorted(ops, key=lambda o: o["q"]):
        max_seq = max(max_seq, op["q"])
        url = op["u"]
        if op["op"] == "del":
            last_del[url] = op["q"]
            tags.pop(url, None)
        elif op["op"] == "tag":
            tags[url].update(op["tags"])
        elif op["op"] == "untag":
            tags[url].difference_update(op["tags"])

    def live() -> Iterator[Entry]:
        for url, rec in latest.items():
            if rec["q"] > last_del.get(url, -1):
                entry = entry_from_record(rec, parts)
                entry.tags = set(tags.get(url, ()))
                yield entry

    return live(), max_seq


def entry_from_record(rec: dict[str, Any], parts: Callable[[str], UrlParts]) -> Entry:
    try:
        domain, path = (p := parts(rec["u"])).domain, p.path
    except BadDataError:
        domain, path = "", ""
    entry = Entry(
        url=rec["u"],
        url_key=rec["k"],
        location=Location.from_list(rec["l"]),
        content_hash=bytes.fromhex(rec["h"]),
        raw_size=rec["z"],
        seq=rec["q"],
        fetched_at_ms=rec["f"],
        domain=domain,
        path=path,
        content_type=rec.get("t"),
        title=rec.get("n"),
        status=rec.get("s"),
    )
    if "r" in rec:
        entry.record_segment = rec["r"][0]
        entry.record_bytes = int(rec.get("rb") or rec["r"][2])
    return entry


# ---------------------------------------------------------------------------------------------
# The old writer: kept for tests that build a store of the old layout.


def entry_record(e: Entry) -> dict[str, Any]:
    """The format-3 snapshot (and index.log put) record of a live entry."""
    rec: dict[str, Any] = {
        "u": e.url,
        "k": e.url_key,
        "q": e.seq,
        "l": e.location.to_list(),
        "h": e.content_hash.hex(),
        "z": e.raw_size,
        "f": e.fetched_at_ms,
        "t": e.content_type,
        "n": e.title,
        "s": e.status,
    }
    if e.record_segment:
        rec["r"] = [e.record_segment, 0, e.record_bytes]
    return rec


def write_legacy_index(
    root: Path,
    snapshot: list[dict[str, Any]],
    logged: list[dict[str, Any]],
    ends: dict[str, int],
    key_of: Callable[[str], int],
) -> None:
    """Write ``root``'s index as format 3 did: ``snapshot`` records in ``index-1.snap`` (with ``ends``),
    ``logged`` after it in ``index.log``. The caller removes ``index.sqlite`` and writes ``FORMAT`` 3."""
    write_atomically(root / "index-1.snap", encode_index_snapshot(1, snapshot, ends, key_of))
    log = encode_log_record({"snap": 1}) + b"".join(encode_log_record(r) for r in logged)
    write_atomically(root / LEGACY_LOG, log)
def encode_index_snapshot(
    gen: int, records: list[dict[str, Any]], ends: dict[str, int], key_of: Callable[[str], int]
) -> bytes:
    """The live index as one zstd frame of columns (sorted by URL so neighbours share prefixes).

    ``records`` are index put entries (the dicts of the log). url_keys are not stored when
    ``key_of(url)`` reproduces them; tiers are the segment's directory. ``ends`` maps each
    segment to the end of its last indexed record (start-up re-indexes records past it).
    """
    recs = sorted(records, key=lambda r: r["u"])
    segs: dict[str, int] = {}

    def seg_id(name: str) -> int:
        return segs.setdefault(name, len(segs))

    cols: dict[str, Any] = {k: [] for k in ("u", "q", "ls", "lo", "ll", "ld", "lm", "z", "f", "t", "n", "s")}
    kx: dict[str, int] = {}
    refs: dict[str, list[int]] = {}
    for i, r in enumerate(recs):
        try:
            same_key = key_of(r["u"]) == r["k"]
        except BadDataError:
            same_key = False
        if not same_key:
            kx[str(i)] = r["k"]
        loc = r["l"]
        cols["u"].append(r["u"])
        cols["q"].append(r["q"])
        cols["ls"].append(seg_id(loc[0]))
        cols["lo"].append(loc[1])
        cols["ll"].append(loc[2])
        cols["ld"].append(loc[3])
        cols["lm"].append(loc[5] if len(loc) > 5 else 0)
        cols["z"].append(r["z"])
        cols["f"].append(r["f"])
        cols["t"].append(r.get("t"))
        cols["n"].append(r.get("n"))
        cols["s"].append(r.get("s"))
        if "r" in r:
            refs[str(i)] = [seg_id(r["r"][0]), r["r"][1], r["r"][2]]
    head = {"gen": gen, "segs": list(segs), "ends": ends, "kx": kx, "r": refs, **cols}
    meta = json.dumps(head, separators=(",", ":"), ensure_ascii=False).encode()
    hashes = b"".join(bytes.fromhex(r["h"]) for r in recs)
    content = _SNAP_MAGIC + _U32.pack(len(meta)) + meta + hashes
    return zstd.ZstdCompressor(level=19, write_checksum=True).compress(content)


def decode_index_snapshot(
    data: bytes, key_of: Callable[[str], int]
) -> tuple[int, list[dict[str, Any]], dict[str, int]]:
    """Inverse of ``encode_index_snapshot``: (gen, put entries, segment ends).

    ChecksumMismatch if the snapshot is damaged (zstd content checksum, layout) and
    UnsupportedFormat if it is another layout version.
    """
    # Streamed, not ZstdDecompressor.decompress(): that allocates the content size written in
    # the frame header up front, and no checksum covers that field (a flipped bit asked for 1 TiB).
    dobj = zstd.ZstdDecompressor().decompressobj()
    try:
        content = dobj.decompress(data)
    except zstd.ZstdError as exc:
        raise ChecksumMismatch(f"index snapshot does not decompress: {exc}") from exc
    if not dobj.eof or dobj.unused_data:
        raise ChecksumMismatch(f"index snapshot of {len(data)} bytes is not exactly one whole zstd frame")
    if not zstd.get_frame_parameters(data).has_checksum:
        # Written with one; a flipped flag bit would switch the check off and let damage through.
        raise ChecksumMismatch("index snapshot frame has lost its content checksum flag")
    if not content.startswith(_SNAP_MAGIC):
        if content.startswith(b"CSIX"):
            raise UnsupportedFormat(f"index snapshot is layout {content[:5]!r}, this build reads {_SNAP_MAGIC[:5]!r}")
        raise ChecksumMismatch("index snapshot does not start with its magic")
    pos = len(_SNAP_MAGIC)
    if len(content) < pos + _U32.size:
        raise ChecksumMismatch(f"index snapshot of {len(content)} bytes ends inside its header")
    (meta_len,) = _U32.unpack_from(content, pos)
    pos += _U32.size
    try:
        head = json.loads(content[pos : pos + meta_len])
        segs: list[str] = head["segs"]
        n = len(head["u"])
        hashes = content[pos + meta_len :]
        if len(hashes) != 16 * n:
            raise ChecksumMismatch(f"index snapshot holds {len(hashes)} hash bytes for {n} entries")
        kx: dict[str, int] = head["kx"]
        refs: dict[str, list[int]] = head["r"]
        out: list[dict[str, Any]] = []
        for i in range(n):
            url = head["u"][i]
            seg = segs[head["ls"][i]]
            loc = [seg, head["lo"][i], head["ll"][i], head["ld"][i], seg.split("/", 1)[0]]
            if head["lm"][i]:
                loc.append(head["lm"][i])
            rec: dict[str, Any] = {
                "u": url,
                "k": kx[str(i)] if str(i) in kx else key_of(url),
                "q": head["q"][i],
                "l": loc,
                "h": hashes[16 * i : 16 * i + 16].hex(),
                "z": head["z"][i],
                "f": head["f"][i],
                "t": head["t"][i],
                "n": head["n"][i],
                "s": head["s"][i],
            }
            ref = refs.get(str(i))
            if ref is not None:
                rec["r"] = [segs[ref[0]], ref[1], ref[2]]
            out.append(rec)
        return int(head["gen"]), out, {str(k): int(v) for k, v in head["ends"].items()}
    # Wrong JSON types show up as any of these (an int where a str was: AttributeError; inf
    # where an int was: OverflowError); key_of's InvalidUrl is a ValueError.
    except (KeyError, IndexError, TypeError, AttributeError, OverflowError, *_JSON_ERRORS) as exc:
        raise ChecksumMismatch(f"index snapshot is malformed: {exc!r}") from exc
