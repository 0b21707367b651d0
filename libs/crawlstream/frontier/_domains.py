"""Domain names that may become file names. Pure.

A domain reaches the file system as ``frontier/<partition>/<hh>/<domain>``, so it is checked
before any path is built: lowercase LDH labels (letters, digits, inner hyphens; punycode
``xn--`` labels are LDH), 1-63 characters each, at most 247 in all, no empty label (so no
``..``, no leading/trailing dot), hence no slash, backslash, NUL or other separator.

247, not DNS's 253: the compaction file ``<domain>~compact`` must fit the 255-byte file
name limit of Linux file systems (so must the priority lane ``<domain>~lane`` and its
rewrite file ``<domain>~lanetmp``: suffixes of 8 characters at most). Registered domains
(one label under a public suffix) stay far below either limit; only a hand-made name is
refused for it.
"""

from __future__ import annotations

import re

from crawlstream.errors import InvalidDomain

__all__ = ["COMPACT_SUFFIX", "LANE_SUFFIX", "LANE_TMP_SUFFIX", "MAX_DOMAIN_CHARS", "validate_domain"]

COMPACT_SUFFIX = "~compact"  # the frontier store's temporary file is <domain>~compact
LANE_SUFFIX = "~lane"  # a domain's priority lane
LANE_TMP_SUFFIX = "~lanetmp"  # the lane's compaction / rewrite file
MAX_DOMAIN_CHARS = 255 - max(len(COMPACT_SUFFIX), len(LANE_TMP_SUFFIX))  # 255: NAME_MAX of ext4, xfs, btrfs, tmpfs

_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
_DOMAIN_RE = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")


def validate_domain(domain: str) -> str:
    """Return ``domain`` unchanged if it is safe as a file name, else raise ``InvalidDomain``."""
    if not isinstance(domain, str) or not 0 < len(domain) <= MAX_DOMAIN_CHARS or not _DOMAIN_RE.fullmatch(domain):
        shown = domain[:80] if isinstance(domain, str) else type(domain).__name__
        raise InvalidDomain(
            f"expected a lowercase LDH domain name (labels of a-z, 0-9, inner '-', 1-63 chars, "
            f"{MAX_DOMAIN_CHARS} chars at most, IDNs as punycode), found {shown!r}; canonicalize the URL first"
        )
    return domain
