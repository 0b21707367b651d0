"""Object storage: the lake, the index and the store's archive tier in a local directory or on S3.

``parse_location`` turns a setting into a :class:`Location`; ``open_objects`` (the one factory)
gives the :class:`ObjectStore` every reader and writer of those data sets goes through: whole
and ranged reads, atomic publication, conditional creates and compare-and-swap (the commit
points), listing and deletes, each bounded by a deadline. ADR 029 says why it is built so.
"""

from crawlstream.objectstore._factory import (
    archive_location,
    finalize,
    index_location,
    lake_location,
    open_objects,
)
from crawlstream.objectstore._location import Location, parse_location
from crawlstream.objectstore._store import ObjectInfo, ObjectStore, RetryPolicy, is_checksum_failure

__all__ = [
    "Location",
    "ObjectInfo",
    "ObjectStore",
    "RetryPolicy",
    "archive_location",
    "finalize",
    "index_location",
    "is_checksum_failure",
    "lake_location",
    "open_objects",
    "parse_location",
]
