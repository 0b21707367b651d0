"""A real S3-compatible server on loopback (versitygw, posix backend) for tests, benchmarks and
``crawlstream local-s3``."""

from crawlstream.devtools.locals3._server import VERSITYGW_VERSION, LocalS3, find_versitygw

__all__ = ["VERSITYGW_VERSION", "LocalS3", "find_versitygw"]
