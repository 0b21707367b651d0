"""Where one data set lives: a local directory or ``s3://bucket/prefix``.

Parsed once at start-up from a setting (``lake.uri``, ``index.uri``, ``store.archive_uri``), so a
typo is a ``ConfigError`` naming the value, never a failure deep in a request.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from crawlstream.errors import ConfigError

__all__ = ["Location", "parse_location"]

# S3's bucket naming rules (3-63 characters, lower case, digits, dots and hyphens).
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


@dataclass(frozen=True, slots=True)
class Location:
    """A local directory (``bucket`` empty, ``prefix`` its absolute path) or an S3 key prefix."""

    scheme: str  # "file" or "s3"
    bucket: str
    prefix: str  # s3: keys start with it (no leading or trailing '/'); file: the absolute directory

    @property
    def is_s3(self) -> bool:
        return self.scheme == "s3"

    @property
    def local_path(self) -> Path:
        if self.is_s3:
            raise ValueError(f"{self} is not a local directory")
        return Path(self.prefix)

    def join(self, rel: str) -> Location:
        """The location of ``rel`` (a '/'-separated relative path) under this one."""
        rel = rel.strip("/")
        if not rel:
            return self
        if self.is_s3:
            return Location("s3", self.bucket, f"{self.prefix}/{rel}" if self.prefix else rel)
        return Location("file", "", str(Path(self.prefix) / rel))

    def __str__(self) -> str:
        if self.is_s3:
            return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"
        return self.prefix


def parse_location(value: str | Path, *, setting: str = "location") -> Location:
    """``s3://bucket[/prefix]`` or a local path (made absolute); ``ConfigError`` naming ``setting``."""
    text = str(value).strip()
    if not text:
        raise ConfigError(f"{setting}: empty location; give a local path or s3://bucket/prefix")
    if "://" not in text:
        return Location("file", "", str(Path(text).expanduser().resolve()))
    scheme, _, rest = text.partition("://")
    if scheme.lower() == "file":
        return Location("file", "", str(Path(rest).expanduser().resolve()))
    if scheme.lower() not in ("s3", "s3a"):
        raise ConfigError(f"{setting}: {text!r} has scheme {scheme!r}; expected a local path or s3://bucket/prefix")
    bucket, _, prefix = rest.partition("/")
    if not _BUCKET.match(bucket):
        raise ConfigError(
            f"{setting}: {bucket!r} in {text!r} is not a valid S3 bucket name "
            "(3-63 characters: lower-case letters, digits, '.' and '-')"
        )
    prefix = prefix.strip("/")
    if "//" in prefix or any(part in (".", "..") for part in prefix.split("/")):
        raise ConfigError(f"{setting}: {text!r} has an empty, '.' or '..' path segment")
    return Location("s3", bucket, prefix)
