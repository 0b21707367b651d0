"""Durability primitives, written once: atomic file publication, record framing, locks, a
free-space floor.

* ``write_atomically`` / ``atomic_file`` / ``replacing`` (``_atomic``): the one temp + fsync +
  rename (+ directory fsync) behind every file a writer publishes whole: the content store's
  small files and dictionaries, the index versions and manifest, the lake's Parquet files, the
  Bloom snapshots, the frontier's compactions, the embedded bus's offsets and metadata, the API
  tokens file, crawl stats, the replay state, WARC exports, the migrator's checkpoints, the
  local Kafka cluster's state. No other module renames files (``tests/durable`` checks it).
* ``encode_frame`` / ``iter_frames`` (``_frames``): length + CRC32 framing with one torn-tail
  policy, used by the content store's logs, the frontier files, the revisit files and the
  parquet sink's staging log (the module docstring says what each does with damage).
* ``try_lock_exclusive`` (``_locks``): a flock that dies with its holder (the sink's staging
  directories, index version pins, ``crawlstream migrate``).
* ``fsync_dir``: make a new name in a directory durable (for append-only files).
* ``DiskFloor`` (``_space``): the free-space floor under which writers pause (the service
  loops, the index compactor) or refuse (``crawlstream index build``), ADR 033.
"""

from __future__ import annotations

from crawlstream.durable._atomic import atomic_file, fsync_dir, replacing, write_atomically
from crawlstream.durable._frames import FRAME_HEADER_SIZE, ByteOrder, Frame, encode_frame, iter_frames
from crawlstream.durable._locks import try_lock_exclusive
from crawlstream.durable._space import MIB, DiskFloor

__all__ = [
    "FRAME_HEADER_SIZE",
    "MIB",
    "ByteOrder",
    "DiskFloor",
    "Frame",
    "atomic_file",
    "encode_frame",
    "fsync_dir",
    "iter_frames",
    "replacing",
    "try_lock_exclusive",
    "write_atomically",
]
