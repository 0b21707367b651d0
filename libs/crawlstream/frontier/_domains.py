"""Domain names that may become file names. Pure.

A domain reaches the file system as ``frontier/<partition>/<hh>/<domain>``, so it is checked
before any path is built: lowercase LDH labels (letters, digits, inner hyphens; punycode
``xn--`` labels are LDH), 1-63 characters each, at most 253 in all, no empty label (so no
``..``, no leading/trailing dot), hence no slash, backslash, NUL or other separator.
"""

from __future__ import annotations

import re

from crawlstream.errors import InvalidDomain

__all__ = ["validate_domain"]

_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
_DOMAIN_RE = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")


def validate_domain(domain: str) -> str:
    """Return ``domain`` unchanged if it is safe as a file name, else raise ``InvalidDomain``."""
    if not isinstance(domain, str) or not 0 < len(domain) <= 253 or not _DOMAIN_RE.fullmatch(domain):
        shown = domain[:80] if isinstance(domain, str) else type(domain).__name__
        raise InvalidDomain(
            f"expected a lowercase LDH domain name (labels of a-z, 0-9, inner '-', 1-63 chars, "
            f"253 chars at most, IDNs as punycode), found {shown!r}; canonicalize the URL first"
        )
    return domain
